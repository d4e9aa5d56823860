"""Attention rollout and head importance by ablation.

- Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers",
  https://arxiv.org/abs/2005.00928 -- attention rollout.
- Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better than One?",
  https://arxiv.org/abs/1905.10650 -- head importance by masking heads out.

Rollout treats each layer's (head-fused) attention plus the residual connection as a
token-mixing matrix and multiplies them: it says how much of each input token's
*position* could have flowed into each output position if the values carried no
information of their own. It ignores values, MLPs and layer norms, so it is a rough
flow estimate, not an attribution. Ablation measures what the model actually does
without a head, at the cost of one forward pass per head.

Shape legend:
    B: batch size    H: heads    L: queries = S: keys (rollout needs self-attention)
    attentions: per-layer (B, H, L, L), rows summing to 1, to less than 1 with attention
    sinks (the sink's share goes to no token), 0 on fully masked rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = ["HEAD_FUSIONS", "attention_rollout", "head_importance"]

#: Ways to fuse the heads of one layer before rollout.
HEAD_FUSIONS = ("mean", "max", "min")


def _fuse_heads(a: Tensor, head_fusion: str) -> Tensor:
    """(B, H, L, L) -> (B, L, L)."""
    if head_fusion == "mean":
        return a.mean(1)
    if head_fusion == "max":
        return a.amax(1)
    return a.amin(1)


def attention_rollout(
    attentions: Sequence[Tensor],
    *,
    head_fusion: str = "mean",
    residual_weight: float = 0.5,
    key_mask: Tensor | None = None,
    start_layer: int = 0,
) -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020): how attention composes through the layers.

    For each layer l from ``start_layer`` on::

        A_l      = fuse_heads(attentions[l])                      # (B, L, L)
        Â_l      = (1 - r) A_l + r I                              # r = residual_weight
        Â_l      = Â_l / Â_l.sum(-1, keepdim=True)                # rows sum to 1 again
        rollout  = Â_l @ rollout                                  # rollout_{start-1} = I

    Row i of the result is a distribution over input tokens for output position i. With
    ``head_fusion="max"``/``"min"`` the fused rows no longer sum to 1; the re-normalisation
    fixes that. Rows of every Â_l sum to 1, so every row of the result sums to 1.

    Padding: with ``key_mask`` (B, L), True = real token, weights on padded keys are
    zeroed before fusing (so residue from large-negative additive masks does not leak),
    and each padded position's row is replaced by the identity (it only "attends" to
    itself). Real rows then put exactly 0 on padded tokens. A row with no mass left
    (possible only when ``residual_weight=0``) becomes the identity row.

    Attention sinks (:mod:`attnkit.core.sinks`; weights from :func:`attnkit.inspect.capture`
    of a model with sinks): a row's weights sum to ``m = sigmoid(lse - sink)`` < 1, and the
    sink's share ``1 - m`` has a zero value, so it carries no token. Rollout keeps it that way:
    the sink's share is not spread over the keys, it only shrinks the attention term against
    the residual (row i of Â_l is ``((1 - r) A_l[i] + r e_i) / ((1 - r) m_i + r)``). A layer
    whose rows give everything to the sink passes the residual alone (Â_l = I).

    Args:
        attentions: per-layer (B, H, L, L) weights, in layer order (heads may differ per layer).
        head_fusion: one of ``HEAD_FUSIONS``: "mean" (the paper), "max" or "min".
        residual_weight: weight r of the identity for the residual connection, in [0, 1];
            the paper's 0.5.
        key_mask: optional bool (B, L) padding mask, True = real token.
        start_layer: first layer to include (earlier layers are skipped).

    Returns:
        (B, L, L) rollout, float32 or the input's float64, rows summing to 1.
    """
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(f"head_fusion must be one of {', '.join(HEAD_FUSIONS)}; got {head_fusion!r}")
    if isinstance(residual_weight, bool) or not isinstance(residual_weight, (int, float)) or not (
        0.0 <= residual_weight <= 1.0
    ):
        raise ValueError(f"residual_weight must be a number in [0, 1] (the paper uses 0.5); got {residual_weight!r}")
    attentions = _check_attentions(attentions, start_layer)
    first = attentions[0]
    B, _, L, _ = first.shape
    dtype = torch.float64 if first.dtype == torch.float64 else torch.float32
    eye = torch.eye(L, dtype=dtype, device=first.device).expand(B, L, L)
    real = _check_key_mask(key_mask, B, L, first.device)

    rollout = eye
    for a in attentions[start_layer:]:
        a = a.detach().to(dtype)
        if real is not None:
            a = a * real[:, None, None, :]  # drop weight on padded keys
        fused = _fuse_heads(a, head_fusion)  # (B, L, L)
        if real is not None:
            # Padded positions only keep themselves: their rows never feed real tokens anyway.
            fused = torch.where(real[:, :, None], fused, eye)
        mixed = (1.0 - residual_weight) * fused + residual_weight * eye
        total = mixed.sum(-1, keepdim=True)
        mixed = torch.where(total > 0, mixed / total.clamp(min=torch.finfo(dtype).tiny), eye)
        rollout = mixed @ rollout  # (B, L, L)
    return rollout


