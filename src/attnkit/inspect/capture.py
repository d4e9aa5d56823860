"""Capture attention weights — or O(n) per-row summaries — from any model that calls attnkit.

Fused kernels (SDPA, flash) never form the (L, S) weight matrix, which is why timm's fused path
and transformers' ``sdpa`` return no weights. :func:`capture` keeps the model on its fast
backend and records *beside* it: :func:`attnkit.attention` tells the capture about every finished
call (:mod:`attnkit.core.hooks`), and the capture recomputes from the call's own q, k, score,
mask, bias and sinks what it was asked to keep (:mod:`attnkit.inspect.recompute`):

* **weights** ``P = softmax(score(q, k)·scale + bias, mask)`` (B, H, L, S), by the reference
  backend, when ``B·H·L·S ≤ max_elements`` (or the call already returned them); with attention
  sinks the softmax has the sink's column too, so each row of P sums to ``sigmoid(lse − sink)`` < 1;
* otherwise **row summaries** (:class:`~attnkit.inspect.metrics.RowSummary`: entropy, max weight,
  top-k keys, sink mass, distance, mass), computed tile by tile with
  :class:`~attnkit.inspect.metrics.RowSummaryAccumulator` — the (L, S) matrix never exists; peak
  extra memory is one tile, B·H·l·s ≤ ``tile_elements``.

The row log-sum-exp is the accumulator's own (online softmax, written out in
:mod:`attnkit.inspect.metrics`): ``lse_i = m_i + log Σ_j exp(s_ij − m_i)`` with ``m_i`` the running
max, rescaled by ``exp(m − m')`` whenever a tile raises it.

Which layer a call belongs to: the capture lists the model's attention modules (attnkit
``MultiHeadAttention`` instances and the innermost modules whose class name ends in
``Attention``, in ``named_modules()`` order — the layer index), installs forward pre/post hooks on
them that push the module on the hook scope, and attnkit's own models and the Hugging Face
integration push their attention module explicitly. All hooks and the observer are removed when
the ``with`` block ends; nothing is stored on any module — the records live in the returned
:class:`Recorder`.

What the records measure: where each head's softmax puts its mass (before dropout). Attention
weights are not explanations (Jain & Wallace 2019, https://arxiv.org/abs/1902.10186); use head
ablation for importance.

Shape legend: B batch, H query heads (H' selected), Hkv key/value heads, L queries, S keys, k top-k.
"""

from __future__ import annotations

import contextlib
import fnmatch
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import nn

from ..core import hooks
from ..core.output import AttentionOutput
from .metrics import RowSummaryAccumulator, row_summaries_from_weights
from .recompute import TILE_ELEMENTS, dense_weights, pick_heads, tiled_row_summaries
from .records import CapturedCall, LayerTuple, Recorder, _summary_dtype  # noqa: F401  (LayerTuple re-exported)

RECORD_MODES = ("auto", "weights", "summaries", "reports")


#: Default cap on B·H·L·S for recording dense weights of one call (2**22 floats = 16 MiB in fp32).
MAX_ELEMENTS = 2**22


