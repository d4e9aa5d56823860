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
# # 第 11 课 — 预测中的时间注意力
#
# **本课回答的问题：** 模型预测时间序列时，注意力能否让它回看*特定*的历史时间步？它又给哪些时间步
# 更大的权重？
#
# 普通的 LSTM 预测器读入历史窗口，却只用*最后一个*隐状态做预测——这正是 Bahdanau 注意力在翻译中消除
# 的那种定长向量瓶颈（第 2 课）。时间注意力保留窗口内每一个隐状态 `h_1 … h_T`，让预测自己挑选：
#
# * 查询：最后一个隐状态 `h_T`（预测器此刻掌握的信息）；
# * 键和值：全部隐状态 `h_t`（每个历史时间步能提供的信息）；
# * 打分：`h_T · W h_t / sqrt(d)`（Luong 的一般式打分再缩放），在 `T` 个历史步上做 softmax；
# * 预测：对 `[h_T ; Σ_t w_t h_t]` 做线性映射。
#
# 数据：statsmodels 自带（离线可用）的 Mauna Loa 月度 CO₂ 序列，1958–2001 年：一条趋势加上一年一次的
# 周期，所以滞后 12 个月的信息可能有用。模型到底用没用，要看结果。

# %%
import os
import sys

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # 作为脚本运行（或在测试中）：图写入文件，不弹窗口
import matplotlib.pyplot as plt
import numpy as np
import torch

import attnkit

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"  # 测试套件以小尺寸运行每一课
OUT = os.environ.get("ATTNKIT_COURSE_OUT", "course_out")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(0)
torch.manual_seed(0)

import statsmodels.datasets.co2 as co2_data

# %% [markdown]
# ## 序列与窗口
#
# 原始数据是有缺失的周度读数，按月平均后插值补齐。我们用过去 `T = 24` 个月的变化量预测下个月的变化量
# （差分去掉了趋势，模型就不能简单照抄上一期的水平）。前 80% 的窗口用于训练，其余用于测试。

# %%
series = co2_data.load_pandas().data["co2"].resample("MS").mean().interpolate()
diff = np.diff(series.to_numpy())
mu, sd = diff[: int(0.8 * len(diff))].mean(), diff[: int(0.8 * len(diff))].std()
z = (diff - mu) / sd  # 只用训练段的统计量做标准化
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
# ## 从零实现带时间注意力的 LSTM

# %%
class AttnLSTM(torch.nn.Module):
    def __init__(self, hidden=32, attention=True):
        super().__init__()
        self.lstm = torch.nn.LSTM(1, hidden, batch_first=True)
        self.W = torch.nn.Linear(hidden, hidden, bias=False)
        self.attention = attention
        self.head = torch.nn.Linear(2 * hidden if attention else hidden, 1)

    def forward(self, x):  # x (B, T, 1)
        h, _ = self.lstm(x)  # (B, T, d)：每个历史步一个状态
        last = h[:, -1]
        if not self.attention:
            return self.head(last)[:, 0], None
        scores = (self.W(h) @ last[:, :, None])[:, :, 0] / h.shape[-1] ** 0.5  # (B, T)
        w = torch.softmax(scores, dim=1)  # 在历史步上归一化
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
    return ((pred - Yte) ** 2).mean().sqrt().item() * sd, w  # RMSE 换算回 ppm/月


steps = 20 if SMALL else 300
torch.manual_seed(0)
rmse_attn, weights = fit(AttnLSTM(attention=True), steps)
torch.manual_seed(0)
rmse_plain, _ = fit(AttnLSTM(attention=False), steps)
assert weights.std(0).max() > 0
assert weights.shape == (len(Xte), T) and torch.allclose(weights.sum(1), torch.ones(len(Xte)))
seasonal = np.sqrt(np.mean((z[split + T - 12 : len(z) - 12] - z[split + T :]) ** 2)) * sd  # "去年同月"
print(f"test RMSE of the monthly change (ppm): seasonal naive {seasonal:.3f} | LSTM {rmse_plain:.3f} | LSTM + attention {rmse_attn:.3f}")

# %% [markdown]
# 一个随机种子、一种划分算不上比较：上面的数字只说明这一次运行的情况，并不说明哪个模型更好。练习 1
# 要求给出多个种子之间的波动。
#
# ## 它给哪些历史步更大的权重？
#
# 热力图的每一行是一个测试窗口，每一列是一个滞后（1 = 上个月）。柱状图是各行的平均。

# %%
w = weights.numpy()[:, ::-1]  # 第 0 列 = 滞后 1（最近一期）
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
# 读这张图要小心。权重说明的是上下文向量如何混合，而不是什么驱动了预测：LSTM 的最后状态 `h_T` 也直接
# 连到输出，而且每个 `h_t` 已经概括了 `t` 之前的所有时间步，所以"滞后 12 的权重"并不等于"12 个月前的
# 那个值"。注意力不等于解释——要检验"模型用到了年周期"之类的说法，应改变滞后 12 处的输入，测量预测
# 如何变化（练习 2）。
#
# ## 练习
#
# 1. 用三个随机种子分别训练两个模型，报告测试 RMSE 的均值和波动。注意力模型的优势是否超过了波动？
# 2. 干预测试：在滞后 12 处的输入上加 1（一个标准差），另做一次在滞后 3 处加 1，测量预测的平均绝对
#    变化。结果与权重图一致吗？
# 3. 把一般式打分换成 Bahdanau 的加性打分（`attnkit.scores.AdditiveScore`），比较两张权重图。
#
# 解答：`solutions/11_temporal_attention.py`。
