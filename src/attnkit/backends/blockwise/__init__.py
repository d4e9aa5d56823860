r"""The blockwise backend: FlashAttention's algorithm in plain PyTorch, exact, O(n) memory, any device.

FlashAttention — Dao et al. 2022, https://arxiv.org/abs/2205.14135; FlashAttention-2 (loop order,
deferred normalisation) — Dao 2023, https://arxiv.org/abs/2307.08691; the online softmax —
Milakov & Gimelshein 2018, https://arxiv.org/abs/1805.02867.

Derivation
----------
For one query row with scores :math:`s_j` (score · scale + bias, :math:`-\infty` where masked) the
output is :math:`o = \sum_j e^{s_j} v_j / \sum_j e^{s_j}`. Split the keys into tiles
:math:`T_1, T_2, \dots` and keep three running quantities after tile :math:`t`:

* the running max :math:`m_t = \max(m_{t-1}, \max_{j \in T_t} s_j)` (so no exponent is positive),
* the running sum :math:`\ell_t = e^{m_{t-1} - m_t}\,\ell_{t-1} + \sum_{j \in T_t} e^{s_j - m_t}`,
* the unnormalised output :math:`a_t = e^{m_{t-1} - m_t}\,a_{t-1} + \sum_{j \in T_t} e^{s_j - m_t} v_j`.

Rescaling by :math:`e^{m_{t-1} - m_t}` moves the previous partial sums to the new reference max, so
after the last tile :math:`o = a / \ell` and :math:`\mathrm{lse} = m + \log \ell` exactly — only
(l, Ev) accumulators per query block ever exist, never the (L, S) matrix. Two partial results over
disjoint key sets merge the same way (log-sum-exp merge):
:math:`\mathrm{lse} = \log(e^{\mathrm{lse}_1} + e^{\mathrm{lse}_2})`,
:math:`o = e^{\mathrm{lse}_1 - \mathrm{lse}} o_1 + e^{\mathrm{lse}_2 - \mathrm{lse}} o_2`.

Scores, max and lse are in natural units; each exponential is taken as :math:`e^{x} = 2^{x \log_2 e}`
after the shift by the running max (:func:`attnkit.core.online_softmax.exp_`). On this CPU fp32
``exp`` is 10–30× slower for inputs below −87 (masked or ALiBi-shifted scores, and −inf);
``exp2`` has no such slow path (ALiBi at 4k: 1,053 → 435 ms). Converting after the shift keeps the
conversion's rounding relative to :math:`|s - m|`; scores scaled by :math:`\log_2 e` up front
would carry an error relative to :math:`|s|` into every weight (at logits of a few hundred, several
times the error of the float32 reference).

Fully masked rows: the max is :math:`-\infty`; it is replaced by 0 before exponentiating, so
:math:`e^{-\infty - 0} = 0`, :math:`\ell = 0`, the output is 0 (divide by 1 where :math:`\ell = 0`) and
:math:`\mathrm{lse} = -\infty`. Never NaN, in the output or the gradients.

Half precision (bf16/fp16 inputs): q, k, v are copied to float32 first (O(n), twice the inputs),
so scores, the running max and sum, the output accumulator and the backward's
:math:`D = \mathrm{rowsum}(dO \circ O)` (from the unrounded float32 output) are all float32, as
in the reference; only the returned output is rounded. A bf16 score of ~100 is off by up to 0.25
otherwise (benchmarks/results/half_precision.json). CPU matmuls cannot write float32 from bf16
operands in torch 2.13 (``out_dtype`` is CUDA-only), so the GEMMs run in float32.

Masked keys and values never leak (:mod:`.leaks`): scores are selected with ``torch.where``
(NaN scores of masked pairs go too) and key/value rows no query of a tile may see are zeroed
before the products, in the forward and the backward (``0 · NaN`` is NaN).
Keys no query of a head may see (padding, unused cache slots) therefore never leak. A value row
some query may see is not covered: a NaN there reaches every row of its head as ``0 · NaN``, also
rows the mask hides it from (causal: earlier rows), as in the reference; tiles this backend skips
would hide it, so such calls take the reference's path (:mod:`attnkit.backends.nonfinite`).

Backward via the stored row statistics. With :math:`P_{ij} = e^{s_{ij} - m_i} / \ell_i` recomputed
per tile from the saved row max :math:`m_i` and sum :math:`\ell_i` (no second online pass is needed,
the normalisation is known; :math:`e^{s_{ij} - \mathrm{lse}_i}` would be as exact in real numbers,
but a float32 lse is off by half an ulp of :math:`|m_i|`, an error every weight of the row
inherits), and
:math:`dP_{ij} = dO_i \cdot v_j`:

* :math:`dV_j = \sum_i P_{ij}\, dO_i`,
* :math:`dS_{ij} = P_{ij} (dP_{ij} - D_i)` with :math:`D_i = \sum_j P_{ij} dP_{ij} = dO_i \cdot O_i`
  (one row-wise dot product on saved tensors),
* :math:`dq_i = \mathrm{scale} \sum_j dS_{ij} k_j`, :math:`dk_j = \mathrm{scale} \sum_i dS_{ij} q_i`,
* a gradient flowing into ``lse`` adds :math:`P_{ij}\, d\mathrm{lse}_i` to :math:`dS_{ij}`
  (:math:`\partial\,\mathrm{lse}_i / \partial s_{ij} = P_{ij}`); this is what makes returned weights
  differentiable.

For fully masked rows the saved max is :math:`-\infty` and the sum 0; the backward shifts by
:math:`+\infty` and scales by 0 there, so :math:`P = 0`. Saved tensors are q, k, v, out and the two
row statistics: O(n) training memory.
Scores with no dot form (additive), general score modifiers and biases with learned parameters are
differentiated per tile by autograd on the recomputed tile, with their parameters as inputs of the
``autograd.Function``.

Dropout (on the normalised weights, as the reference does) draws one keep-mask per tile from a
generator seeded by ``(seed, tile)``; the seed is drawn from torch's default generator, so
``torch.manual_seed`` makes it reproducible and the backward regenerates the same masks. With
dropout :math:`dV_j = \sum_i \tilde P_{ij} dO_i`, :math:`dS_{ij} = P_{ij}(Z_{ij} dP_{ij}/(1-p) - D_i)`,
where :math:`\tilde P = P Z / (1-p)` and still :math:`D_i = dO_i \cdot O_i`.

This package: the entry point (here), the call's plan and per-tile evaluation (:mod:`.plan`),
the forward (:mod:`.forward`), the backward (:mod:`.backward`), the autograd function
(:mod:`.function`, usable under ``torch.func.vmap``/``grad``), leak-proofing (:mod:`.leaks`), the discovery of bias tensors that need gradients (:mod:`.params`), the
optional dense-weights pass (:mod:`.weights`) and the cost estimate ``auto`` reads (:mod:`.cost`).

On CPU, calls with the plain dot score, no bias, no dropout and no returned weights run the same
algorithm on PyTorch's fused flash kernel instead of the Python tile loop (:mod:`.fused_function`:
no mask, causal, banded windows, and other masks by their tile states), behind a torch-version
gate and a one-time self-test (:mod:`.fused_gate`); explicit tile sizes select the tile loop.
Calls with a relative-position bias (ALiBi, T5, Shaw; float32 / float64; no mask, or one of
key - query only: causal, windows; otherwise the same conditions) run one kernel call per query
block with the block's bias as the kernel's float mask, a view of the bias's values per offset
(:mod:`.fused_relative`); their gradients come from the tile loop's backward. Other additive biases
(custom functions, dense tensors; the same conditions, masks that do not read the head) run one
kernel call per query block and key chunk with the bias evaluated on that chunk as the kernel's
float mask, merged by log-sum-exp (:mod:`.fused_custom`); the same backward.

Shape legend: B batch, H query heads, Hkv key/value heads (GQA: query head h reads kv head
h // (H / Hkv)), L queries, S keys, E query/key dim, Ev value dim; l, s: one tile's query and key
counts.
"""

