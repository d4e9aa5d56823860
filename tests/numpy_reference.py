"""An independent NumPy reference for attention, written from the papers, importing nothing of attnkit.

Attention is three steps (Bahdanau et al. 2015, https://arxiv.org/abs/1409.0473; Vaswani et al.
2017, https://arxiv.org/abs/1706.03762):

1. score     ``s[b, h, i, j] = score(q[b, h, i], k[b, h // g, j]) * scale + bias[b, h, i, j]``
2. normalise ``p[b, h, i, :] = softmax(s[b, h, i, :] over allowed j)``; masked ``p`` is exactly 0 and
   a query with no allowed key gets an all-zero row (attnkit's documented convention)
3. sum       ``o[b, h, i] = sum_j p[b, h, i, j] v[b, h // g, j]``

Scores (per query/key pair, computed in float64 with loops over heads to stay obviously correct):

* dot (Luong 2015, https://arxiv.org/abs/1508.04025): ``q·k``; scaled dot: ``q·k / sqrt(E)``
* general (Luong 2015): ``qᵀ W k`` with W (E, E) or per head (H, E, E)
* additive (Bahdanau 2015): ``vᵀ tanh(W_q q + W_k k + b_k)``
* cosine (Liu et al. 2022, Swin v2, https://arxiv.org/abs/2111.09883): ``τ · q·k / (|q| |k|)``

Masks are bool arrays (True = may attend) and biases dense float arrays, both broadcast to
(B, H, L, S). Also here: the mask and bias definitions written out position by position (causal,
sliding window, padding, documents, prefix-LM, ALiBi, T5 buckets, Shaw clipping), so attnkit's
vectorised predicates are checked against a second, loop-based reading of each paper.

Shape legend: q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev); H is a multiple of Hkv.
"""

from __future__ import annotations

import math

import numpy as np


# step 1: scores -----------------------------------------------------------------------------------
def _repeat_kv(x: np.ndarray, H: int) -> np.ndarray:
    """(B, Hkv, S, ·) → (B, H, S, ·): query head h reads key/value head h // (H / Hkv)."""
    g = H // x.shape[1]
    return np.repeat(x, g, axis=1)


def scores(q, k, kind: str = "scaled_dot", *, params: dict | None = None, scale: float | None = None) -> np.ndarray:
    """Raw scores (B, H, L, S) times ``scale`` (default 1/sqrt(E) for scaled dot, else 1)."""
    q = np.asarray(q, dtype=np.float64)
    k = _repeat_kv(np.asarray(k, dtype=np.float64), q.shape[1])
    p = params or {}
    B, H, L, E = q.shape
    S = k.shape[2]
    out = np.empty((B, H, L, S))
    for b in range(B):
        for h in range(H):
            qi, kj = q[b, h], k[b, h]  # (L, E), (S, E)
            if kind in ("dot", "scaled_dot"):
                s = qi @ kj.T
            elif kind == "general":
                W = np.asarray(p["W"], dtype=np.float64)
                W = W[h] if W.ndim == 3 else W
                s = qi @ W @ kj.T
            elif kind == "additive":
                Wq, Wk, bk, vv = (np.asarray(p[n], dtype=np.float64) for n in ("Wq", "Wk", "bk", "v"))
                s = np.empty((L, S))
                for i in range(L):
                    for j in range(S):
                        s[i, j] = vv @ np.tanh(Wq @ qi[i] + Wk @ kj[j] + bk)
            elif kind == "cosine":
                nq = np.maximum(np.linalg.norm(qi, axis=-1, keepdims=True), p.get("eps", 1e-6))
                nk = np.maximum(np.linalg.norm(kj, axis=-1, keepdims=True), p.get("eps", 1e-6))
                s = p.get("tau", 10.0) * (qi / nq) @ (kj / nk).T
            else:
                raise ValueError(f"unknown score kind {kind!r}")
            out[b, h] = s
    if scale is None:
        scale = 1.0 / math.sqrt(E) if kind == "scaled_dot" else 1.0
    return out * scale


