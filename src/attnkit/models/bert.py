"""BERT encoder assembled from attnkit's :class:`~attnkit.modules.multihead.MultiHeadAttention`.

Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", https://arxiv.org/abs/1810.04805. Post-LN Transformer encoder (Vaswani et al. 2017,
https://arxiv.org/abs/1706.03762): for each layer

    a = MHA(x) = concat_h softmax(q_h k_hᵀ / sqrt(E) + mask) v_h · W_o
    x = LayerNorm(x + a)
    x = LayerNorm(x + W_2 gelu(W_1 x))

with embeddings ``LayerNorm(word[id] + position[i] + token_type[t])`` and gelu the exact erf form.
Sentence embeddings (Reimers & Gurevych 2019, Sentence-BERT, https://arxiv.org/abs/1908.10084) are
the mean of the last hidden states over real (non-padding) tokens, L2-normalised for
all-MiniLM-L6-v2.

Head ablation (``head_mask``, Michel et al. 2019, https://arxiv.org/abs/1905.10650): Hugging Face
multiplies the attention *weights* of head h by ``m_h``; since ``(m_h P_h) V_h = m_h (P_h V_h)`` this
model multiplies each head's *output* instead, so a masked run still uses the fused backend.

No Hugging Face code runs in the forward pass; :mod:`attnkit.models.bert_loader` loads the
safetensors weights and the tokenizer offline.

Shape legend: B batch, L tokens, D hidden size, H heads, E = D / H head dim, F FFN size,
V vocabulary, N layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from ..core import hooks
from ..core import masks as M
from ..core.call import attention
from ..modules.multihead import MultiHeadAttention


@dataclass(frozen=True)
class BertConfig:
    """The fields of a Hugging Face BERT ``config.json`` that the architecture needs."""

    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1

    def __post_init__(self):
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size must be divisible by num_attention_heads, got {self.hidden_size} and "
                f"{self.num_attention_heads}; pick a head count dividing the hidden size"
            )
        if self.hidden_act not in _ACTIVATIONS:
            raise ValueError(f"hidden_act must be one of {sorted(_ACTIVATIONS)}, got {self.hidden_act!r}")

    @classmethod
    def from_dict(cls, d: dict) -> "BertConfig":
        """Keep the known keys of a ``config.json`` dict; reject non-BERT position schemes."""
        pos = d.get("position_embedding_type", "absolute")
        if pos != "absolute":
            raise ValueError(f"only absolute position embeddings are implemented, config has {pos!r}")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


_ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),  # Hugging Face "gelu" is the exact erf form
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


@dataclass
class BertOutput:
    """``last_hidden_state`` (B, L, D); ``pooler_output`` (B, D) = tanh(W h_[CLS]);
    ``hidden_states``: N + 1 tensors (B, L, D) (embeddings first) when asked;
    ``attentions``: N tensors (B, H, L, L) when asked (rows of padded keys are 0)."""

    last_hidden_state: torch.Tensor
    pooler_output: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class BertEmbeddings(nn.Module):
    def __init__(self, cfg: BertConfig, device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id, **kw)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size, **kw)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size, **kw)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, **kw)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        B, L = input_ids.shape
        pos = torch.arange(L, device=input_ids.device)  # (L,)
        x = self.word_embeddings(input_ids) + self.position_embeddings(pos)[None] + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.norm(x))  # (B, L, D)


class BertLayer(nn.Module):
    """One post-LN encoder layer; the attention is attnkit's ``MultiHeadAttention``."""

    def __init__(self, cfg: BertConfig, backend: str = "auto", device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        D = cfg.hidden_size
        self.attention = MultiHeadAttention(
            D, cfg.num_attention_heads, dropout=cfg.attention_probs_dropout_prob, backend=backend, **kw
        )
        self.attn_norm = nn.LayerNorm(D, eps=cfg.layer_norm_eps, **kw)
        self.intermediate = nn.Linear(D, cfg.intermediate_size, **kw)
        self.output = nn.Linear(cfg.intermediate_size, D, **kw)
        self.out_norm = nn.LayerNorm(D, eps=cfg.layer_norm_eps, **kw)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.act = _ACTIVATIONS[cfg.hidden_act]

    def forward(
        self, x: torch.Tensor, mask: M.Mask | None, head_mask: torch.Tensor | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, L, D), head_mask (H,) → (x (B, L, D), weights (B, H, L, L) or None)."""
        mha = self.attention
        q, k, v = mha.project(x, x, x)  # (B, H, L, E) each
        # the scope tells attnkit.inspect.capture which layer this call belongs to
        with hooks.scope(mha):
            res = attention(
                q, k, v, mask=mask, dropout_p=mha.dropout if self.training else 0.0,
                backend=mha.backend, return_weights=need_weights,
            )
        out, w = res.out, res.weights  # (B, H, L, E), (B, H, L, L) | None
        if head_mask is not None:
            hm = head_mask.to(device=out.device, dtype=out.dtype).view(1, -1, 1, 1)
            out = out * hm
            w = None if w is None else w * hm
        x = self.attn_norm(x + self.dropout(mha.merge(out)))
        x = self.out_norm(x + self.dropout(self.output(self.act(self.intermediate(x)))))
        return x, w


class BertModel(nn.Module):
    """BERT encoder + pooler. ``forward(input_ids, attention_mask, token_type_ids)`` like Hugging Face's."""

    def __init__(self, config: BertConfig, *, backend: str = "auto", device=None, dtype=None):
        super().__init__()
        if not isinstance(config, BertConfig):
            raise TypeError(f"config must be a BertConfig, got {type(config).__name__}; build one with BertConfig.from_dict")
        self.config = config
        kw = {"device": device, "dtype": dtype}
        self.embeddings = BertEmbeddings(config, **kw)
        self.layers = nn.ModuleList(BertLayer(config, backend, **kw) for _ in range(config.num_hidden_layers))
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size, **kw)

    @property
    def num_layers(self) -> int:
        return self.config.num_hidden_layers

    @property
    def num_heads(self) -> int:
        return self.config.num_attention_heads

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        head_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> BertOutput:
        """input_ids (B, L) int; attention_mask (B, L) 1 = token, 0 = padding; token_type_ids (B, L).

        ``head_mask``: (N, H) or (H,) floats multiplied into each head's output (0 ablates a head).
        ``output_attentions`` computes weights with a weight-returning backend (slower); to look
        at weights while the model keeps its fused backend use :func:`attnkit.inspect.capture`.
        """
        input_ids = self._check_ids(input_ids)
        B, L = input_ids.shape
        if L > self.config.max_position_embeddings:
            raise ValueError(
                f"input_ids has {L} tokens but the model has {self.config.max_position_embeddings} positions; "
                "truncate the input (tokenizer max_length)"
            )
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        elif tuple(token_type_ids.shape) != (B, L):
            raise ValueError(f"token_type_ids must have the shape of input_ids {(B, L)}, got {tuple(token_type_ids.shape)}")
        mask = None
        if attention_mask is not None:
            if tuple(attention_mask.shape) != (B, L):
                raise ValueError(f"attention_mask must be (B, L) = {(B, L)} with 1 = token, got {tuple(attention_mask.shape)}")
            if not bool(attention_mask.bool().all()):  # no padding: no mask, so SDPA runs unmasked
                mask = M.from_attention_mask(attention_mask.to(input_ids.device))
        hm = self._head_mask(head_mask)

        x = self.embeddings(input_ids, token_type_ids)  # (B, L, D)
        hidden = [x] if output_hidden_states else None
        attns = [] if output_attentions else None
        for i, layer in enumerate(self.layers):
            x, w = layer(x, mask, None if hm is None else hm[i], need_weights=bool(output_attentions))  # HF passes None for "not asked"
            if hidden is not None:
                hidden.append(x)
            if attns is not None:
                attns.append(w)
        pooled = torch.tanh(self.pooler(x[:, 0]))  # (B, D)
        return BertOutput(x, pooled, None if hidden is None else tuple(hidden), None if attns is None else tuple(attns))

    def _check_ids(self, input_ids) -> torch.Tensor:
        if not isinstance(input_ids, torch.Tensor) or input_ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"input_ids must be an int64/int32 tensor (B, L), got {getattr(input_ids, 'dtype', type(input_ids).__name__)}")
        if input_ids.dim() == 1:
            raise ValueError(f"input_ids must be (B, L), got shape {tuple(input_ids.shape)}; batch one sequence with .unsqueeze(0)")
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (B, L), got shape {tuple(input_ids.shape)}")
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= self.config.vocab_size):
            raise ValueError(f"input_ids must lie in [0, {self.config.vocab_size}), got range [{int(input_ids.min())}, {int(input_ids.max())}]")
        return input_ids

    def _head_mask(self, head_mask) -> torch.Tensor | None:
        if head_mask is None:
            return None
        N, H = self.num_layers, self.num_heads
        if not isinstance(head_mask, torch.Tensor) or not head_mask.is_floating_point():
            raise TypeError(f"head_mask must be a float tensor (N={N}, H={H}) or (H,), got {getattr(head_mask, 'dtype', type(head_mask).__name__)}")
        if tuple(head_mask.shape) == (H,):
            head_mask = head_mask.expand(N, H)
        if tuple(head_mask.shape) != (N, H):
            raise ValueError(f"head_mask must be (num_layers, num_heads) = ({N}, {H}) or ({H},), got {tuple(head_mask.shape)}")
        return head_mask


def mean_pool(last_hidden_state: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of (B, L, D) hidden states over the real tokens of each row → (B, D).

    ``attention_mask`` (B, L), 1 = token. A row with no token gives zeros (not NaN).
    """
    if attention_mask is None:
        return last_hidden_state.mean(1)
    m = attention_mask.to(last_hidden_state.dtype).unsqueeze(-1)  # (B, L, 1)
    total = (last_hidden_state * m).sum(1)
    count = m.sum(1).clamp(min=1.0)
    return total / count


def sentence_embedding(model: BertModel, input_ids, attention_mask=None, token_type_ids=None, *, normalize: bool = True, **kwargs) -> torch.Tensor:
    """Mean-pooled (and L2-normalised, as all-MiniLM-L6-v2 is trained) sentence embeddings (B, D)."""
    out = model(input_ids, attention_mask, token_type_ids, **kwargs)
    emb = mean_pool(out.last_hidden_state, attention_mask)
    return F.normalize(emb, dim=-1) if normalize else emb


def num_parameters(model: nn.Module) -> int:
    return sum(math.prod(p.shape) for p in model.parameters())
