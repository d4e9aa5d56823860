"""Input handling for :class:`~attnkit.modules.multihead.MultiHeadAttention`: masks, padding,
positions and rotary embeddings, turned into what :func:`attnkit.attention` takes.

* :func:`combine_masks` — AND of a user mask, torch's ``key_padding_mask`` (True = padding), Hugging
  Face's ``attention_mask`` (1 = token) and ``causal`` (bottom-right aligned), all converted to the
  True = may-attend polarity.
* ``_new_token_validity`` — with a cache, the padding masks describe only the new tokens; folds
  them into one (B, L) validity mask for the cache to remember.
* ``_check_rotary`` — validates a ``rotary=`` argument (Su et al. 2021,
  https://arxiv.org/abs/2104.09864) against the module's head dim.
* ``_apply_positions`` — without a cache: rotates q/k and evaluates position biases at explicit
  ``positions``.

Kept apart from the module so the module file holds the projections and the attention call only.

Shape legend: B batch, H query heads, Hkv key/value heads, L new (query) tokens, S keys,
E head dim; q (B, H, L, E), k (B, Hkv, S, E); positions (L,) or (B, L).
"""

from __future__ import annotations

import torch

from ..core import masks as M

__all__ = ["combine_masks"]


def _new_token_validity(key_padding_mask, attention_mask, B: int, L: int, device) -> torch.Tensor | None:
    """(B, L) bool, True = real token, from torch's or Hugging Face's padding convention; None if all real."""
    valid = None
    for name, m, flip in (("key_padding_mask", key_padding_mask, True), ("attention_mask", attention_mask, False)):
        if m is None:
            continue
        if not isinstance(m, torch.Tensor) or m.shape != (B, L):
            raise ValueError(
                f"with a cache, {name} covers the new tokens only and must be (B, L)=({B}, {L}), got "
                f"{tuple(getattr(m, 'shape', ())) or type(m).__name__}; the cache remembers the padding of earlier tokens"
            )
        mm = (M.from_key_padding_mask(m) if flip else M.from_attention_mask(m)).valid.to(device)
        valid = mm if valid is None else valid & mm
    if valid is not None and bool(valid.all()):
        return None
    return valid


def _check_rotary(rotary, head_dim: int):
    if rotary is None:
        return None
    from .rotary import RotaryEmbedding

    if not isinstance(rotary, RotaryEmbedding):
        raise TypeError(f"rotary must be an attnkit RotaryEmbedding or None, got {type(rotary).__name__}")
    if rotary.head_dim != head_dim:
        raise ValueError(f"rotary was built for head_dim={rotary.head_dim} but this module has head_dim={head_dim}; build RotaryEmbedding({head_dim})")
    return rotary


def _apply_positions(q, k, bias, positions, rotary, self_attention: bool):
    """No cache: rotate q/k and evaluate biases at ``positions`` (queries; keys too in self-attention)."""
    B, _, L, _ = q.shape
    S = k.shape[2]
    if positions is None:
        q_pos = torch.arange(L, device=q.device)[None]
    else:
        if not isinstance(positions, torch.Tensor) or positions.is_floating_point() or positions.dim() not in (1, 2) or positions.shape[-1] != L:
            raise ValueError(f"positions must be an integer tensor (L,)=({L},) or (B, L)=({B}, {L}), got {getattr(positions, 'shape', type(positions).__name__)}")
        q_pos = positions.long().to(q.device)
        q_pos = q_pos[None] if q_pos.dim() == 1 else q_pos
    if self_attention and S == L:
        k_pos = q_pos
    elif positions is not None:
        raise ValueError("positions= without a cache applies to self-attention only (key=None); for cross-attention the keys have their own positions")
    else:
        k_pos = torch.arange(S, device=q.device)[None]
    if rotary is not None:
        if not self_attention:
            raise ValueError("rotary embedding is for self-attention (key=None); cross-attention keys have no shared positions")
        if positions is None:  # 0..L-1 and 0..S-1: table slices, no value checks in a traced graph
            q, k = rotary(q), rotary(k)
        else:
            q, k = rotary(q, q_pos), rotary(k, k_pos)
    if bias is not None and positions is not None:
        from ..core.biases import as_modifier
        from .cache import PositionedBias

        bias = PositionedBias(as_modifier(bias), q_pos, k_pos)
    return q, k, bias


def combine_masks(mask=None, key_padding_mask=None, attention_mask=None, causal: bool = False, *, key_valid=None) -> M.Mask | None:
    """AND of every mask given, each converted to the True = may-attend polarity.

    ``key_valid``: (B, S) bool, True = real key (what a cross-attention cache stored)."""
    parts = []
    if mask is not None:
        parts.append(M.as_mask(mask))
    if key_padding_mask is not None:
        parts.append(M.from_key_padding_mask(key_padding_mask))
    if attention_mask is not None:
        parts.append(M.from_attention_mask(attention_mask))
    if key_valid is not None:
        parts.append(M.KeyPaddingMask(key_valid))
    if causal:
        parts.append(M.causal("bottom_right"))
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = out & p
    return out