from __future__ import annotations

import torch

from ...core.call import AttentionCall, _count, _with_sinks
from ...core.output import AttentionOutput, BackendResult, Report, materialized
from ...core.masks import from_cache_key
from ..nonfinite import needs_exact, run_exact
from ..tiling import EMPTY, PARTIAL, default_tiles, set_tile_sizes, tile_map
from .cost import estimate
from .function import _BlockwiseFunction, _BlockwiseFunctionCtx
from .fused_function import route_of, run_fused
from .fused_custom import custom_route_of, run_custom
from .fused_relative import relative_route_of, run_relative
from .leaks import live_key_rows
from .mask_witness import witness
from .params import bias_inputs, bias_tensors
from .plan import _Plan
from .weights import _weights

__all__ = ["blockwise_attention", "run", "supports", "estimate", "set_tile_sizes"]


_HALF = (torch.float16, torch.bfloat16)


def _code_rows(mask, L: int, S: int, bq: int, bk: int) -> tuple[tuple[int, ...], ...]:
    """The tile codes as Python ints. They describe the mask's structure, never q, k, v; under
    torch.compile they are computed once while tracing and are a constant of the graph (reading a
    traced tensor with .tolist() would break it), like :func:`attnkit.core.options.current`."""
    if torch.compiler.is_compiling():
        from ...core import traced  # loads torch._dynamo, already loaded while tracing

        # the mask goes in as its cache_key (Python constants), not as the object: a mask built
        # inside the compiled function exists only as Dynamo's model of it, with no attributes
        # a Python call could read; data masks have no key and no readable values while tracing
        key = None if mask is None else mask.cache_key
        return traced.constant(_tile_codes_of_key, mask is None, key, L, S, bq, bk)
    return _tile_codes(mask, L, S, bq, bk)


