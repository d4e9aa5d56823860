"""第 6 课练习的解答。作为脚本运行；每个答案都打印出验证它的数值。"""

import numpy as np

rng = np.random.default_rng(6)
L = S = 96
E, block = 8, 16
q, k, v = rng.standard_normal((L, E)), rng.standard_normal((S, E)), rng.standard_normal((S, E))


def dense(q, k, v, causal=False):
    s = q @ k.T / np.sqrt(E)
    if causal:
        s = np.where(np.tril(np.ones((len(q), len(k)), bool)), s, -np.inf)
    w = np.exp(s - s.max(1, keepdims=True))
    return (w / w.sum(1, keepdims=True)) @ v


def online(q, k, v, causal=False, q0=0, k0=0):
    """Returns (out, m, ell, o); q0/k0 are the absolute positions of the first query and key."""
    m, ell, o, skipped = np.full((len(q), 1), -np.inf), np.zeros((len(q), 1)), np.zeros((len(q), v.shape[1])), 0
    for j0 in range(0, len(k), block):
        if causal and k0 + j0 > q0 + len(q) - 1:  # 整块都在所有查询的"未来"
            skipped += 1
            continue
        s = q @ k[j0 : j0 + block].T / np.sqrt(E)
        if causal:
            qi = q0 + np.arange(len(q))[:, None]
            kj = k0 + j0 + np.arange(s.shape[1])[None, :]
            s = np.where(kj <= qi, s, -np.inf)
        m_new = np.maximum(m, s.max(1, keepdims=True))
        a = np.exp(m - m_new)
        p = np.exp(s - m_new)
        ell, o, m = ell * a + p.sum(1, keepdims=True), o * a + p @ v[j0 : j0 + block], m_new
    return o / ell, m, ell, o, skipped


# 1. 因果情形：按查询块处理，才能跳过未来的键块
outs, skipped = [], 0
for i0 in range(0, L, block):
    out_i, *_, sk = online(q[i0 : i0 + block], k, v, causal=True, q0=i0)
    outs.append(out_i)
    skipped += sk
nb = L // block
assert np.abs(np.vstack(outs) - dense(q, k, v, True)).max() < 1e-12 and skipped == nb * (nb - 1) // 2
print(f"1. max |causal online - dense| = {np.abs(np.vstack(outs) - dense(q, k, v, True)).max():.1e}; "
      f"skipped {skipped} of {nb * nb} tiles (formula nb(nb-1)/2 = {nb * (nb - 1) // 2})")

# 2. lse = m + log(ell) 可恢复任何权重：w_ij = exp(s_ij - lse_i)
out, m, ell, o, _ = online(q, k, v)
lse = m + np.log(ell)
s_tile = q @ k[32:48].T / np.sqrt(E)
s_all = q @ k.T / np.sqrt(E)
w_true = np.exp(s_all - s_all.max(1, keepdims=True))
w_true /= w_true.sum(1, keepdims=True)
assert np.abs(np.exp(s_tile - lse) - w_true[:, 32:48]).max() < 1e-12
print("2. max |exp(s - lse) - true weights| on one tile =", np.abs(np.exp(s_tile - lse) - w_true[:, 32:48]).max())

# 3. 把两半换算到共同的最大值上再合并
_, m1, l1, o1, _ = online(q, k[: S // 2], v[: S // 2])
_, m2, l2, o2, _ = online(q, k[S // 2 :], v[S // 2 :])
mm = np.maximum(m1, m2)
merged = (o1 * np.exp(m1 - mm) + o2 * np.exp(m2 - mm)) / (l1 * np.exp(m1 - mm) + l2 * np.exp(m2 - mm))
assert np.abs(merged - dense(q, k, v)).max() < 1e-12
print("3. max |merged halves - dense| =", np.abs(merged - dense(q, k, v)).max())
