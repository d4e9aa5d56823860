"""Capture attention weights — or O(n) per-row summaries — from any model that calls attnkit.

Fused kernels (SDPA, flash) never form the (L, S) weight matrix, which is why timm's fused path
and transformers' ``sdpa`` return no weights. :func:`capture` keeps the model on its fast
backend and records *beside* it: :func:`attnkit.attention` tells the capture about every finished
call (:mod:`attnkit.core.hooks`), and the capture recomputes from the call's own q, k, score,
mask and bias what it was asked to keep:

* **weights** ``P = softmax(score(q, k)·scale + bias, mask)`` (B, H, L, S), by the reference
  backend, when ``B·H·L·S ≤ max_elements`` (or the call already returned them);
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
from dataclasses import dataclass, field, fields, replace
from typing import Iterator

import torch
from torch import Tensor, nn

from ..core import hooks
from ..core.output import AttentionOutput, Report
from ..core.tiles import TileGrid, TileState
from .metrics import RowSummary, RowSummaryAccumulator, row_summaries_from_weights

RECORD_MODES = ("auto", "weights", "summaries", "reports")


class LayerTuple(tuple):
    """A tuple of per-layer entries that also knows each entry's real layer index (``.layers``).

    ``capture(model, layers=[0, 5])`` records two layers; ``rec.attentions[1]`` is layer 5,
    and :func:`~attnkit.inspect.classify_heads`, the plots and the viewer read ``.layers`` so
    that their rows and labels say 5, not 1. A plain tuple everywhere else.
    """

    layers: tuple[int, ...]

    def __new__(cls, items, layers):
        self = super().__new__(cls, items)
        self.layers = tuple(int(i) for i in layers)
        if len(self.layers) != len(self):
            raise ValueError(f"layers must give one index per entry: {len(self)} entries, {len(self.layers)} indices")
        return self
#: Default cap on B·H·L·S for recording dense weights of one call (2**22 floats = 16 MiB in fp32).
MAX_ELEMENTS = 2**22
#: Default cap on the elements of one score tile of the tiled summary pass.
TILE_ELEMENTS = 2**21


@dataclass
class CapturedCall:
    """One recorded attention call.

    ``layer`` is the index of the calling module among the model's attention modules and ``name``
    its module name (None when unknown); ``heads`` the query heads kept in ``weights`` /
    ``summary``; ``offset`` = S − L, the key position of query 0 (bottom-right alignment, used
    for distances). ``weights`` (B, H', L, S) or ``summary`` (fields (B, H', L[, k])) — one of
    them, or neither with ``record="reports"``.
    """

    index: int
    layer: int | None
    name: str | None
    heads: tuple[int, ...]
    shape: dict[str, int]
    report: Report
    offset: int
    weights: Tensor | None = None
    summary: RowSummary | None = None
    _k: int = field(default=5, repr=False)
    _sinks: tuple[int, ...] = field(default=(0,), repr=False)

    @property
    def backend(self) -> str:
        """The backend that computed the model's output for this call."""
        return self.report.backend

    def row_summary(self) -> RowSummary:
        """The row summary, derived from the weights when the call recorded weights."""
        if self.summary is not None:
            return self.summary
        if self.weights is None:
            raise ValueError(f"call {self.index} recorded only its report; capture with record='auto' or 'summaries'")
        return row_summaries_from_weights(self.weights.float(), self._k, sink_positions=self._sinks, offset=self.offset)