# step 2: normalise --------------------------------------------------------------------------------
def masked_softmax(s: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
    """Softmax over the last axis restricted to ``allowed``; rows with nothing allowed are 0."""
    s = np.asarray(s, dtype=np.float64)
    allowed = np.ones(s.shape, dtype=bool) if allowed is None else np.broadcast_to(allowed, s.shape)
    allowed = allowed & (s > -np.inf)  # a -inf bias also removes a key
    out = np.zeros_like(s)
    flat_s, flat_a, flat_o = s.reshape(-1, s.shape[-1]), allowed.reshape(-1, s.shape[-1]), out.reshape(-1, s.shape[-1])
    for r in range(flat_s.shape[0]):
        a = flat_a[r]
        if not a.any():
            continue
        x = flat_s[r, a]
        e = np.exp(x - x.max())
        flat_o[r, a] = e / e.sum()
    return out


# step 3: weighted sum -----------------------------------------------------------------------------
def attention(q, k, v, kind: str = "scaled_dot", *, params=None, scale=None, mask=None, bias=None):
    """(out (B, H, L, Ev), weights (B, H, L, S)) in float64."""
    s = scores(q, k, kind, params=params, scale=scale)
    if bias is not None:
        s = s + np.broadcast_to(np.asarray(bias, dtype=np.float64), s.shape)
    w = masked_softmax(s, None if mask is None else np.asarray(mask, dtype=bool))
    vv = _repeat_kv(np.asarray(v, dtype=np.float64), s.shape[1])
    return w @ vv, w


# masks, position by position ----------------------------------------------------------------------
def query_position(i: int, L: int, S: int, align: str) -> int:
    """Absolute key-axis position of query i: i + S - L (bottom_right) or i (top_left)."""
    return i + S - L if align == "bottom_right" else i


def causal_mask(L: int, S: int, align: str = "bottom_right") -> np.ndarray:
    m = np.zeros((L, S), dtype=bool)
    for i in range(L):
        for j in range(S):
            m[i, j] = j <= query_position(i, L, S, align)
    return m


def sliding_window_mask(L, S, left, right, align="bottom_right") -> np.ndarray:
    m = np.zeros((L, S), dtype=bool)
    for i in range(L):
        p = query_position(i, L, S, align)
        for j in range(S):
            m[i, j] = (left is None or j >= p - left) and (right is None or j <= p + right)
    return m


def padding_mask(lengths, S: int, side: str = "right") -> np.ndarray:
    """(B, 1, 1, S): right padding keeps the first n keys, left padding the last n."""
    m = np.zeros((len(lengths), 1, 1, S), dtype=bool)
    for b, n in enumerate(lengths):
        if side == "right":
            m[b, 0, 0, :n] = True
        elif n:
            m[b, 0, 0, S - n:] = True
    return m


def document_mask(q_ids, kv_ids) -> np.ndarray:
    q_ids, kv_ids = np.atleast_2d(q_ids), np.atleast_2d(kv_ids)
    Bn = max(q_ids.shape[0], kv_ids.shape[0])
    L, S = q_ids.shape[1], kv_ids.shape[1]
    m = np.zeros((Bn, 1, L, S), dtype=bool)
    for b in range(Bn):
        for i in range(L):
            for j in range(S):
                m[b, 0, i, j] = q_ids[b % q_ids.shape[0], i] == kv_ids[b % kv_ids.shape[0], j]
    return m


def prefix_lm_mask(L, S, prefix: int, align="bottom_right") -> np.ndarray:
    """Every query sees the first ``prefix`` keys; after them, causal."""
    return causal_mask(L, S, align) | (np.arange(S)[None, :] < prefix)


# biases -------------------------------------------------------------------------------------------
def alibi_slopes(n: int) -> list[float]:
    """Press et al. 2022 (https://arxiv.org/abs/2108.12409), as in the authors' code: for a power of
    two n the slopes are 2^(-8/n · i), i = 1..n; otherwise the n' = 2^floor(log2 n) slopes followed
    by the odd-indexed (1st, 3rd, ...) slopes of 2n', up to n in all."""

    def pow2(m):
        return [2.0 ** (-8.0 * (i + 1) / m) for i in range(m)]

    lower = 1
    while lower * 2 <= n:
        lower *= 2
    return pow2(lower) + pow2(2 * lower)[0::2][: n - lower]


def alibi_bias(H, L, S, slopes=None, align="bottom_right") -> np.ndarray:
    slopes = alibi_slopes(H) if slopes is None else slopes
    out = np.zeros((1, H, L, S))
    for h in range(H):
        for i in range(L):
            for j in range(S):
                out[0, h, i, j] = -slopes[h] * abs(query_position(i, L, S, align) - j)
    return out


def t5_relative_position_bucket(relative_position: int, bidirectional=True, num_buckets=32, max_distance=128) -> int:
    """T5's ``_relative_position_bucket`` (Raffel et al. 2020, mesh-tensorflow), one integer at a
    time: relative_position = key position - query position."""
    ret = 0
    n = -relative_position
    if bidirectional:
        num_buckets //= 2
        if n < 0:
            ret += num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    val = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact))
    return ret + min(val, num_buckets - 1)


def t5_bias(table, L, S, *, bidirectional=True, num_buckets=32, max_distance=128, align="bottom_right") -> np.ndarray:
    table = np.asarray(table, dtype=np.float64)  # (num_buckets, H)
    H = table.shape[1]
    out = np.zeros((1, H, L, S))
    for i in range(L):
        for j in range(S):
            bucket = t5_relative_position_bucket(j - query_position(i, L, S, align), bidirectional, num_buckets, max_distance)
            out[0, :, i, j] = table[bucket]
    return out


def shaw_bias(table, L, S, max_distance, align="bottom_right") -> np.ndarray:
    """Shaw et al. 2018 (https://arxiv.org/abs/1803.02155): clip(j - i, -K, K) indexes a learned table."""
    table = np.asarray(table, dtype=np.float64)  # (2K + 1, H)
    H = table.shape[1]
    out = np.zeros((1, H, L, S))
    for i in range(L):
        for j in range(S):
            rel = max(-max_distance, min(max_distance, j - query_position(i, L, S, align)))
            out[0, :, i, j] = table[rel + max_distance]
    return out
