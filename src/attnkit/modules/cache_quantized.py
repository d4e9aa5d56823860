"""KIVI's cache: keys quantized per channel, values per token, the newest tokens in full precision.

Liu et al. 2024, https://arxiv.org/abs/2402.02750 (the quantizer and its packing are in
:mod:`~attnkit.modules.kv_quant`). Each row's tokens are stored in arrival order in two parts:

* a **packed** part: blocks of ``group`` tokens, keys as uint8 codes with one float16 scale and
  zero per channel of the block, values with one per token; 8-bit codes one per byte, 4-bit codes
  two per byte — what :attr:`QuantizedCache.nbytes` counts;
* a **residual** part in the input dtype: the newest tokens. When it holds ``residual + group``
  tokens, its oldest ``group`` are quantized into a new block, so the newest ``residual`` tokens
  are always exact (a key is quantized per channel only once a whole block of tokens exists).

Nothing is evicted: attention reads every token (the packed part dequantized), at its absolute
position, so the only change from :class:`~attnkit.modules.cache_kinds.DynamicCache` is the
rounding of the older keys and values (``|x - x̂| ≤ scale / 2`` per element). Rows of a batch may
hold different numbers of tokens; each quantizes its own blocks.

Shape legend: B batch, Hkv key/value heads, L new tokens, S tokens held, E / Ev head dims.
"""

from __future__ import annotations

import torch

from ..core.checks import require_positive_int
from .cache_base import CacheView, KVCache
from .kv_quant import Packed, check_bits, dequantize, quantize


class QuantizedCache(KVCache):
    """All tokens, the older ones KIVI-quantized to ``bits`` (8 or 4) in blocks of ``group``."""

    kind = "quantized"

    def __init__(self, bits: int = 4, group: int = 32, residual: int = 32):
        self.bits = check_bits(bits)
        self.group, self.residual = require_positive_int("group", group), require_positive_int("residual", residual)
        super().__init__()

    def reset(self) -> None:
        super().reset()
        self._blocks: list[list[tuple[Packed, Packed]]] = []  # per row: its packed (key, value) blocks
        self._fk: list[torch.Tensor] = []  # per row: residual keys (Hkv, n, E)
        self._fv: list[torch.Tensor] = []
        self._rows_pos: list[torch.Tensor] = []  # per row: absolute positions of every token held

    def _allocate(self, k, v) -> None:
        B, Hkv, _, E = k.shape
        self._k, self._v = k.new_zeros(B, Hkv, 0, E), v.new_zeros(B, Hkv, 0, v.shape[3])  # shape/dtype holders
        self._pos = torch.zeros(B, 0, dtype=torch.long, device=k.device)
        self._blocks = [[] for _ in range(B)]
        self._fk = [k.new_zeros(Hkv, 0, E) for _ in range(B)]
        self._fv = [v.new_zeros(Hkv, 0, v.shape[3]) for _ in range(B)]
        self._rows_pos = [torch.zeros(0, dtype=torch.long, device=k.device) for _ in range(B)]

    def _write(self, k, v, positions, valid, count) -> CacheView:
        for b in range(k.shape[0]):
            cols = slice(None) if valid is None else valid[b]
            self._fk[b] = torch.cat([self._fk[b], k[b][:, cols]], 1)
            self._fv[b] = torch.cat([self._fv[b], v[b][:, cols]], 1)
            self._rows_pos[b] = torch.cat([self._rows_pos[b], positions[b][cols]])
            while self._fk[b].shape[1] >= self.residual + self.group:
                g = self.group
                # keys: one scale per channel over the block's tokens; values: one per token over its channels
                self._blocks[b].append((quantize(self._fk[b][:, :g], self.bits, dim=-2), quantize(self._fv[b][:, :g], self.bits, dim=-1)))
                self._fk[b], self._fv[b] = self._fk[b][:, g:].clone(), self._fv[b][:, g:].clone()
        self.lengths = self.lengths + count
        if valid is not None:
            self._uniform = None
        elif self._uniform is not None:
            self._uniform += k.shape[2]
        self.peak_nbytes = max(self.peak_nbytes, self.nbytes)
        return self.view()

    def _row(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        dt = self._fk[b].dtype
        ks = [dequantize(pk, dt) for pk, _ in self._blocks[b]] + [self._fk[b]]
        vs = [dequantize(pv, dt) for _, pv in self._blocks[b]] + [self._fv[b]]
        return torch.cat(ks, 1), torch.cat(vs, 1)

    def view(self) -> CacheView:
        """Every token held, the packed ones dequantized: k (B, Hkv, S, E), v, positions, validity."""
        B, Hkv, _, E = self._k.shape
        S = int(self.lengths.max())
        k = self._k.new_zeros(B, Hkv, S, E)
        v = self._v.new_zeros(B, Hkv, S, self._v.shape[3])
        pos = torch.zeros(B, S, dtype=torch.long, device=k.device)
        for b in range(B):
            n = int(self.lengths[b])
            k[b, :, :n], v[b, :, :n] = self._row(b)
            pos[b, :n] = self._rows_pos[b]
        if self._uniform is not None:
            return CacheView(k, v, pos, None, True, True)
        ok = torch.arange(S, device=k.device)[None, :] < self.lengths[:, None]
        return CacheView(k, v, pos, None if bool(ok.all()) else ok, False, False)

    @property
    def kv_nbytes(self) -> int:
        """Bytes of the stored keys and values: packed blocks (codes, scales, zeros) plus the residual."""
        if self._k is None:
            return 0
        packed = sum(pk.nbytes + pv.nbytes for row in self._blocks for pk, pv in row)
        return packed + sum(t.nelement() * t.element_size() for t in (*self._fk, *self._fv))

    @property
    def nbytes(self) -> int:
        return self.kv_nbytes + sum(p.nelement() * p.element_size() for p in self._rows_pos)

    def reorder(self, indices) -> None:
        self._require_init("reorder()")
        idx = [int(i) for i in torch.as_tensor(indices).tolist()]
        self._blocks = [list(self._blocks[i]) for i in idx]
        self._fk, self._fv = [self._fk[i] for i in idx], [self._fv[i] for i in idx]
        self._rows_pos = [self._rows_pos[i] for i in idx]
        t = torch.tensor(idx, device=self._k.device)
        self._k, self._v, self._pos = self._k[t], self._v[t], self._pos[t]
        self.lengths, self.next_positions = self.lengths[t], self.next_positions[t]
