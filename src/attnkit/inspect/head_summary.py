"""Per-head classification of attention patterns, with documented thresholds.

:func:`classify_heads` averages the per-row metrics of :mod:`attnkit.inspect.metrics`
over every valid row of a head and labels it by the simplest pattern that explains
where its mass goes (:data:`HEAD_LABELS`: dead, uniform, positional, content); the
thresholds are :class:`HeadThresholds` and the module constants below.

- Clark et al. 2019, "What Does BERT Look At? An Analysis of BERT's Attention",
  https://arxiv.org/abs/1906.04341 -- previous/next-token heads and heads parked on
  [CLS]/[SEP] that act as a no-op ("dead" here).
- Voita et al. 2019, "Analyzing Multi-Head Self-Attention: Specialized Heads Do the
  Heavy Lifting, the Rest Can Be Pruned", https://arxiv.org/abs/1905.09418 --
  positional heads.

A label describes where a head's softmax puts its mass, not whether the head matters:
``content`` only means "not explained by the simple patterns" (see
:mod:`attnkit.inspect.metrics`; use :func:`attnkit.inspect.rollout.head_importance`
for importance).

Shape legend:
    B: batch size      H: heads (may differ per layer)
    L: queries         S: keys
    attentions: per-layer (B, H, L, S) weights, or one (layers, B, H, L, S) tensor.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

import torch
from torch import Tensor

from attnkit.inspect.row_metrics import (
    _check_int,
    _diagonal_mass,
    check_weights,
    expand_key_mask,
    max_weight,
    mean_attention_distance,
    normalized_entropy,
    sink_mass,
)

__all__ = [
    "HEAD_LABELS",
    "HeadStats",
    "HeadSummary",
    "HeadThresholds",
    "classify_heads",
]


#: Labels :func:`classify_heads` can give, in the order its rules are tried.
HEAD_LABELS = ("dead", "uniform", "positional-previous", "positional-next", "positional-self", "content")

#: A head is ``dead`` when this share of every row's mass sits on one fixed key (or on
#: the special keys). 0.8 flags the [CLS]/[SEP]/BOS-parked heads of Clark et al. 2019,
#: whose sink mass is typically > 0.9, while a causal prev-token head (first row forced
#: onto key 0) stays far below it.
DEAD_MASS = 0.8
#: A head is ``uniform`` when its mean normalised entropy reaches this (1 = exactly uniform).
UNIFORM_ENTROPY = 0.9
#: A head is positional when its mean mass on the previous / next / own key reaches this.
POSITIONAL_MASS = 0.5
#: A layer has an attention sink when some head's rows miss more than this share on average
#: (rows of plain softmax weights sum to 1 up to rounding: about 1e-3 in bfloat16).
SINK_SHARE_SEEN = 1e-2


@dataclass(frozen=True)
class HeadThresholds:
    """Thresholds of :func:`classify_heads`; each in (0, 1]. See the module constants."""

    dead_mass: float = DEAD_MASS
    uniform_entropy: float = UNIFORM_ENTROPY
    positional_mass: float = POSITIONAL_MASS

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
                raise ValueError(f"HeadThresholds.{f.name} must be a number in (0, 1]; got {value!r}")

    def label(self, n: dict) -> tuple[str, str]:
        """(label, reason) for one head's numbers (the fields of :class:`HeadStats`)."""
        if math.isnan(n["fixed_mass"]):
            return "dead", "no valid rows (every row fully masked, or all of its mass on an attention sink)"
        if n["fixed_mass"] >= self.dead_mass:
            return "dead", (
                f"fixed_mass {n['fixed_mass']:.3f} >= {self.dead_mass} on key {n['fixed_position']}"
            )
        special = n.get("special_mass")
        if special is not None and special >= self.dead_mass:
            return "dead", f"special_mass {special:.3f} >= {self.dead_mass}"
        parked = n.get("learned_sink_mass")
        if parked is not None and parked >= self.dead_mass:
            return "dead", f"learned_sink_mass {parked:.3f} >= {self.dead_mass} (on the attention sink, no key)"
        if n["entropy"] >= self.uniform_entropy:
            return "uniform", f"entropy {n['entropy']:.3f} >= {self.uniform_entropy}"
        positional = {
            "positional-previous": n["previous_mass"],
            "positional-next": n["next_mass"],
            "positional-self": n["self_mass"],
        }
        best = max(positional, key=lambda name: -1.0 if math.isnan(positional[name]) else positional[name])
        value = positional[best]
        if not math.isnan(value) and value >= self.positional_mass:
            field = {"positional-previous": "previous_mass", "positional-next": "next_mass"}.get(best, "self_mass")
            return best, f"{field} {value:.3f} >= {self.positional_mass}"
        return "content", (
            f"fixed_mass {n['fixed_mass']:.3f} < {self.dead_mass}, entropy {n['entropy']:.3f} < "
            f"{self.uniform_entropy}, max positional mass {0.0 if math.isnan(value) else value:.3f} "
            f"< {self.positional_mass}"
        )


