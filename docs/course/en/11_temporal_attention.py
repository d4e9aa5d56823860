# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 11 — Temporal attention in forecasting
#
# **Question this lesson answers:** when a model forecasts a time series, can attention let it look
# back at *specific* past steps, and which steps does it weigh?
#
# A plain LSTM forecaster reads the past window and predicts from its *last* hidden state only —
# the same fixed-vector bottleneck that Bahdanau attention removed in translation (lesson 2). Temporal
# attention keeps every hidden state `h_1 … h_T` of the window and lets the forecast pick:
#
# * query: the last hidden state `h_T` (what the forecaster knows now);
# * keys and values: all hidden states `h_t` (what each past step offers);
# * score: `h_T · W h_t / sqrt(d)` (Luong's general score, scaled), softmax over the `T` past steps;
# * forecast: a linear map of `[h_T ; Σ_t w_t h_t]`.
#
# Data: the monthly Mauna Loa CO₂ series shipped with statsmodels (offline), 1958–2001: a trend plus
# a yearly cycle, so lags of 12 months could matter. Whether the model uses them is what we look at.

# %%
import os
import sys

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # run as a script (or in the test suite): figures go to files, no window
import matplotlib.pyplot as plt
import numpy as np
import torch

import attnkit

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"  # the test suite runs every lesson small
OUT = os.environ.get("ATTNKIT_COURSE_OUT", "course_out")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(0)
torch.manual_seed(0)

import statsmodels.datasets.co2 as co2_data

# %% [markdown]
# ## The series and the windows
#
# Weekly readings with gaps, averaged to months and interpolated. We forecast the *change* over the
# next month from the changes over the past `T = 24` months (differencing removes the trend, so the
# model cannot just copy the last level). First 80 % of the windows train, the rest test.

# %%
series = co2_data.load_pandas().data["co2"].resample("MS").mean().interpolate()
diff = np.diff(series.to_numpy())
mu, sd = diff[: int(0.8 * len(diff))].mean(), diff[: int(0.8 * len(diff))].std()
z = (diff - mu) / sd  # standardised with training statistics only
assert abs(z[: int(0.8 * len(diff))].mean()) < 1e-9 and abs(z[: int(0.8 * len(diff))].std() - 1) < 1e-9
T = 24
X = np.stack([z[i : i + T] for i in range(len(z) - T)])[:, :, None]
Y = z[T:]
assert np.array_equal(X[1:, -1, 0], Y[:-1])
split = int(0.8 * len(X))
Xtr, Ytr, Xte, Yte = (torch.tensor(a, dtype=torch.float32) for a in (X[:split], Y[:split], X[split:], Y[split:]))
print(f"{len(series)} months, {len(X)} windows: {split} train, {len(X) - split} test")

fig, ax = plt.subplots(figsize=(7, 3), constrained_layout=True)
ax.plot(series.index, series.to_numpy())
ax.axvline(series.index[T + split], color="tab:red", ls="--", label="train | test")
ax.set_xlabel("year")
ax.set_ylabel("CO2 (ppm)")
ax.set_title("Mauna Loa CO2, monthly (statsmodels)")
ax.legend()
fig.savefig(f"{OUT}/11_series.png", dpi=110)
plt.show()

# %% [markdown]
# ## An LSTM with attention over past steps, from scratch

# %%
class AttnLSTM(torch.nn.Module):
    def __init__(self, hidden=32, attention=True):
        super().__init__()
        self.lstm = torch.nn.LSTM(1, hidden, batch_first=True)
        self.W = torch.nn.Linear(hidden, hidden, bias=False)
        self.attention = attention
        self.head = torch.nn.Linear(2 * hidden if attention else hidden, 1)

    def forward(self, x):  # x (B, T, 1)
        h, _ = self.lstm(x)  # (B, T, d): one state per past step
        last = h[:, -1]
        if not self.attention:
            return self.head(last)[:, 0], None
        scores = (self.W(h) @ last[:, :, None])[:, :, 0] / h.shape[-1] ** 0.5  # (B, T)
        w = torch.softmax(scores, dim=1)  # over past steps
        context = (w[:, :, None] * h).sum(1)
        return self.head(torch.cat([last, context], -1))[:, 0], w


def fit(model, steps):
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        idx = torch.randint(0, len(Xtr), (64,))
        loss = torch.nn.functional.mse_loss(model(Xtr[idx])[0], Ytr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        pred, w = model(Xte)
    return ((pred - Yte) ** 2).mean().sqrt().item() * sd, w  # RMSE back in ppm per month


steps = 20 if SMALL else 300
torch.manual_seed(0)
rmse_attn, weights = fit(AttnLSTM(attention=True), steps)
torch.manual_seed(0)
rmse_plain, _ = fit(AttnLSTM(attention=False), steps)
assert weights.std(0).max() > 0
assert weights.shape == (len(Xte), T) and torch.allclose(weights.sum(1), torch.ones(len(Xte)))
seasonal = np.sqrt(np.mean((z[split + T - 12 : len(z) - 12] - z[split + T :]) ** 2)) * sd  # "same month last year"
print(f"test RMSE of the monthly change (ppm): seasonal naive {seasonal:.3f} | LSTM {rmse_plain:.3f} | LSTM + attention {rmse_attn:.3f}")

# %% [markdown]
# One seed and one split are not a comparison: the numbers above say how this run went, not which
# model is better. Exercise 1 asks for the spread over seeds.
#
# ## Which past steps does it weigh?
#
# Each row of the heat map is one test window; each column a lag (1 = last month). The bar chart
# averages the rows.

# %%
w = weights.numpy()[:, ::-1]  # column 0 = lag 1 (most recent)
lags = np.arange(1, T + 1)
top = lags[np.argsort(w.mean(0))[::-1][:3]]
print("lags with the largest mean weight:", top.tolist(), "| uniform weight would be", round(1 / T, 3))
fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True, gridspec_kw={"width_ratios": [2, 1]})
im = axes[0].imshow(w, aspect="auto", cmap="viridis", extent=(0.5, T + 0.5, len(w), 0))
axes[0].set_xlabel("lag (months before the forecast)")
axes[0].set_ylabel("test window")
axes[0].set_title("temporal attention weights")
fig.colorbar(im, ax=axes[0], label="weight")
axes[1].bar(lags, w.mean(0))
axes[1].axhline(1 / T, color="tab:red", ls="--", label="uniform")
axes[1].set_xlabel("lag (months)")
axes[1].set_ylabel("mean weight")
axes[1].legend()
fig.savefig(f"{OUT}/11_lag_weights.png", dpi=110)
plt.show()

# %% [markdown]
# Read this map with care. The weights say how the context vector was mixed, not what drove the
# forecast: the LSTM's last state `h_T` reaches the output directly as well, and every `h_t` already
# summarises all steps before `t`, so "weight on lag 12" is not "the value 12 months ago". Attention
# is not explanation — to test a claim such as "the model uses the yearly cycle", change the input at
# lag 12 and measure how the forecast moves (exercise 2).
#
# ## Exercises
#
# 1. Train both models with three seeds and report the mean and spread of the test RMSE. Is the
#    attention model better by more than the spread?
# 2. An intervention test: add 1 (one standard deviation) to the input at lag 12, and separately at
#    lag 3, and measure the mean absolute change of the forecast. Does it agree with the weight map?
# 3. Replace the general score by Bahdanau's additive score (`attnkit.scores.AdditiveScore`) and
#    compare the weight maps.
#
# Solutions: `solutions/11_temporal_attention.py`.