def _tile_codes(mask, L: int, S: int, bq: int, bk: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(row) for row in tile_map(mask, L, S, bq, bk).tolist())


def _tile_codes_of_key(no_mask: bool, key, L: int, S: int, bq: int, bk: int) -> tuple[tuple[int, ...], ...]:
    """:func:`_tile_codes` of the mask a cache_key rebuilds; every tile PARTIAL (evaluated: always
    correct) for a mask without a key of a built-in kind."""
    mask = None if no_mask else from_cache_key(key)
    if mask is None and not no_mask:
        nq, nk = -(-L // bq), -(-S // bk)
        return ((int(PARTIAL),) * nk,) * nq
    return _tile_codes(mask, L, S, bq, bk)


def _dropout_seed() -> int:
    """The per-call dropout seed (:func:`_draw_seed`); under torch.compile it is drawn outside the
    graph, and with ``fullgraph=True`` that is an error naming the reason
    (:mod:`attnkit.backends.blockwise.traced`)."""
    if torch.compiler.is_compiling():
        from .traced import dropout_seed  # loads torch._dynamo, already loaded while tracing

        return dropout_seed()
    return _draw_seed()


def _draw_seed() -> int:
    """The per-call dropout seed from torch's default generator (``torch.manual_seed`` reproduces it).
    An int, not a tensor: every tile's keep-mask comes from a generator seeded with it, in the
    forward and again in the backward. Reading it is a host sync."""
    return int(torch.randint(0, 2**62, (1,)).item())


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def blockwise_attention(
    call: AttentionCall,
    *,
    block_q: int | None = None,
    block_kv: int | None = None,
    seed: int | None = None,
) -> AttentionOutput:
    """Run blockwise attention on a validated call (:func:`attnkit.core.call.make_call`) and return
    :class:`AttentionOutput`, as :func:`attnkit.attention` does; tile sizes default per
    mask/dtype/device (:func:`attnkit.backends.tiling.default_tiles`); ``seed`` fixes dropout
    (default: drawn from torch's generator)."""
    if not isinstance(call, AttentionCall):
        raise TypeError(
            f"call must be an AttentionCall, got {type(call).__name__}; build it with "
            "attnkit.core.call.make_call(q, k, v, mask=..., ...), or call attnkit.attention(q, k, v, backend='blockwise')"
        )
    for name, val in (("block_q", block_q), ("block_kv", block_kv)):  # checked before `or` could read 0 as "automatic"
        if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val <= 0):
            raise ValueError(f"{name} must be a positive int tile size or None (automatic), got {val!r}")
    res = witness(call, _blockwise(call, block_q, block_kv, seed))
    path = res.route or "Python tile loop"  # the path that ran (fused kernel, bias route, tile loop)
    if needs_exact(call):
        path = "the reference's computation (non-finite inputs)"
    report = Report("blockwise", f"called directly (blockwise_attention); path: {path}", materialized=res.materialized,
                    fully_masked_rows=_count(res.fully_masked_rows))
    result = AttentionOutput(res.out, res.weights, res.lse, report)
    return _with_sinks(call, result) if call.sinks is not None else result  # as attnkit.attention applies them


