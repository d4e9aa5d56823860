"""What an attention call returns: the output, optional weights and LSE, and a report of what ran."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Materialized:
    """A dense tensor some backend had to build (the memory wall the blockwise backend avoids)."""

    what: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int


@dataclass
class Report:
    """Which backend ran and why; why every other one did not."""

    backend: str
    reason: str
    rejected: dict[str, str] = field(default_factory=dict)
    materialized: list[Materialized] = field(default_factory=list)
    fully_masked_rows: int | None = None
    exact: bool = True
    estimates: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def materialized_bytes(self) -> int:
        return sum(m.nbytes for m in self.materialized)

    def __str__(self) -> str:
        lines = [f"backend: {self.backend} ({self.reason})" + ("" if self.exact else " [approximate]")]
        for name, why in self.rejected.items():
            lines.append(f"  not {name}: {why}")
        for m in self.materialized:
            lines.append(f"  materialized {m.what} {m.shape} {str(m.dtype).replace('torch.', '')}: {m.nbytes:,} bytes")
        if self.fully_masked_rows is not None:
            lines.append(f"  fully masked rows: {self.fully_masked_rows} (output zeros)")
        return "\n".join(lines)


@dataclass
class BackendResult:
    """What a backend function returns."""

    out: torch.Tensor
    weights: torch.Tensor | None = None
    lse: torch.Tensor | None = None
    fully_masked_rows: int | None = None
    materialized: list[Materialized] = field(default_factory=list)
    # which of the backend's routes ran, where it has several (the report repeats it)
    route: str | None = None


@dataclass
class AttentionOutput:
    """``out`` (B, H, L, Ev); ``weights`` (B, H, L, S) when asked; ``lse`` (B, H, L) when the backend
    has it; ``report`` says what ran; ``key_scores`` (B, H, S) when asked."""

    out: torch.Tensor
    weights: torch.Tensor | None
    lse: torch.Tensor | None
    report: Report
    key_scores: torch.Tensor | None = None  # (B, H, S): weights summed over query rows (return_key_scores=True)


def materialized(what: str, t: torch.Tensor) -> Materialized:
    return Materialized(what, tuple(t.shape), t.dtype, t.numel() * t.element_size())
