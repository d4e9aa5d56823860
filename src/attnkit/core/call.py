"""The attention call: validate once, describe the call, pick a backend, run it, report.

Shape legend (used across attnkit):

=====  ===========================================================
B      batch size
H      query heads
Hkv    key/value heads (H must be a multiple; Hkv < H is GQA, 1 is MQA)
L      query length
S      key/value length
E      query/key head dimension
Ev     value head dimension
=====  ===========================================================
"""

from __future__ import annotations

import contextlib

from dataclasses import dataclass

import torch

from . import call_cache, hooks
from .biases import ScoreModifier, as_modifier
from .checks import require_bool, require_dense_rank, require_finite_scale, require_floating, require_ndim, require_probability, require_tensor
from .checks import require_real_data, require_unambiguous_2d_mask
from .custom_checks import check_custom_functions
from .dispatch import choose, fresh_report
from .masks import Mask, as_mask
from .output import AttentionOutput, Report
from .scores import Score, as_score
from . import key_scores as _key_scores
from . import sinks as _sinks


@dataclass
class AttentionCall:
    """Everything a backend needs, validated. Backends read it and never mutate it."""

    q: torch.Tensor  # (B, H, L, E)
    k: torch.Tensor  # (B, Hkv, S, E)
    v: torch.Tensor  # (B, Hkv, S, Ev)
    score: Score
    mask: Mask | None
    bias: ScoreModifier | None
    scale: float
    dropout_p: float
    return_weights: bool
    memory_budget: int | None = None
    sinks: torch.Tensor | None = None  # (B|1, H, L|1) sink logits, applied in core from the backend's lse (.sinks)
    signature: int | None = None  # the serial of the call's .call_cache entry (None: validated and dispatched afresh)

    @property
    def shape(self) -> dict[str, int]:
        B, H, L, E = self.q.shape
        return {"B": B, "H": H, "Hkv": self.k.shape[1], "L": L, "S": self.k.shape[2], "E": E, "Ev": self.v.shape[3]}

    @property
    def groups(self) -> int:
        return self.q.shape[1] // self.k.shape[1]

    @property
    def L(self) -> int:
        return self.q.shape[2]

    @property
    def S(self) -> int:
        return self.k.shape[2]

    def expanded_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v with heads repeated to H (query head h reads kv head h // groups)."""
        g = self.groups
        if g == 1:
            return self.k, self.v
        return self.k.repeat_interleave(g, dim=1), self.v.repeat_interleave(g, dim=1)


_LEGEND = "(B, H, L, E) / (B, Hkv, S, E) / (B, Hkv, S, Ev)"


def make_call(
    q, k, v, *, score=None, mask=None, bias=None, scale=None, dropout_p=0.0, return_weights=False, memory_budget=None,
    sinks=None,
) -> AttentionCall:
    """Validate user input and build an :class:`AttentionCall`."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        require_tensor(name, t)
        require_ndim(name, t, 4, _LEGEND, "add a head axis with .unsqueeze(1) for single-head attention")
        require_floating(name, t)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got q={q.dtype}, k={k.dtype}, v={v.dtype}; cast them to one dtype")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got q={q.device}, k={k.device}, v={v.device}; move them with .to(device)")
    B, H, L, E = q.shape
    Bk, Hkv, S, Ek = k.shape
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k and v must agree on (B, Hkv, S), got k={tuple(k.shape)} and v={tuple(v.shape)}")
    if Bk != B:
        raise ValueError(f"q and k must have the same batch size B, got q B={B} and k B={Bk}")
    if Ek != E:
        raise ValueError(f"q and k must have the same head dim E, got q E={E} and k E={Ek}; project them to one size")
    if E == 0:
        raise ValueError(f"head dim E must be positive, got q of shape {tuple(q.shape)} with E=0; the default scale 1/sqrt(E) is undefined")
    if Hkv == 0 or H == 0:
        raise ValueError(f"q heads H and k/v heads Hkv must be positive, got H={H} and Hkv={Hkv}; every query head reads kv head h // (H / Hkv)")
    if H % Hkv != 0:
        raise ValueError(f"q heads H must be a multiple of k/v heads Hkv for GQA/MQA, got H={H} and Hkv={Hkv}; use Hkv dividing H")
    if min(L, S) == 0:
        raise ValueError(f"L and S must be positive, got L={L}, S={S}")
    sc = as_score(score)
    sc.check_head_dim(E)
    require_dense_rank("mask", mask)
    require_unambiguous_2d_mask(mask, B, L)
    m = as_mask(mask)
    require_real_data("mask", m, q.device)
    if m is not None:
        bs = m.batch_size
        if bs is not None and bs != B:
            raise ValueError(f"mask was built for batch size {bs} but q has B={B}; build the mask for this batch")
        _check_dense_shape("mask", m, L, S, B, H)
        m.predicate(L, S)  # building it checks per-sequence data against L, S before any backend runs
    for part in bias if isinstance(bias, (list, tuple)) else (bias,):
        require_dense_rank("bias", part)
    bm = as_modifier(bias)
    require_real_data("bias", bm, q.device)
    if bm is not None:
        if bm.num_heads is not None and bm.num_heads != H:
            raise ValueError(f"bias was built for num_heads={bm.num_heads} but q has H={H}; build it with num_heads={H}")
        _check_dense_shape("bias", bm, L, S, B, H)
        bm.score_mod(L, S)  # likewise: a dense bias built for another (L, S) fails here, not in a backend
    if m is not None or bm is not None:
        check_custom_functions(m, bm, B, H, L, S, q.device)
    s = require_finite_scale(scale)
    if memory_budget is not None and (isinstance(memory_budget, bool) or not isinstance(memory_budget, int) or memory_budget <= 0):
        raise ValueError(f"memory_budget must be a positive int of bytes or None (no cap), got {memory_budget!r}")
    sk = _sinks.check_sinks(sinks, B, H, L, q.device)
    return AttentionCall(
        q, k, v, sc, m, bm,
        s if s is not None else sc.default_scale(E),
        require_probability("dropout_p", dropout_p),
        require_bool("return_weights", return_weights),
        memory_budget,
        sk,
    )


def _check_dense_shape(name: str, obj: object, L: int, S: int, B: int, H: int) -> None:
    """Dense tensor masks/biases (attribute ``t``, 4-D) must broadcast to (B, H, L, S)."""
    t = getattr(obj, "t", None)
    if t is not None and not all(n in (1, want) for n, want in zip(t.shape, (B, H, L, S))):
        raise ValueError(f"{name} of shape {tuple(t.shape)} is not broadcastable to (B={B}, H={H}, L={L}, S={S}); reshape it")


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    score=None,
    mask=None,
    bias=None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    backend: str = "auto",
    return_weights: bool = False,
    memory_budget: int | None = None,
    sinks: torch.Tensor | None = None,
    return_key_scores: bool = False,
) -> AttentionOutput:
    """Attention of q over k, v: ``softmax(score(q, k) * scale + bias, masked) @ v``.

    q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev) → ``out`` (B, H, L, Ev).

    * ``score``: None (scaled dot), ``"dot"``, ``"cosine"`` or a :class:`~attnkit.core.scores.Score`.
    * ``mask``: a :class:`~attnkit.core.masks.Mask`, a bool tensor (True = may attend) or a predicate.
    * ``bias``: a score modifier (ALiBi, T5, Shaw, custom), a float tensor, or a list of them.
    * ``scale``: multiplies the score; default 1/sqrt(E) for scaled dot, 1 otherwise. Any finite
      real number, as in SDPA: 0 gives uniform attention over the allowed keys, negatives invert it.
    * ``backend``: ``"auto"`` or a registered name; ``report`` says which ran and why.
    * ``return_weights``: also return the (B, H, L, S) weights (rows of fully masked queries are 0).
    * ``memory_budget``: bytes of extra memory ``auto`` may plan for (default: ``attnkit.options``).
    * ``sinks``: attention-sink logits (H,) or (B|1, H, L|1): one more logit in every row's softmax
      with a zero value (gpt-oss, StreamingLLM), so rows may attend to nothing: ``out`` and
      ``weights`` scale by sigmoid(lse - sink) and the returned ``lse`` includes the sink
      (:mod:`attnkit.core.sinks`). Differentiable, the sinks included: ``auto`` picks a backend whose lse
      carries gradients, and a fully masked row stays 0.
    * ``return_key_scores``: also return ``key_scores`` (B, H, S), the weights summed over the query
      rows (what H2O and SnapKV rank keys by), computed in O(n) memory by a second pass over tiles
      with the final log-sum-exp (:mod:`attnkit.core.key_scores`); no backend materializes (L, S).

    B = 0 returns empty tensors without running a backend; on the ``meta`` device only shapes flow.

    Masked keys never leak: key/value rows that no query of their head may see (padding, unused
    cache slots) are zeroed first, so a NaN or inf there changes no output and no gradient. A value
    row that some query may see is not covered: its NaN reaches every query row of the head in that
    column, also rows the mask hides it from (causal: earlier rows), since their weight is 0 and
    0 · NaN = NaN, as in ``softmax(scores) @ v``; a fully masked row stays 0. Every backend gives
    the same NaN positions.
    """
    # enable_grad() inside inference mode records nothing, yet the backends' autograd.Functions would try to
    # save inference tensors and the sinks' check would want an lse with gradients: no_grad says what holds
    # (Dynamo cannot trace the inference-mode query, hence the compiling test first)
    with torch.no_grad() if _grad_enabled() and not _compiling() and _inference() else _AS_IS:
        return _attend(q, k, v, score, mask, bias, scale, dropout_p, backend, return_weights, memory_budget, sinks,
                       return_key_scores)


def _attend(q, k, v, score, mask, bias, scale, dropout_p, backend, return_weights, memory_budget, sinks, return_key_scores):
    """:func:`attention`'s body, under the grad mode it chose."""
    call, chosen, report = _prepare(q, k, v, score, mask, bias, scale, dropout_p, backend, return_weights, memory_budget, sinks)
    if q.shape[0] == 0:  # B = 0: nothing to compute; the chosen backend is still the one that would run
        report.reason += "; B=0, empty result (backend not run)"
        report.fully_masked_rows = 0
        result = _empty_output(call, report)
    else:
        res = chosen.run(call)
        report.materialized = res.materialized
        report.fully_masked_rows = _count(res.fully_masked_rows)
        if res.route is not None:
            report.reason += f"; ran: {res.route}"
        result = AttentionOutput(res.out, res.weights, res.lse, report)
    if call.sinks is not None:
        result = _with_sinks(call, result)
    # --- key scores: column sums of the weights, from the final lse, tile by tile ---
    if require_bool("return_key_scores", return_key_scores):
        result.key_scores = _key_scores.key_scores(call, result.lse) if q.shape[0] else q.new_zeros(0, q.shape[1], call.S)
    # --- end key scores ---
    if hooks._OBSERVERS:  # a plain list test: free, and traceable by torch.compile
        if torch.compiler.is_compiling():
            from . import traced  # loads torch._dynamo, already loaded while tracing

            if traced.constant(_observed_here):  # another thread's capture must not break this thread's graph
                traced.notify_eagerly(call, result)  # observers are Python code: outside the graph
        elif hooks.has_observers():  # observers (attnkit.inspect.capture) see the finished call; output unchanged
            hooks.notify(call, result)
    return result