# ---------------------------------------------------------------------------------- discovery
def attention_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's attention modules in ``named_modules()`` order: attnkit ``MultiHeadAttention``
    and the innermost modules whose class name ends in ``Attention``."""
    from ..modules.multihead import MultiHeadAttention

    def is_attn(m: nn.Module) -> bool:
        return isinstance(m, MultiHeadAttention) or type(m).__name__.endswith("Attention")

    named = [(n, m) for n, m in model.named_modules() if is_attn(m)]
    inner = []
    for n, m in named:
        if isinstance(m, MultiHeadAttention):
            inner.append((n, m))
        elif not any(is_attn(c) for c in m.modules() if c is not m):
            inner.append((n, m))
    return inner


def _select_layers(layers, modules: list[tuple[str, nn.Module]]) -> set[int] | None:
    if layers is None:
        return None
    items = [layers] if isinstance(layers, (int, str)) else list(layers)
    out: set[int] = set()
    names = [n for n, _ in modules]
    for it in items:
        if isinstance(it, bool) or not isinstance(it, (int, str)):
            raise TypeError(f"layers must hold ints (layer indices) or str (module names / patterns), got {type(it).__name__}")
        if isinstance(it, int):
            if not -len(modules) <= it < len(modules):
                raise ValueError(
                    f"layer {it} out of range: the model has {len(modules)} attention modules ({names[:4]}{'...' if len(names) > 4 else ''})"
                )
            out.add(it % len(modules))
        else:
            hit = [i for i, n in enumerate(names) if n == it or fnmatch.fnmatchcase(n, it)]
            if not hit:
                raise ValueError(f"layers={it!r} matches no attention module; the model has {names}")
            out.update(hit)
    return out


def _select_heads(heads, H: int) -> list[int]:
    if heads is None:
        return list(range(H))
    items = [heads] if isinstance(heads, int) else list(heads)
    for h in items:
        if isinstance(h, bool) or not isinstance(h, int):
            raise TypeError(f"heads must be ints, got {type(h).__name__}")
        if not -H <= h < H:
            raise ValueError(f"head {h} out of range for a call with H={H} query heads")
    return sorted({h % H for h in items})


# ---------------------------------------------------------------------------------- recording
@dataclass(frozen=True)
class _Keep:
    """What a capture keeps of each call (its ``record`` mode and sizes), and how it computes it."""

    record: str
    max_elements: int
    k: int
    sinks: tuple[int, ...]
    tile_elements: int
    kv_block: int

    def fill(self, cc: CapturedCall, call, out: AttentionOutput, hs: list[int]) -> None:
        """Set ``cc.weights`` or ``cc.summary`` for the heads ``hs``: the call's own returned weights
        when it has them, else recomputed from the call -- dense when B·H·L·S ≤ ``max_elements``
        (``"auto"``), tiled summaries otherwise. Both include the call's sinks and bias."""
        B, H, L, S = call.q.shape[0], call.q.shape[1], call.L, call.S
        if self.record == "reports":
            return
        if out.weights is not None and self.record != "summaries":
            cc.weights = out.weights.detach()[:, hs]
        elif self.record == "weights" or (self.record == "auto" and B * H * L * S <= self.max_elements):
            cc.weights = dense_weights(call).detach()[:, hs]
        elif out.weights is not None:
            full = row_summaries_from_weights(_summary_dtype(out.weights.detach()), self.k, sink_positions=self.sinks, offset=S - L)
            cc.summary = pick_heads(full, hs, H)
        else:
            full = tiled_row_summaries(call, k=self.k, sink_positions=self.sinks, tile_elements=self.tile_elements, kv_block=self.kv_block)
            cc.summary = pick_heads(full, hs, H)


def _check_options(record, model, **sizes: int) -> None:
    """User-input checks of :func:`capture`, before the ``with`` block runs anything."""
    if record not in RECORD_MODES:
        raise ValueError(f"record must be one of {RECORD_MODES}, got {record!r}")
    for name, val in sizes.items():
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError(f"{name} must be a positive int, got {val!r}")
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module or None, got {type(model).__name__}")


def _calling_layer(index: dict[int, tuple[int, str]]) -> tuple[int, str] | None:
    """(layer, name) of the innermost listed attention module on the hook scope, or None."""
    for m in reversed(hooks.current_modules()):
        where = index.get(id(m))
        if where is not None:
            return where
    return None


@contextlib.contextmanager
def _scoped(modules: list[tuple[str, nn.Module]], observe) -> Iterator[None]:
    """Register ``observe`` and forward hooks that put each listed module on the hook scope while it
    runs; remove them all on exit.

    Module hooks fire in every thread that runs the model; only the capturing context pushes
    scopes, and each thread pops its own tokens (a token resets only in the context that made it).
    """
    handles = []
    tokens: dict[tuple[int, int], list] = {}
    observer: list = []

    def pre(mod, args):
        if observer and hooks.is_active(observer[0]):
            tokens.setdefault((id(mod), threading.get_ident()), []).append(hooks.push_scope(mod))

    def post(mod, args, output):
        stack = tokens.get((id(mod), threading.get_ident()))
        if stack:
            hooks.pop_scope(stack.pop())

    try:
        for _, m in modules:
            handles.append(m.register_forward_pre_hook(pre))
            handles.append(m.register_forward_hook(post, always_call=True))
        observer.append(hooks.add_observer(observe))
        handles.append(observer[0])
        yield
    finally:
        for h in reversed(handles):
            h.remove()


