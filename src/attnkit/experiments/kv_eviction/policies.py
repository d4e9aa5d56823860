"""What each eviction policy keeps, for the step-by-step evaluation of ``kv_eviction``.

One :class:`KeptKV` per layer holds the kept keys **before** rotary, their values, their original
positions, and two statistics of the attention each key received: the sum over every query so far
(H2O's accumulated score) and the weights of the last ``obs`` queries (SnapKV's observation window).
Every step appends the new token, rotates the kept keys at their positions **in the cache**
(0..n-1, StreamingLLM §3.2), attends, records the weights, then asks its :class:`Policy` which
slots to keep. Positions in the cache are the ranks of the kept tokens, so after an eviction the
survivors simply move down; ``dense`` never evicts, so there the position in the cache is the
position in the stream.

Policies (``n`` = slots held after the new token is appended; each keeps at most its budget):

* ``dense`` — everything;
* ``window(w)`` — the last ``w``;
* ``sink_window(s, w)`` — the first ``s`` and the last ``w`` (StreamingLLM, Xiao et al. 2023,
  https://arxiv.org/abs/2309.17453);
* ``h2o(budget, recent)`` — the last ``recent`` and, per head, the ``budget - recent`` others with the
  largest accumulated attention (Zhang et al. 2023, https://arxiv.org/abs/2306.14048);
* ``snapkv(budget, window, kernel)`` — the last ``window`` and, per head, the others with the largest
  attention from the last ``window`` queries, average-pooled over ``kernel`` neighbouring keys (Li et
  al. 2024, https://arxiv.org/abs/2404.14469). SnapKV compresses a prompt once; on an endless stream
  the same rule is applied whenever the cache overflows;
* ``quantized`` (``bits`` 8 or 4) — ``sink_window``'s tokens, but all except the newest ``residual``
  read back from KIVI-packed storage (:mod:`attnkit.modules.kv_quant`) in blocks of ``group`` tokens.

Shape legend: B streams, H heads, n kept slots, E head dim; q, k, v of one step (B, H, 1, E).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from ...modules.kv_quant import roundtrip


@dataclass(frozen=True)
class Policy:
    """A rule: ``kind`` and its sizes. ``budget`` is the most slots it ever keeps (None: unbounded)."""

    kind: str
    budget: int | None = None
    sinks: int = 0
    recent: int = 0
    kernel: int = 1
    bits: int = 0
    group: int = 0

    def keep(self, kv: "KeptKV") -> torch.Tensor | None:
        """(B, H, m) sorted slot indices to keep, or None to keep all."""
        n = kv.k.shape[2]
        if self.budget is None or n <= self.budget:
            return None
        B, H = kv.k.shape[:2]
        dev = kv.k.device
        if self.kind in ("window", "sink_window", "quantized"):
            idx = torch.cat([torch.arange(self.sinks, device=dev), torch.arange(n - self.budget + self.sinks, n, device=dev)])
            return idx.expand(B, H, -1)
        if self.kind == "h2o":
            score = kv.acc
        elif self.kind == "snapkv":
            pooled = F.avg_pool1d(kv.obs_w.sum(-1).flatten(0, 1)[:, None], self.kernel, 1, self.kernel // 2, count_include_pad=False)
            score = pooled.view(B, H, n)
        else:
            raise ValueError(f"policy kind {self.kind!r} has no eviction rule")
        old = score[..., : n - self.recent]  # the recent ones are kept anyway
        top = old.topk(self.budget - self.recent, dim=-1).indices
        rec = torch.arange(n - self.recent, n, device=dev).expand(B, H, -1)
        return torch.cat([top, rec], -1).sort(-1).values


class KeptKV:
    """One layer's kept keys/values under ``policy``; :meth:`attend` is one decoding step."""

    def __init__(self, policy: Policy, obs: int = 1):
        self.policy, self.obs = policy, max(1, obs)
        self.k = self.v = self.pos = self.acc = self.obs_w = None
        self.seen = 0
        self.quantized_upto = 0  # slots [sinks... quantized_upto) have been read back from packed storage
        self.packed_bytes = 0

    @property
    def nbytes(self) -> int:
        """Bytes the kept keys/values would take: fp32, except quantized blocks at their packed size."""
        n, full = self.k.shape[2], self.k.nelement() * 4 + self.v.nelement() * 4
        if not self.quantized_upto:
            return full
        per_token = full // n
        return (n - self.quantized_upto) * per_token + self.quantized_upto * self.packed_bytes // self.policy.group

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rope) -> torch.Tensor:
        B, H, _, E = q.shape
        pos = torch.full((B, H, 1), self.seen, dtype=torch.long)
        if self.k is None:
            self.k, self.v, self.pos = k, v, pos
            self.acc, self.obs_w = q.new_zeros(B, H, 1), q.new_zeros(B, H, 1, self.obs)
        else:
            self.k, self.v = torch.cat([self.k, k], 2), torch.cat([self.v, v], 2)
            self.pos = torch.cat([self.pos, pos], 2)
            self.acc = torch.cat([self.acc, q.new_zeros(B, H, 1)], 2)
            self.obs_w = torch.cat([self.obs_w, q.new_zeros(B, H, 1, self.obs)], 2)
        self.seen += 1
        n = self.k.shape[2]
        if self.policy.kind == "quantized":
            self._quantize_old()
        kr = rope(self.k)  # (B, H, n, E) rotated at positions 0..n-1 in the cache (a table slice, no lookup)
        qr = rope(q, torch.tensor([n - 1]))
        w = torch.softmax((qr @ kr.transpose(-1, -2)).float() / E**0.5, -1)  # (B, H, 1, n)
        out = w.to(v.dtype) @ self.v  # (B, H, 1, E)
        self.acc += w[:, :, 0]
        self.obs_w = torch.cat([self.obs_w[..., 1:], w[:, :, 0, :, None]], -1)
        keep = self.policy.keep(self)
        if keep is not None:
            self._gather(keep)
        return out

    def _gather(self, idx: torch.Tensor) -> None:
        e = idx[..., None]
        self.k = self.k.gather(2, e.expand(-1, -1, -1, self.k.shape[-1]))
        self.v = self.v.gather(2, e.expand(-1, -1, -1, self.v.shape[-1]))
        self.pos, self.acc = self.pos.gather(2, idx), self.acc.gather(2, idx)
        self.obs_w = self.obs_w.gather(2, e.expand(-1, -1, -1, self.obs))
        if self.policy.kind == "quantized":
            self.quantized_upto = int((idx[0, 0] < self.quantized_upto).sum())  # kept slots already quantized

    def _quantize_old(self) -> None:
        """Replace each full block of ``group`` tokens older than the newest ``residual`` by what
        KIVI-packed storage reads back (keys per channel, values per token)."""
        p = self.policy
        n = self.k.shape[2]
        while n - p.recent - self.quantized_upto >= p.group:
            a, b = self.quantized_upto, self.quantized_upto + p.group
            self.k[:, :, a:b], kb = roundtrip(self.k[:, :, a:b], p.bits, dim=-2)
            self.v[:, :, a:b], vb = roundtrip(self.v[:, :, a:b], p.bits, dim=-1)
            self.quantized_upto = b
            self.packed_bytes = kb + vb  # bytes of one block: the cost per ``group`` tokens