_AS_IS = contextlib.nullcontext()  # reusable: it holds no state
_inference = torch.is_inference_mode_enabled  # read on every call: bound once
_grad_enabled = torch.is_grad_enabled
_compiling = torch.compiler.is_compiling


def _prepare(q, k, v, score, mask, bias, scale, dropout_p, backend, return_weights, memory_budget, sinks):
    """(call, backend, report): validated and chosen afresh, or for a plain call whose signature was
    seen before, taken from :mod:`.call_cache` (the same validation and choice, without redoing them)."""
    sig = None
    if score is None and bias is None and sinks is None and return_weights is False and memory_budget is None and (
            type(dropout_p) in (float, int) and dropout_p == 0):
        sig = call_cache.signature(q, k, v, mask, scale, backend)
    if sig is not None:
        hit = call_cache.lookup(*sig)
        if hit is not None:
            # a tensor mask: wrapped again, so the call reads the live tensor (equal to the entry's copy)
            m = mask if isinstance(mask, Mask) else as_mask(mask)
            call = AttentionCall(q, k, v, hit.score, m, None, hit.scale, 0.0, False, None, None, hit.serial)
            return call, hit.backend, fresh_report(hit.report)
    call = make_call(
        q, k, v, score=score, mask=mask, bias=bias, scale=scale, dropout_p=dropout_p,
        return_weights=return_weights, memory_budget=memory_budget, sinks=sinks,
    )
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a string name, got {type(backend).__name__}")
    chosen, report = choose(call, backend)
    if sig is not None:
        call.signature = call_cache.next_serial()
        entry = call_cache.Entry(call.mask, call.score, call.scale, chosen, fresh_report(report), call_cache.frozen(sig[1]), call.signature)
        call_cache.store(sig[0], entry)
    return call, chosen, report