def _blockwise(call: AttentionCall, block_q: int | None, block_kv: int | None, seed: int | None) -> BackendResult:
    if needs_exact(call):  # NaN/inf in q, k or v: the reference's result, as tiles and kernels differ (..nonfinite)
        return run_exact(call)
    route = route_of(call, block_q, block_kv)  # PyTorch's fused kernel where it serves the call (:mod:`.fused_function`)
    if route is not None:
        return run_fused(call, route, _blockwise)
    rel_route = relative_route_of(call, block_q, block_kv)  # a relative bias on the fused kernel (:mod:`.fused_relative`)
    if rel_route is not None:
        return run_relative(call, rel_route, lambda c: _blockwise(c, *default_tiles(c.mask, c.L, c.S, c.q.dtype, c.q.device), seed))
    custom_route = custom_route_of(call, block_q, block_kv)  # any other additive bias, per key chunk (:mod:`.fused_custom`)
    if custom_route is not None:
        return run_custom(call, custom_route, lambda c: _blockwise(c, *default_tiles(c.mask, c.L, c.S, c.q.dtype, c.q.device), seed))
    q, k, v = call.q, call.k, call.v
    B, H, L, E = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    dbq, dbk = default_tiles(call.mask, L, S, q.dtype, q.device)
    bq, bk = min(block_q or dbq, L), min(block_kv or dbk, S)
    for name, val in (("block_q", bq), ("block_kv", bk)):
        if isinstance(val, bool) or not isinstance(val, int) or val <= 0:
            raise ValueError(f"{name} must be a positive int, got {val!r}")
    code_rows = _code_rows(call.mask, L, S, bq, bk)
    codes = torch.tensor(code_rows, dtype=torch.int8)  # (nq, nk)
    kept = [[ki for ki, c in enumerate(row) if c != EMPTY] for row in code_rows]
    work = _work_dtype(q.dtype)
    kv = v
    if q.dtype in _HALF:
        # scores, running max/sum, the output accumulator and the backward's D in float32, as the
        # reference computes: a bf16 score of ~100 is off by up to 0.25. The float32 copies are
        # O(n) (2x the inputs); autograd casts their gradients back to the half dtype.
        q, k, kv = q.float(), k.float(), v.float()
    qk = call.score.as_dot(q, k)
    if qk is not None and qk[1] is not k and call.mask is not None:
        # k is transformed before the tiles see it (cosine): zero dead keys first, or the
        # transform's backward turns their NaN into NaN gradients (0 · NaN)
        live = live_key_rows(call.mask, code_rows, B, H, Hkv, L, S, bq, bk, q.device)
        qk = call.score.as_dot(q, torch.where(live, k, 0.0))
    bias_general = call.bias is not None and not call.bias.additive
    qscale = None
    if qk is None:  # additive score: q and k go in raw, the score module runs per tile
        qx, kx, score = q, k, call.score
        params = [p for p in call.score.parameters() if p.requires_grad]
    else:
        qx, kx = qk
        score = None
        params = []
        if not bias_general:  # the tiles scale q'k'ᵀ (plan.exp_scale), no scaled copy of q
            qscale = call.scale
    params += bias_tensors(call)
    if call.dropout_p > 0 and seed is None:
        seed = _dropout_seed()
    plan = _Plan(
        B, H, Hkv, L, S, bq, bk, codes, call.scale, score, call.bias, call.mask,
        call.dropout_p, seed or 0, work, qscale, kept,
    )
    plan.code_rows = code_rows
    fn = _BlockwiseFunctionCtx if torch.compiler.is_compiling() else _BlockwiseFunction
    out, lse, _, _ = fn.apply(plan, qx, kx, kv, *params)  # (row max, row sum) are the backward's
    out = out.to(v.dtype)
    weights, mats = None, []
    if call.return_weights:
        weights = _weights(plan, qx, kx, lse).to(v.dtype)
        mats.append(materialized("weights", weights))
    # a tensor, not int(): reading it would break torch.compile graphs and torch.func.vmap
    return BackendResult(out, weights, lse, torch.isneginf(lse).sum(), mats, route="Python tile loop")


def run(call: AttentionCall) -> BackendResult:
    return witness(call, _blockwise(call, None, None, None))  # the backward raises if the mask changes before it runs


def supports(call: AttentionCall) -> str | None:
    if call.bias is not None:
        return bias_inputs(call)[1]  # a bias whose gradients the per-tile backward cannot give exactly
    return None