class Recorder:
    """What :func:`capture` returns: the :class:`CapturedCall` records, in call order.

    ``attentions`` / ``summaries`` give one entry per captured layer (the latest call of each),
    like Hugging Face's ``output_attentions``; ``records`` keeps every call (several forwards
    append). ``modules`` lists the attention modules found, as (layer index, name).
    """

    def __init__(self, modules: list[tuple[str, nn.Module]]):
        self.records: list[CapturedCall] = []
        self.modules: list[tuple[int, str]] = [(i, n) for i, (n, _) in enumerate(modules)]

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[CapturedCall]:
        return iter(self.records)

    def __getitem__(self, i: int) -> CapturedCall:
        return self.records[i]

    def clear(self) -> None:
        self.records.clear()

    def layer(self, layer: int) -> list[CapturedCall]:
        """Every recorded call of one layer, in order."""
        return [r for r in self.records if r.layer == layer]

    def _latest(self) -> list[CapturedCall]:
        latest: dict = {}
        for r in self.records:
            latest[r.layer if r.layer is not None else ("call", r.index)] = r
        keyed = sorted((k, r) for k, r in latest.items() if not isinstance(k, tuple))
        return [r for _, r in keyed] + [r for k, r in latest.items() if isinstance(k, tuple)]

    def _layer_ids(self, latest: list[CapturedCall]) -> list[int]:
        # calls outside any listed module (layer None) get the indices after the last real layer
        known = [r.layer for r in latest if r.layer is not None]
        nxt = 1 + max(known, default=len(self.modules) - 1)
        out = []
        for r in latest:
            if r.layer is None:
                out.append(nxt)
                nxt += 1
            else:
                out.append(r.layer)
        return out

    @property
    def layers(self) -> list[int]:
        """The real layer index of each entry of :attr:`attentions` / :attr:`summaries`."""
        return self._layer_ids(self._latest())

    @property
    def attentions(self) -> LayerTuple:
        """Weights (B, H', L, S) of the latest call of each layer, in layer order; ``.layers``
        holds each entry's real layer index (``capture(..., layers=[0, 5])`` gives (0, 5))."""
        out = []
        latest = self._latest()
        for r in latest:
            if r.weights is None:
                raise ValueError(
                    f"layer {r.layer} ({r.name}) recorded {'a row summary' if r.summary is not None else 'only a report'}, "
                    f"not weights (B·H·L·S = {r.shape['B'] * r.shape['H'] * r.shape['L'] * r.shape['S']:,}); "
                    "raise max_elements or use rec.summaries"
                )
            out.append(r.weights)
        return LayerTuple(out, self._layer_ids(latest))

    @property
    def summaries(self) -> LayerTuple:
        """Row summaries of the latest call of each layer (derived from weights where recorded);
        ``.layers`` as for :attr:`attentions`."""
        latest = self._latest()
        return LayerTuple([r.row_summary() for r in latest], self._layer_ids(latest))

    @property
    def reports(self) -> list[Report]:
        return [r.report for r in self.records]

    def backends(self) -> dict[str, int]:
        """How many recorded calls each backend served."""
        out: dict[str, int] = {}
        for r in self.records:
            out[r.backend] = out.get(r.backend, 0) + 1
        return out

    def __repr__(self) -> str:
        return f"Recorder({len(self.records)} calls, backends={self.backends()})"


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


# ---------------------------------------------------------------------------------- computing
def dense_weights(call) -> Tensor:
    """The call's weights (B, H, L, S) from the reference backend, without dropout."""
    from ..backends import reference

    return reference.run(replace(call, return_weights=True, dropout_p=0.0)).weights