def _check_attentions(attentions, start_layer) -> list[Tensor]:
    """The per-layer (B, H, L, L) weights as a list, after checking shapes and ``start_layer``."""
    if isinstance(attentions, Tensor):
        if attentions.ndim != 5:
            raise ValueError(
                "attentions must be a sequence of per-layer (B, H, L, L) tensors or one (layers, B, H, L, L) "
                f"tensor; got a tensor of shape {tuple(attentions.shape)}. For one layer pass [weights]."
            )
        attentions = list(attentions.unbind(0))
    if not isinstance(attentions, Sequence) or len(attentions) == 0:
        raise ValueError("attentions must be a non-empty sequence of per-layer (B, H, L, L) tensors")
    if isinstance(start_layer, bool) or not isinstance(start_layer, int) or not 0 <= start_layer < len(attentions):
        raise ValueError(f"start_layer must be an int in [0, {len(attentions)}); got {start_layer!r}")
    first = attentions[0]
    for i, a in enumerate(attentions):
        if not isinstance(a, Tensor) or a.ndim != 4 or not a.is_floating_point():
            got = tuple(a.shape) if isinstance(a, Tensor) else type(a).__name__
            raise ValueError(f"attentions[{i}] must be a floating (B, H, L, L) tensor; got {got}")
        if a.shape[-1] != a.shape[-2]:
            raise ValueError(
                f"rollout needs self-attention (L == S); attentions[{i}] has L={a.shape[-2]}, S={a.shape[-1]}"
            )
        if (a.shape[0], a.shape[-1]) != (first.shape[0], first.shape[-1]):
            raise ValueError(
                f"every layer must share B and L; attentions[0] is {tuple(first.shape)}, "
                f"attentions[{i}] is {tuple(a.shape)}"
            )
    return list(attentions)


def _check_key_mask(key_mask, B: int, L: int, device) -> Tensor | None:
    """The bool (B, L) padding mask on ``device``, or None."""
    if key_mask is None:
        return None
    if not isinstance(key_mask, Tensor) or key_mask.dtype != torch.bool:
        raise TypeError("key_mask must be a bool tensor of shape (B, L); True = real token")
    if tuple(key_mask.shape) != (B, L):
        raise ValueError(f"key_mask must have shape (B, L) = ({B}, {L}); got {tuple(key_mask.shape)}")
    return key_mask.to(device)


def head_importance(
    run_fn: Callable[[Tensor], Tensor],
    num_layers: int,
    num_heads: int,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Importance of every head as the change in ``run_fn``'s output when that head alone is masked.

    ``run_fn(head_mask)`` must run the model with ``head_mask`` -- a (num_layers, num_heads)
    float tensor of ones with a 0 at the ablated head -- multiplied into the attention
    weights (or outputs) of each head, and return either

    - a scalar (a loss): importance = ``loss(ablated) - loss(full)``; positive means the
      model does worse without the head;
    - an embedding (E,) or a batch of them (..., E): importance = ``1 - cosine(ablated, full)``
      along the last dimension, averaged over the leading ones; 0 means unchanged.

    It makes ``num_layers * num_heads + 1`` calls, under ``torch.no_grad()``.

    Returns:
        (num_layers, num_heads) tensor in the output's floating dtype (float32 for integer outputs).
    """
    if not callable(run_fn):
        raise TypeError(f"run_fn must be callable as run_fn(head_mask) -> Tensor; got {type(run_fn).__name__}")
    for name, value in (("num_layers", num_layers), ("num_heads", num_heads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int; got {value!r}")

    def call(mask: Tensor) -> Tensor:
        out = run_fn(mask)
        if not isinstance(out, Tensor):
            try:
                out = torch.as_tensor(out)
            except (TypeError, ValueError, RuntimeError):
                raise TypeError(
                    f"run_fn must return a scalar loss or an embedding tensor; got {type(out).__name__}"
                ) from None
        return out.detach()

    with torch.no_grad():
        mask = torch.ones(num_layers, num_heads, device=device)
        base = call(mask)
        dtype = base.dtype if base.is_floating_point() else torch.float32
        base = base.to(dtype)
        if base.numel() == 0:
            raise ValueError("run_fn returned an empty tensor; return a scalar loss or an embedding")
        scalar = base.numel() == 1
        out = torch.zeros(num_layers, num_heads, dtype=dtype)
        for layer in range(num_layers):
            for head in range(num_heads):
                mask = torch.ones(num_layers, num_heads, device=device)
                mask[layer, head] = 0.0
                ablated = call(mask).to(dtype)
                if ablated.shape != base.shape:
                    raise ValueError(
                        f"run_fn must return the same shape for every head_mask; got {tuple(base.shape)} "
                        f"unablated and {tuple(ablated.shape)} with head ({layer}, {head}) masked"
                    )
                if scalar:
                    out[layer, head] = (ablated - base).reshape(()).cpu()
                else:
                    cos = torch.nn.functional.cosine_similarity(ablated, base, dim=-1)
                    out[layer, head] = (1.0 - cos).mean().cpu()
    return out
