"""Packed integer quantization of cached keys and values, KIVI style.

Liu et al. 2024, "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache",
https://arxiv.org/abs/2402.02750 §3. Keys have a few channels with large magnitudes in every
token, so they are quantized **per channel** (one scale and zero per channel over a group of
tokens); values have no such channels and are quantized **per token** (one scale and zero per
token over its channels). Asymmetric min–max quantization with ``b`` bits over the reduced axis:

    scale = (max - min) / (2^b - 1),   code = round((x - min) / scale) ∈ {0, …, 2^b - 1},
    x̂ = code · scale + min,            |x - x̂| ≤ scale / 2.

Storage is really packed: 8-bit codes one per ``uint8``, 4-bit codes two per ``uint8`` (the even
coordinate of the last axis in the low nibble); scale and zero are kept in float16, as KIVI does,
so an (…, G, E) key block of 4 bits costs ``G·E/2 + 2·2·E`` bytes instead of ``4·G·E`` in fp32.

Shape legend: x (…, N, E); a key block reduces over N (tokens), a value block over E (channels).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

BITS = (8, 4)


class Packed(NamedTuple):
    """A quantized tensor: ``codes`` (uint8, last axis halved for 4 bits), ``scale`` and ``zero``
    (float16, size 1 on the reduced axis), ``bits`` and the original last-axis size ``width``."""

    codes: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor
    bits: int
    width: int

    @property
    def nbytes(self) -> int:
        return sum(t.nelement() * t.element_size() for t in (self.codes, self.scale, self.zero))


def check_bits(bits) -> int:
    if bits not in BITS:
        raise ValueError(f"bits must be 8 or 4 (int8, or two 4-bit codes per byte), got {bits!r}")
    return bits


def quantize(x: torch.Tensor, bits: int, dim: int) -> Packed:
    """x quantized with one (scale, zero) per slice along ``dim`` (``-2``: per channel over tokens,
    keys; ``-1``: per token over channels, values), packed into uint8."""
    check_bits(bits)
    lo = x.amin(dim, keepdim=True).to(torch.float16)
    hi = x.amax(dim, keepdim=True).to(torch.float16)
    # the scale is computed from the stored (float16) min/max so that dequantization reproduces it exactly
    scale = ((hi.float() - lo.float()) / (2**bits - 1)).to(torch.float16)
    safe = torch.where(scale > 0, scale.float(), torch.ones_like(scale, dtype=torch.float32))
    codes = ((x.float() - lo.float()) / safe).round().clamp(0, 2**bits - 1).to(torch.uint8)
    if bits == 4:
        if codes.shape[-1] % 2:
            codes = torch.nn.functional.pad(codes, (0, 1))
        codes = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return Packed(codes, scale, lo, bits, x.shape[-1])


def dequantize(p: Packed, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The values a packed tensor stands for, in ``dtype``."""
    codes = p.codes
    if p.bits == 4:
        codes = torch.stack((codes & 15, codes >> 4), -1).flatten(-2)[..., : p.width]
    return (codes.float() * p.scale.float() + p.zero.float()).to(dtype)


def roundtrip(x: torch.Tensor, bits: int, dim: int) -> tuple[torch.Tensor, int]:
    """(dequantize(quantize(x)), bytes stored): what a packed cache would read back, and its cost."""
    p = quantize(x, bits, dim)
    return dequantize(p, x.dtype), p.nbytes