def tiled_row_summaries(
    call,
    *,
    k: int = 5,
    sink_positions: int | Sequence[int] = 0,
    tile_elements: int = TILE_ELEMENTS,
    kv_block: int = 512,
) -> RowSummary:
    """Per-row summaries of a call's attention without forming its (L, S) weights.

    Scores are computed one (query block × key block) tile at a time — score, scale, bias and mask
    exactly as the reference backend applies them — and folded into a
    :class:`RowSummaryAccumulator` per query block; tiles the mask proves empty are skipped. Half
    inputs are computed in float32. Distances use query position i + S − L. Key blocks have
    ``kv_block`` keys; query blocks as many rows as keep a tile under ``tile_elements``.
    """
    q = call.q
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    kx, _ = call.expanded_kv()  # (B, H, S, E): query head h reads kv head h // groups
    B, H, L, _ = q.shape
    S = kx.shape[2]
    kv_block = min(S, kv_block)
    q_block = max(1, min(L, tile_elements // max(1, B * H * kv_block)))
    parts = []
    # the mask's own tile states for the whole grid, once (EMPTY tiles skipped, FULL ones unmasked)
    codes = None if call.mask is None else call.mask.tile_states(TileGrid.uniform(L, S, q_block, kv_block)).tolist()
    for q0 in range(0, L, q_block):
        q1 = min(L, q0 + q_block)
        acc = RowSummaryAccumulator(k, sink_positions=sink_positions, offset=q0 + S - L)
        folded = False
        for k0 in range(0, S, kv_block):
            k1 = min(S, k0 + kv_block)
            state = TileState.FULL if codes is None else TileState(codes[q0 // q_block][k0 // kv_block])
            if state is TileState.EMPTY:
                continue
            s = call.score(q[:, :, q0:q1].to(work), kx[:, :, k0:k1].to(work)) * call.scale  # (B, H, l, s)
            if call.bias is not None:
                s = call.bias.apply(s, (q0, q1), (k0, k1), L, S)
            if state is TileState.PARTIAL:
                allowed = call.mask.evaluate((q0, q1), (k0, k1), L, S, batch=B, heads=H, device=q.device)
                s = s.masked_fill(~allowed, float("-inf"))
            acc.update(k0, s.expand(B, H, q1 - q0, k1 - k0))
            folded = True
        if not folded:  # every key masked for this block: rows summarise to zeros
            acc.update(0, torch.full((B, H, q1 - q0, 1), float("-inf"), dtype=work, device=q.device))
        parts.append(acc.finalize())
    return RowSummary(**{f.name: torch.cat([getattr(p, f.name) for p in parts], dim=2) for f in fields(RowSummary)})


def _pick_heads(summary: RowSummary, heads: list[int], H: int) -> RowSummary:
    if heads == list(range(H)):
        return summary
    idx = torch.tensor(heads, device=summary.entropy.device)
    return RowSummary(**{f.name: getattr(summary, f.name).index_select(1, idx) for f in fields(RowSummary)})


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
    * ``k``, ``sink_positions``: top-k size and sink keys of the summaries; ``tile_elements`` and
      ``kv_block`` bound the tiles of the summary pass.

    The model's outputs and backend are exactly those of an uncaptured run.
    """
    if record not in RECORD_MODES:
        raise ValueError(f"record must be one of {RECORD_MODES}, got {record!r}")
    for name, val in (("max_elements", max_elements), ("k", k), ("tile_elements", tile_elements), ("kv_block", kv_block)):
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError(f"{name} must be a positive int, got {val!r}")
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module or None, got {type(model).__name__}")
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
    rec = Recorder(modules)

    def observe(call, out: AttentionOutput) -> None:
        where = None
        for m in reversed(hooks.current_modules()):
            where = index.get(id(m))
            if where is not None:
                break
        if model is not None and where is None:
            return  # a call from outside this model
        layer, name = where if where is not None else (None, None)
        if selected is not None and layer not in selected:
            return
        B, H, L, S = call.q.shape[0], call.q.shape[1], call.L, call.S
        hs = _select_heads(heads, H)
        cc = CapturedCall(len(rec.records), layer, name, tuple(hs), call.shape, out.report, S - L, _k=k, _sinks=sinks)
        with torch.no_grad():
            if record == "reports":
                pass
            elif out.weights is not None and record != "summaries":
                cc.weights = out.weights.detach()[:, hs]
            elif record == "weights" or (record == "auto" and B * H * L * S <= max_elements):
                cc.weights = dense_weights(call).detach()[:, hs]
            elif out.weights is not None:
                cc.summary = _pick_heads(row_summaries_from_weights(out.weights.detach().float(), k, sink_positions=sinks, offset=S - L), hs, H)
            else:
                cc.summary = _pick_heads(tiled_row_summaries(call, k=k, sink_positions=sinks, tile_elements=tile_elements, kv_block=kv_block), hs, H)
        rec.records.append(cc)

    handles = []
    # module hooks fire in every thread that runs the model; only the capturing context pushes
    # scopes, and each thread pops its own tokens (a token resets only in the context that made it)
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
        yield rec
    finally:
        for h in reversed(handles):
            h.remove()

