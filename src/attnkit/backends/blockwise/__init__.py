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

Masked keys and values never leak (:mod:`.loop.leaks`): scores are selected with ``torch.where``
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

This package, one room per idea:

* here: the entry point; every call goes to the first route of :data:`.routes.ROUTES` that serves
  it (explicit tile sizes select the tile loop), and the report names that route;
* :mod:`.routes`: one module per route behind one interface (:mod:`.routes.base`), each with its
  estimate beside it; the cost estimate ``auto`` reads (:mod:`.cost`) walks the same list. On CPU,
  calls with the plain dot score, no dropout and no returned weights run on PyTorch's fused flash
  kernel (:mod:`.kernel.eligible` says which, once): no mask, causal, banded windows, prefix-LM and
  other masks by their tile states; a relative-position bias (ALiBi, T5, Shaw; float32 / float64;
  no mask or one of key - query only) as a view of its values per offset, one kernel call per query
  block; any other additive bias evaluated per key chunk as the kernel's float mask, merged by
  log-sum-exp; the bias routes' gradients come from the tile loop's backward;
* :mod:`.kernel`: the pieces the fused routes share: the torch-version gate and self-test
  (:mod:`.kernel.gate`), the layout check shared with ``sdpa`` (:mod:`.kernel.layout`), the
  log-sum-exp merge, the gradients from the kernel's lse, segment masks, and the band, causal and
  tiles computations with their autograd functions;
* :mod:`.loop`: the Python tile loop (:mod:`.loop.run`): the call's plan and per-tile evaluation
  (:mod:`.loop.plan`), forward, backward, the autograd function (usable under
  ``torch.func.vmap``/``grad``), leak-proofing (:mod:`.loop.leaks`), the bias tensors that need
  gradients (:mod:`.loop.params`) and the optional dense-weights pass (:mod:`.loop.weights`);
* :mod:`.mask_witness`: the backward's check that the mask did not change since the forward.

Shape legend: B batch, H query heads, Hkv key/value heads (GQA: query head h reads kv head
h // (H / Hkv)), L queries, S keys, E query/key dim, Ev value dim; l, s: one tile's query and key
counts.
"""

from __future__ import annotations

from ...core.call import AttentionCall, _count, _with_sinks
from ...core.output import AttentionOutput, BackendResult, Report
from ..nonfinite import needs_exact, run_exact
from ..tiling import set_tile_sizes
from . import routes
from .cost import estimate
from .loop.params import bias_inputs
from .loop.run import run_tile_loop
from .mask_witness import witness

__all__ = ["blockwise_attention", "run", "supports", "estimate", "set_tile_sizes"]


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
    if block_q is not None or block_kv is not None:  # asking for tiles asks for the tile loop
        return run_tile_loop(call, block_q, block_kv, seed)
    route, plan = routes.planned(call)  # the first route of routes.ROUTES that serves the call
    return route.run(call, plan, seed)


def run(call: AttentionCall) -> BackendResult:
    return witness(call, _blockwise(call, None, None, None))  # the backward raises if the mask changes before it runs


def supports(call: AttentionCall) -> str | None:
    if call.bias is not None:
        return bias_inputs(call)[1]  # a bias whose gradients the per-tile backward cannot give exactly
    return None
