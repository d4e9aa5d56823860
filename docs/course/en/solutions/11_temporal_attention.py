"""Solutions to lesson 11's exercises. Run as a script; each answer prints the number that checks it."""

import os

import numpy as np
import statsmodels.datasets.co2 as co2_data
import torch

import attnkit

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"
series = co2_data.load_pandas().data["co2"].resample("MS").mean().interpolate()
diff = np.diff(series.to_numpy())
n_tr = int(0.8 * len(diff))
z = (diff - diff[:n_tr].mean()) / diff[:n_tr].std()
sd, T = diff[:n_tr].std(), 24
X = torch.tensor(np.stack([z[i : i + T] for i in range(len(z) - T)])[:, :, None], dtype=torch.float32)
Y = torch.tensor(z[T:], dtype=torch.float32)
split = int(0.8 * len(X))


class AttnLSTM(torch.nn.Module):
    def __init__(self, attention="general", hidden=32):
        super().__init__()
        self.lstm = torch.nn.LSTM(1, hidden, batch_first=True)
        self.kind = attention
        if attention == "general":
            self.score = attnkit.scores.GeneralScore(hidden)
        elif attention == "additive":
            self.score = attnkit.scores.AdditiveScore(hidden)
        self.head = torch.nn.Linear(hidden if attention is None else 2 * hidden, 1)

    def forward(self, x):
        h, _ = self.lstm(x)
        last = h[:, -1]
        if self.kind is None:
            return self.head(last)[:, 0], None
        res = attnkit.attention(last[:, None, None], h[:, None], h[:, None], score=self.score, return_weights=True)
        return self.head(torch.cat([last, res.out[:, 0, 0]], -1))[:, 0], res.weights[:, 0, 0]


def fit(kind, seed, steps=8 if SMALL else 300):
    torch.manual_seed(seed)
    m = AttnLSTM(kind)
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    for _ in range(steps):
        idx = torch.randint(0, split, (64,))
        loss = torch.nn.functional.mse_loss(m(X[idx])[0], Y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return m.eval()


def rmse(m):
    with torch.no_grad():
        return ((m(X[split:])[0] - Y[split:]) ** 2).mean().sqrt().item() * sd


# 1. seeds: mean and spread, before any claim
seeds = range(1 if SMALL else 3)
for kind in (None, "general"):
    r = [rmse(fit(kind, s)) for s in seeds]
    print(f"1. {str(kind):8s}: RMSE mean {np.mean(r):.3f} ppm, std {np.std(r):.3f} over {len(r)} seed(s)")

# 2. intervention: move one input and watch the forecast
m = fit("general", 0)
with torch.no_grad():
    base = m(X[split:])[0]
    for lag in (12, 3):
        x = X[split:].clone()
        x[:, T - lag] += 1.0
        assert (m(x)[0] - base).abs().mean() > 0
        print(f"2. +1 sd at lag {lag:2d}: mean |change of forecast| = {(m(x)[0] - base).abs().mean().item() * sd:.3f} ppm")

# 3. additive score: compare where the mass goes
for kind in ("general", "additive"):
    m = fit(kind, 0)
    with torch.no_grad():
        w = m(X[split:])[1].mean(0).numpy()[::-1]
    assert abs(w.sum() - 1) < 1e-5
    print(f"3. {kind:8s}: top lags {(np.argsort(w)[::-1][:3] + 1).tolist()}, max mean weight {w.max():.3f}")