def _with_sinks(call: AttentionCall, res: AttentionOutput) -> AttentionOutput:
    """``res`` with the call's sinks applied (:func:`attnkit.core.sinks.apply`). The backend's lse
    must exist and, when q or k need gradients, carry them: d(lse) is how the sink's gradient
    reaches q and k. A backend that declined sink calls in ``supports`` never gets here."""
    name = res.report.backend
    if res.lse is None:
        raise ValueError(
            f"backend {name!r} returned no log-sum-exp, which attention sinks need (sinks scale each row by "
            "sigmoid(lse - sink)); use backend='auto', 'reference' or 'blockwise' for calls with sinks"
        )
    if call.q.shape[0] > 0 and torch.is_grad_enabled() and (call.q.requires_grad or call.k.requires_grad) and not res.lse.requires_grad:
        raise ValueError(
            f"backend {name!r} returned a log-sum-exp without gradients, so the gradients of q and k would miss the "
            "attention sinks' share; use backend='auto', 'reference' or 'blockwise' for calls with sinks"
        )
    out, weights, lse = _sinks.apply(res.out, res.weights, res.lse, call.sinks)
    return AttentionOutput(out, weights, lse, res.report)


def _observed_here() -> bool:
    # read while tracing, as a constant (Dynamo cannot trace a ContextVar); the list length it
    # guards on changes whenever a capture opens or closes, which retraces
    return bool(hooks._ACTIVE.get())