@dataclass(frozen=True)
class HeadStats:
    """One head's numbers (means over valid rows, see :func:`classify_heads`) and its label."""

    layer: int
    head: int
    label: str
    entropy: float
    max_weight: float
    distance: float
    sink_mass: float
    previous_mass: float
    next_mass: float
    self_mass: float
    fixed_mass: float
    fixed_position: int
    special_mass: float | None
    reason: str
    learned_sink_mass: float | None = None


@dataclass(frozen=True)
class HeadSummary:
    """Tabular result of :func:`classify_heads`: one :class:`HeadStats` per (layer, head).

    Index with ``summary[layer, head]``; iterate for the rows in (layer, head) order;
    render with :meth:`to_text` (also ``str()``), :meth:`to_markdown`, :meth:`to_html`
    (also Jupyter's rich display); :meth:`metric` gives a (layers, heads) tensor for plots.
    """

    stats: tuple[HeadStats, ...]
    thresholds: HeadThresholds = HeadThresholds()

    #: Numeric columns, in display order.
    METRICS = (
        "entropy", "max_weight", "distance", "sink_mass", "previous_mass",
        "next_mass", "self_mass", "fixed_mass", "special_mass", "learned_sink_mass",
    )

    @property
    def layers(self) -> list[int]:
        """The real layer indices present, ascending (``[0, 5]`` after ``capture(..., layers=[0, 5])``)."""
        return sorted({s.layer for s in self.stats})

    @property
    def num_layers(self) -> int:
        """How many layers were classified (rows of :meth:`labels` and :meth:`metric`)."""
        return len(self.layers)

    @property
    def num_heads(self) -> int:
        """The largest head count of any layer."""
        return 1 + max((s.head for s in self.stats), default=-1)

    def __len__(self) -> int:
        return len(self.stats)

    def __iter__(self):
        return iter(self.stats)

    def __getitem__(self, key: tuple[int, int]) -> HeadStats:
        for s in self.stats:
            if (s.layer, s.head) == tuple(key):
                return s
        raise KeyError(f"no head (layer, head) = {key!r}; have layers {self.layers} x {self.num_heads} heads")

    def labels(self) -> list[list[str]]:
        """Labels as ``labels()[row][head]``, one row per entry of :attr:`layers` (row i = layer ``layers[i]``)."""
        row = {layer: i for i, layer in enumerate(self.layers)}
        out: list[list[str]] = [[] for _ in row]
        for s in self.stats:
            out[row[s.layer]].append(s.label)
        return out

    def counts(self) -> dict[str, int]:
        """How many heads got each label (every label present, possibly 0)."""
        out = dict.fromkeys(HEAD_LABELS, 0)
        for s in self.stats:
            out[s.label] += 1
        return out

    def metric(self, name: str) -> Tensor:
        """A (layers, max heads) float64 tensor of one numeric column; NaN where a layer has fewer heads."""
        if name not in self.METRICS:
            raise ValueError(f"name must be one of {', '.join(self.METRICS)}; got {name!r}")
        row = {layer: i for i, layer in enumerate(self.layers)}
        out = torch.full((self.num_layers, self.num_heads), math.nan, dtype=torch.float64)
        for s in self.stats:
            value = getattr(s, name)
            out[row[s.layer], s.head] = math.nan if value is None else value
        return out

    def columns(self) -> list[str]:
        """Column names of :meth:`to_rows` (``special_mass`` and ``learned_sink_mass`` only when computed)."""
        shown = {"special_mass": self._has_special(), "learned_sink_mass": self._has_learned_sink()}
        metrics = [m for m in self.METRICS if shown.get(m, True)]
        return ["layer", "head", "label", *metrics, "fixed_position", "reason"]

    def _has_special(self) -> bool:
        return any(s.special_mass is not None for s in self.stats)

    def _has_learned_sink(self) -> bool:
        return any(s.learned_sink_mass is not None for s in self.stats)

    def to_rows(self) -> list[dict]:
        """One plain dict per head (JSON-ready), keys as :meth:`columns`."""
        cols = self.columns()
        return [{c: v for c, v in asdict(s).items() if c in cols} for s in self.stats]

    def _cells(self, digits: int) -> tuple[list[str], list[list[str]]]:
        cols = self.columns()
        body = []
        for row in self.to_rows():
            body.append([
                f"{row[c]:.{digits}f}" if isinstance(row[c], float) else str(row[c]) for c in cols
            ])
        return cols, body

    def to_text(self, digits: int = 3) -> str:
        """Aligned plain-text table."""
        cols, body = self._cells(digits)
        widths = [max(len(c), *(len(r[i]) for r in body)) if body else len(c) for i, c in enumerate(cols)]
        line = lambda cells: "  ".join(x.ljust(w) for x, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
        return "\n".join([line(cols), line(["-" * w for w in widths]), *(line(r) for r in body)])

    def to_markdown(self, digits: int = 3) -> str:
        """GitHub-flavoured markdown table (``|`` in cells escaped)."""
        cols, body = self._cells(digits)
        esc = lambda x: x.replace("|", "\\|")  # noqa: E731
        rows = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        rows += ["| " + " | ".join(esc(x) for x in r) + " |" for r in body]
        return "\n".join(rows)

    def to_html(self, digits: int = 3) -> str:
        """An HTML ``<table class="attnkit-heads">``; every cell escaped."""
        cols, body = self._cells(digits)
        head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        rows = "".join(
            f'<tr class="label-{html.escape(r[2])}">' + "".join(f"<td>{html.escape(x)}</td>" for x in r) + "</tr>"
            for r in body
        )
        return f'<table class="attnkit-heads"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'

    def __str__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str:
        return self.to_html()


def _head_mean(values: Tensor, valid: Tensor) -> Tensor:
    """Mean of (B, H, L) ``values`` over the valid rows of each head -> (H,); NaN for a head with none."""
    valid = valid.expand(values.shape).to(values.dtype)
    count = valid.sum((0, 2))
    total = (values * valid).sum((0, 2))
    return torch.where(count > 0, total / count.clamp(min=1), torch.full_like(total, math.nan))


def _positional_head_mean(w: Tensor, valid: Tensor, mask: Tensor | None, shift: int) -> Tensor:
    """Per-head mean weight on key ``i + shift`` over valid rows whose target key exists and is allowed -> (H,)."""
    L, S = w.shape[-2:]
    mass, exists = _diagonal_mass(w, shift)
    ok = valid & exists
    if mask is not None:  # the target key must also be allowed for this row
        j = (torch.arange(L, device=w.device) + shift).clamp(0, S - 1)
        ok = ok & mask.expand(w.shape).gather(-1, j.expand(*w.shape[:-1])[..., None])[..., 0]
    return _head_mean(mass, ok)


def _stack_layers(attentions) -> list[Tensor]:
    if isinstance(attentions, Tensor):
        if attentions.ndim == 5:
            return list(attentions.unbind(0))
        raise ValueError(
            f"attentions must be a sequence of per-layer (B, H, L, S) tensors or one (layers, B, H, L, S) "
            f"tensor; got a tensor of shape {tuple(attentions.shape)}. For a single layer pass [weights]."
        )
    if not isinstance(attentions, Sequence) or len(attentions) == 0:
        raise ValueError(
            "attentions must be a non-empty sequence of per-layer (B, H, L, S) tensors; "
            f"got {type(attentions).__name__}"
        )
    layers = [check_weights(a, name=f"attentions[{i}]") for i, a in enumerate(attentions)]
    first = layers[0].shape
    for i, a in enumerate(layers):
        if (a.shape[0], a.shape[2], a.shape[3]) != (first[0], first[2], first[3]):
            raise ValueError(
                f"every layer must share B, L, S; attentions[0] has shape {tuple(first)} "
                f"but attentions[{i}] has {tuple(a.shape)}"
            )
    return layers


def _layer_ids(attentions, layers) -> list[int]:
    # capture(...).attentions carries the real indices; a plain list/tensor counts 0, 1, ...
    ids = getattr(attentions, "layers", None) if layers is None else layers
    if ids is None:
        n = attentions.shape[0] if isinstance(attentions, Tensor) else len(attentions) if isinstance(attentions, Sequence) else 0
        return list(range(n))
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise TypeError(f"layers must be a sequence of non-negative ints (one real layer index per entry); got {ids!r}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"layers must not repeat an index; got {list(ids)}")
    return list(ids)


def classify_heads(
    attentions: Sequence[Tensor] | Tensor,
    *,
    key_mask: Tensor | None = None,
    query_mask: Tensor | None = None,
    special_keys: Tensor | None = None,
    offset: int = 0,
    thresholds: HeadThresholds | None = None,
    layers: Sequence[int] | None = None,
) -> HeadSummary:
    """Label every (layer, head) by the simplest pattern that explains where its mass goes.

    Per head, over all valid rows (rows with non-zero mass, and allowed by ``query_mask``)
    of every sequence in the batch, it computes the means of :func:`normalized_entropy`,
    :func:`max_weight`, :func:`mean_attention_distance`, :func:`sink_mass` (key 0),
    :func:`previous_token_mass`, :func:`next_token_mass` and :func:`self_mass` (the
    positional masses only over rows whose target key exists and is allowed), plus:

    - ``fixed_mass``: per sequence, the largest column mean ``max_j mean_i w_ij`` -- the
      share of every row's mass that goes to one and the same key -- averaged over the
      batch; ``fixed_position`` is that key (the most common one across the batch).
    - ``special_mass``: mean weight on ``special_keys`` (e.g. every [CLS]/[SEP]), when given.
    - ``learned_sink_mass``: mean share of a row that no key receives, ``1 - sum_j w_ij`` --
      the attention sink's share in weights of a model with sinks (:mod:`attnkit.core.sinks`;
      captured by :func:`attnkit.inspect.capture`, rows summing to ``sigmoid(lse - sink)``).
      None when no head of the layer misses more than ``SINK_SHARE_SEEN`` (plain softmax).
      The other numbers stay weights over the keys, as the softmax gave them, not rescaled
      to the keys' share.

    The label is the first rule that fires, thresholds from ``thresholds``
    (:class:`HeadThresholds`, defaults in brackets):

    1. ``dead`` -- ``fixed_mass >= dead_mass`` [0.8], ``special_mass >= dead_mass`` or
       ``learned_sink_mass >= dead_mass``: nearly all mass parked on one fixed position
       (first token, [CLS], [SEP], the attention sink); such heads often act as a no-op
       (Clark et al. 2019).
    2. ``uniform`` -- mean normalised entropy ``>= uniform_entropy`` [0.9]: a bag-of-keys average.
    3. ``positional-previous`` / ``positional-next`` / ``positional-self`` -- the largest of
       the three positional masses is ``>= positional_mass`` [0.5].
    4. ``content`` -- none of the above: where the mass goes depends on the content.

    A head whose every row is fully masked (or gives all of its mass to the sink) is labelled
    ``dead`` with NaN numbers.
    Classification needs several queries per sequence: with L = 1 every head looks fixed.

    Args:
        attentions: per-layer (B, H, L, S) weights (heads may differ per layer), or one
            (layers, B, H, L, S) tensor.
        key_mask: bool (B, S) padding mask or 4-D mask broadcastable to (B, H, L, S); it
            sets the entropy normaliser (pass the causal mask for decoders) and which
            positional targets count.
        query_mask: bool (B, L); False rows (padded queries) are left out of every mean.
        special_keys: bool (B, S) marking [CLS]/[SEP]-like keys for ``special_mass``.
        offset: query i sits at key position ``i + offset`` (see :func:`mean_attention_distance`).
        thresholds: a :class:`HeadThresholds`; None for the defaults.
        layers: the real layer index of each entry of ``attentions`` (the rows' ``layer``);
            None = ``attentions.layers`` when it has one (``capture(...).attentions`` does), else 0, 1, ...

    Returns:
        a :class:`HeadSummary` with one :class:`HeadStats` per (layer, head).
    """
    layer_ids = _layer_ids(attentions, layers)
    layers = _stack_layers(attentions)
    if len(layer_ids) != len(layers):
        raise ValueError(f"layers must give one index per layer of attentions ({len(layers)}); got {len(layer_ids)}: {list(layer_ids)}")
    thresholds = HeadThresholds() if thresholds is None else thresholds
    if not isinstance(thresholds, HeadThresholds):
        raise TypeError(f"thresholds must be a HeadThresholds; got {type(thresholds).__name__}")
    _check_int(offset, "offset")
    B, _, L, _ = layers[0].shape
    _check_query_mask(query_mask, B, L)

    stats: list[HeadStats] = []
    for li, w in enumerate(layers):
        numbers = _head_numbers(w, key_mask=key_mask, query_mask=query_mask, special_keys=special_keys, offset=offset)
        for h, n in enumerate(numbers):
            label, reason = thresholds.label(n)
            stats.append(HeadStats(layer=layer_ids[li], head=h, label=label, reason=reason, **n))
    return HeadSummary(stats=tuple(stats), thresholds=thresholds)


def _check_query_mask(query_mask: Tensor | None, B: int, L: int) -> None:
    if query_mask is None:
        return
    if not isinstance(query_mask, Tensor) or query_mask.dtype != torch.bool:
        raise TypeError("query_mask must be a bool tensor of shape (B, L); True = real query")
    if tuple(query_mask.shape) != (B, L):
        raise ValueError(f"query_mask must have shape (B, L) = ({B}, {L}); got {tuple(query_mask.shape)}")


def _fixed_key(w: Tensor, valid: Tensor) -> tuple[Tensor, list[int]]:
    """How much of every row goes to one and the same key, per head.

    Per sequence, the column means over valid rows ``mean_i w_ij`` and their largest value; the
    result is its mean over the sequences that have valid rows, (H,) (NaN for a head with none), and
    per head the key that is most often that largest column (-1 for a head with none).
    """
    vf = valid.to(w.dtype)  # (B, H, L)
    rows = vf.sum(-1)  # (B, H)
    col = (w * vf[..., None]).sum(-2) / rows.clamp(min=1)[..., None]  # (B, H, S)
    col_max, col_arg = col.max(-1)  # (B, H)
    has_rows = rows > 0
    fixed = (col_max * has_rows).sum(0) / has_rows.sum(0).clamp(min=1)
    fixed = torch.where(has_rows.any(0), fixed, torch.full_like(fixed, math.nan))
    positions = []
    for h in range(w.shape[1]):
        args = col_arg[:, h][has_rows[:, h]]
        positions.append(int(torch.mode(args).values) if args.numel() else -1)
    return fixed, positions


def _head_numbers(w: Tensor, *, key_mask, query_mask, special_keys, offset: int) -> list[dict]:
    """One layer's (B, H, L, S) weights -> one dict per head with the numeric fields of
    :class:`HeadStats` (means over the valid rows; see :func:`classify_heads`)."""
    w = w.detach().to(torch.float64)  # means over many rows: keep them exact
    mask = expand_key_mask(key_mask, w)
    mass = w.sum(-1)  # (B, H, L): 1, below 1 with attention sinks, 0 on fully masked rows
    valid = mass > 0  # rows that put mass on some key
    if query_mask is not None:
        valid = valid & query_mask[:, None, :].to(w.device)

    ent = _head_mean(normalized_entropy(w, key_mask), valid)
    mx = _head_mean(max_weight(w), valid)
    dist = _head_mean(mean_attention_distance(w, offset), valid)
    sink = _head_mean(sink_mass(w, 0), valid)
    prev, nxt, own = (_positional_head_mean(w, valid, mask, offset + d) for d in (-1, 1, 0))
    special = _head_mean(sink_mass(w, special_keys), valid) if special_keys is not None else None
    fixed, positions = _fixed_key(w, valid)
    parked = _head_mean((1.0 - mass).clamp(min=0.0), valid)  # the attention sink's share
    has_sink = bool((parked > SINK_SHARE_SEEN).any())
    return [
        dict(
            entropy=float(ent[h]),
            max_weight=float(mx[h]),
            distance=float(dist[h]),
            sink_mass=float(sink[h]),
            previous_mass=float(prev[h]),
            next_mass=float(nxt[h]),
            self_mass=float(own[h]),
            fixed_mass=float(fixed[h]),
            fixed_position=positions[h],
            special_mass=None if special is None else float(special[h]),
            learned_sink_mass=float(parked[h]) if has_sink else None,
        )
        for h in range(w.shape[1])
    ]