# ---------------------------------------------------------------------------------- capture
@contextlib.contextmanager
def capture(
    model: nn.Module | None = None,
    layers: int | str | Sequence[int | str] | None = None,
    heads: int | Sequence[int] | None = None,
    *,
    record: str = "auto",
    max_elements: int = MAX_ELEMENTS,
    k: int = 5,
    sink_positions: int | Sequence[int] = 0,
    tile_elements: int = TILE_ELEMENTS,
    kv_block: int = 512,
) -> Iterator[Recorder]:
    """Record every :func:`attnkit.attention` call made inside the ``with`` block.

    Only calls of the context that opened the capture are recorded (this thread, or this asyncio
    task): other threads running the same model at the same time are not, nor threads started
    inside the block.

    ``with capture(model, layers=[0, 5], heads=[3]) as rec: model(**batch)`` — then
    ``rec.attentions`` (weights per layer), ``rec.summaries``, ``rec.records`` (with reports).

    * ``model``: only calls from its attention modules are recorded (None: every call, layer None).
    * ``layers``: indices into the model's attention modules (see :func:`attention_modules`),
      module names, or fnmatch patterns (``"layers.*"``); None = all.
    * ``heads``: query-head indices to keep; None = all.
    * ``record``: ``"auto"`` weights when B·H·L·S ≤ ``max_elements`` (or the call returned them),
      else tiled row summaries; ``"weights"``, ``"summaries"``, or ``"reports"`` (backend reports only).
    * ``k``, ``sink_positions``: top-k size and sink keys (key positions, e.g. BOS) of the
      summaries; ``tile_elements`` and ``kv_block`` bound the tiles of the summary pass.

    Calls with attention sinks (``sinks=``, e.g. ``MultiHeadAttention(..., sinks=True)`` or gpt-oss
    through the Hugging Face bridge) are recorded with them: each row's weights over the S keys sum
    to ``sigmoid(lse - sink)`` < 1, the rest being the sink's share, which no key receives; a
    summary's ``mass`` is that sum (see :mod:`attnkit.inspect.recompute`).

    The model's outputs and backend are exactly those of an uncaptured run.
    """
    _check_options(record, model, max_elements=max_elements, k=k, tile_elements=tile_elements, kv_block=kv_block)
    sinks = (sink_positions,) if isinstance(sink_positions, int) else tuple(sink_positions)
    RowSummaryAccumulator(k, sink_positions=sinks)  # validates k and sink positions now, not mid-forward
    modules = attention_modules(model) if model is not None else []
    if model is not None and not modules:
        raise ValueError(
            f"found no attention module in {type(model).__name__} (attnkit MultiHeadAttention or a class named *Attention); "
            "pass model=None to record every attnkit call"
        )
    selected = _select_layers(layers, modules)
    if heads is not None:
        _select_heads(heads, 1 << 30)  # type check now; range is checked per call
    index = {id(m): (i, n) for i, (n, m) in enumerate(modules)}
    keep = _Keep(record, max_elements, k, sinks, tile_elements, kv_block)
    rec = Recorder(modules)

    def observe(call, out: AttentionOutput) -> None:
        where = _calling_layer(index)
        if model is not None and where is None:
            return  # a call from outside this model
        layer, name = where if where is not None else (None, None)
        if selected is not None and layer not in selected:
            return
        hs = _select_heads(heads, call.q.shape[1])
        cc = CapturedCall(len(rec.records), layer, name, tuple(hs), call.shape, out.report, call.S - call.L, _k=k, _sinks=sinks)
        with torch.no_grad():
            keep.fill(cc, call, out, hs)
        rec.records.append(cc)

    with _scoped(modules, observe):
        yield rec
