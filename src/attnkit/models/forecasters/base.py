"""The one interface every forecaster shares, its input checks, and instance normalisation.

``forward(past, future_known=None) -> forecast``:

* past (B, T_in, C_in): the input window, scaled; only values up to its last step;
* future_known (B, T_out, C_k) or None: covariates known in advance for the forecast steps
  (calendar features); models built with ``known_channels=0`` take None;
* forecast (B, T_out, C_out): channels ``targets`` of the input (all of them for the multivariate
  "M" setting, one for "S").

Shape legend: B batch, T_in input length, T_out horizon, C_in input channels, C_k known-future
channels, C_out forecast channels (= len(targets)), D model width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ...core.checks import require_ndim, require_positive_int, require_tensor


@dataclass(frozen=True)
class ForecastSpec:
    """What a forecaster reads and writes; ``targets`` are input-channel indices, in output order."""

    input_len: int
    horizon: int
    in_channels: int
    targets: tuple[int, ...] | None = None  # None: every input channel (multivariate "M")
    known_channels: int = 0
    period: int | None = None  # the main seasonal period in steps (seasonal naive)

    def __post_init__(self):
        for name in ("input_len", "horizon", "in_channels"):
            require_positive_int(name, getattr(self, name))
        if isinstance(self.known_channels, bool) or not isinstance(self.known_channels, int) or self.known_channels < 0:
            raise ValueError(f"known_channels must be an int >= 0, got {self.known_channels!r}")
        targets = tuple(range(self.in_channels)) if self.targets is None else tuple(self.targets)
        if not targets or any(not 0 <= t < self.in_channels for t in targets):
            raise ValueError(
                f"targets must be input-channel indices in [0, {self.in_channels}), got {self.targets!r}; "
                "use None to forecast every channel"
            )
        object.__setattr__(self, "targets", targets)
        if self.period is not None:
            require_positive_int("period", self.period)

    @property
    def out_channels(self) -> int:
        return len(self.targets)


class Forecaster(nn.Module):
    """Base class: checks the inputs once, then calls :meth:`forecast`."""

    name = "forecaster"
    trainable = True  # False for the parameter-free baselines: nothing to fit
    uses_known = False  # models that read future_known set this True

    def __init__(self, spec: ForecastSpec):
        super().__init__()
        if not isinstance(spec, ForecastSpec):
            raise TypeError(f"spec must be a ForecastSpec, got {type(spec).__name__}")
        self.spec = spec

    def forward(self, past: torch.Tensor, future_known: torch.Tensor | None = None) -> torch.Tensor:
        return self.forecast(past, self.check_inputs(past, future_known))  # (B, T_out, C_out)

    def check_inputs(self, past: torch.Tensor, future_known: torch.Tensor | None) -> torch.Tensor | None:
        """Raise on inputs that do not fit the spec; return the future_known this model reads."""
        s = self.spec
        require_tensor("past", past)
        require_ndim("past", past, 3, "(B, T_in, C_in)", "add a channel axis with .unsqueeze(-1) for a univariate series")
        if past.shape[1:] != (s.input_len, s.in_channels):
            raise ValueError(
                f"past must be (B, T_in={s.input_len}, C_in={s.in_channels}), got {tuple(past.shape)}; "
                f"build the model with a ForecastSpec matching the data windows"
            )
        if not past.is_floating_point():
            raise TypeError(f"past must be a floating-point tensor, got {past.dtype}; cast it with past.float()")
        if future_known is not None:
            require_tensor("future_known", future_known)
            want = (past.shape[0], s.horizon, s.known_channels)
            if s.known_channels == 0:
                raise ValueError(
                    "future_known was given but this model was built with known_channels=0; pass None or "
                    "build it with ForecastSpec(known_channels=C_k)"
                )
            if tuple(future_known.shape) != want:
                raise ValueError(f"future_known must be (B, T_out, C_k)={want}, got {tuple(future_known.shape)}")
        elif s.known_channels and self.uses_known:
            raise ValueError(
                f"this model was built with known_channels={s.known_channels} and needs future_known "
                f"(B, T_out={s.horizon}, C_k={s.known_channels}); pass it or build the model with known_channels=0"
            )
        return future_known if self.uses_known else None

    def forecast(self, past: torch.Tensor, future_known: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError


class InstanceNorm(nn.Module):
    """Per-window, per-channel standardisation undone on the output (RevIN without the affine part).

    Kim et al. 2022, "Reversible Instance Normalization", https://openreview.net/forum?id=cGDAkQo1C0p.
    Series drift between the training years and the test years; removing each window's own level
    and scale lets a small model learn the shape of the next steps rather than their level.
    """

    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def stats(self, past: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = past.mean(dim=1, keepdim=True)  # (B, 1, C)
        std = (past.var(dim=1, keepdim=True, unbiased=False) + self.eps).sqrt()
        return mean.detach(), std.detach()

    @staticmethod
    def normalize(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        return (x - mean) / std

    @staticmethod
    def denormalize(y: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        return y * std + mean
