"""How much memory the KV cache takes, and how GQA, MQA and MLA shrink it.

The formula (per layer, per sequence, fp32 = 4 bytes per number)::

    MHA / GQA / MQA:  bytes = 2 (K and V) × T tokens × kv_heads × E × 4
    MLA (DeepSeek-V2, arXiv:2405.04434 §2.1): bytes = T × (d_c + d_R) × 4, one latent of d_c numbers
                      and one shared RoPE key of d_R numbers per token, with d_c = 4E and d_R = E/2 there

``kv_heads`` = H is multi-head attention, 1 < kv_heads < H grouped-query attention (Ainslie et al.
2023, arXiv:2305.13245), kv_heads = 1 multi-query attention (Shazeer 2019, arXiv:1911.02150).

Measured: attnkit's :class:`~attnkit.modules.multihead.MultiHeadAttention` with ``kv_heads`` of H,
H/4 and 1 runs a T-token prompt into a :class:`~attnkit.cache.StaticCache` of T slots, and the
cache's own byte count (``kv_nbytes``) is recorded beside the formula's. attnkit has no MLA module
here, so MLA's row is the formula alone, named as such.

Shapes: prompt (B=1, T, D=H·E); cache K and V (B=1, kv_heads, T, E).
"""

from __future__ import annotations

import torch

from ...page.html import table
from ...page.i18n import tr

FP32 = 4


def formula_bytes(tokens: int, kv_heads: int, head_dim: int) -> int:
    return 2 * tokens * kv_heads * head_dim * FP32


def mla_bytes(tokens: int, head_dim: int) -> int:
    """DeepSeek-V2's sizes: latent d_c = 4E, decoupled RoPE key d_R = E/2."""
    return tokens * (4 * head_dim + head_dim // 2) * FP32


def measure(tokens: int, dim: int = 512, heads: int = 8) -> list[dict]:
    """One row per kv_heads in (H, H/4, 1): the cache's measured bytes after a ``tokens``-token prompt, and the formula's."""
    from ...cache import StaticCache
    from ...modules.multihead import MultiHeadAttention

    E = dim // heads
    rows = []
    for kv in (heads, max(1, heads // 4), 1):
        torch.manual_seed(0)
        mha = MultiHeadAttention(dim, heads, kv_heads=kv, batch_first=True).eval()
        cache = StaticCache(tokens)
        with torch.no_grad():
            mha(torch.randn(1, tokens, dim), cache=cache, causal=True)
        rows.append({"kv_heads": kv, "heads": heads, "head_dim": E, "tokens": tokens,
                     "measured": int(cache.kv_nbytes), "formula": formula_bytes(tokens, kv, E)})
    return rows


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def memory_html(rows: list[dict], lang: str) -> str:
    """The formula, then the table of measured and computed cache sizes (with MLA's formula row)."""
    if not rows:
        return ""
    H, E, T = rows[0]["heads"], rows[0]["head_dim"], rows[0]["tokens"]
    kind = {H: ("MHA", "MHA"), 1: ("MQA", "MQA")}
    body = [[f"{kind.get(r['kv_heads'], ('GQA', 'GQA'))[lang == 'zh']} (kv_heads = {r['kv_heads']})", _mib(r["measured"]), _mib(r["formula"]),
             f"{r['formula'] / rows[0]['formula']:.3f}×"] for r in rows]
    mla = mla_bytes(T, E)
    body.append([tr(lang, "MLA (latent 4E + RoPE key E/2; formula only)", "MLA（潜在向量 4E + RoPE 键 E/2；仅公式）"), "—", _mib(mla),
                 f"{mla / rows[0]['formula']:.3f}×"])
    intro = "<p>" + tr(
        lang,
        f"What the cache costs in memory, per layer and per sequence: <b>2 × T × kv_heads × E × bytes per number</b> (K and V, "
        f"T tokens, kv_heads key/value heads of size E). With H = {H} heads of E = {E} in fp32 and T = {T:,} tokens, measured "
        "from attnkit's cache after a prompt of that length. Grouped-query attention (GQA) lets several query heads share one "
        "key/value head, multi-query attention (MQA) keeps one, and multi-head latent attention (MLA) caches one small latent "
        "per token instead of per-head keys and values:",
        f"缓存占多少内存（每层、每条序列）：<b>2 × T × kv_heads × E × 每个数的字节数</b>（K 和 V，T 个词元，kv_heads 个大小为 E 的键/值头）。"
        f"这里 H = {H} 个头，E = {E}，fp32，T = {T:,} 个词元，数值取自 attnkit 的缓存在处理这么长的提示之后的实际大小。"
        "分组查询注意力（GQA）让多个查询头共用一个键/值头，多查询注意力（MQA）只保留一个，多头潜在注意力（MLA）则每个词元只缓存一个小的潜在向量，"
        "而不是每个头的键和值：") + "</p>"
    head = [tr(lang, "attention", "注意力"), tr(lang, "measured cache", "实测缓存"), tr(lang, "formula", "公式"),
            tr(lang, "vs MHA", "相对 MHA")]
    return intro + table(head, body)