def _count(n: object) -> int | torch.Tensor | None:
    """A backend's fully-masked-row count as an int; a 0-d tensor stays one under ``torch.compile``
    (reading it would break the graph), and a ``meta`` tensor or one inside torch.func.vmap/grad has no value to read (None)."""
    if not isinstance(n, torch.Tensor):
        return n
    if n.device.type == "meta":
        return None
    if torch.compiler.is_compiling():
        return n
    if torch._C._functorch.is_functorch_wrapped_tensor(n):
        return None  # under torch.func (vmap/grad): no single value to read
    return int(n)


def _empty_output(call: AttentionCall, report: Report) -> AttentionOutput:
    """The result of a B = 0 call: out (0, H, L, Ev), weights (0, H, L, S) when asked, lse (0, H, L).

    The zero-sized outputs still hang off q, k and v in autograd, so ``backward()`` through them
    works (and gives zero-sized gradients) as it would for any other batch."""
    q, k, v = call.q, call.k, call.v
    _, H, L, _ = q.shape
    anchor = (q.sum() + k.sum() + v.sum()) * 0  # 0-d, in the graph of q, k, v
    out = q.new_zeros((0, H, L, v.shape[-1])) + anchor
    weights = q.new_zeros((0, H, L, call.S)) + anchor if call.return_weights else None
    lse = q.new_zeros((0, H, L), dtype=torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype)
    return AttentionOutput(out, weights, lse, report)
