"""What :func:`attnkit.inspect.capture` returns: one :class:`CapturedCall` per recorded attention
call, gathered in a :class:`Recorder` whose ``attentions`` / ``summaries`` are per-layer
:class:`LayerTuple` s (like Hugging Face's ``output_attentions``, plus each entry's real layer index).

Shape legend: B batch, H' the selected query heads, L queries, S keys, k top-k.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import torch
from torch import Tensor, nn

from ..core.output import Report
from .metrics import RowSummary, row_summaries_from_weights

__all__ = ["LayerTuple", "CapturedCall", "Recorder"]


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


def _summary_dtype(weights: Tensor) -> Tensor:
    """Weights in the dtype their summaries are computed in: float64 stays, the rest float32
    (as the tiled pass does)."""
    return weights if weights.dtype == torch.float64 else weights.float()


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
        return row_summaries_from_weights(_summary_dtype(self.weights), self._k, sink_positions=self._sinks, offset=self.offset)


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
