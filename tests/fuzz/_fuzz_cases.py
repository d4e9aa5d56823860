"""The differential fuzz's cases, in one place: draw them, build them, run them, judge them.

A case is a JSON-able dict of parameters (``draw_case``) — shapes, dtype, score, mask and bias
specs, blockwise tile sizes, the memory layout of q, k, v and a dense bias (``_fuzz_layouts``), a
hostile value for never-allowed positions, a non-finite value in an allowed one — from which
``build`` makes, with its
own seed, the tensors and attnkit objects, and the same masks/biases/scores as plain specs for the
independent oracle (``_float64_oracle``). ``run_case`` runs every exact backend plus ``auto``
forward and backward and compares out, dq, dk, dv with the float64 oracle. A failing case's
params dict is its repro: ``run_case(params)`` again.

Tolerance (flash-attention's rule): a backend's max error against the float64 oracle must be at
most twice the error of the same computation done the reference way — float32 arithmetic on the
dtype-rounded inputs, results rounded to the dtype; the largest of three equally valid
evaluation orders (``_float64_oracle.attention(order=...)``: two GEMM orientations, one plain
reduction), since on a tensor of a few dozen entries one sample of float32 rounding can be ten
times below another correct one — plus a floor of ``FLOOR_ULPS[dtype]`` units of
the dtype's epsilon times the quantity's magnitude. Why a floor: when the baseline happens to be
(nearly) exact, 2× of ~0 would demand bit-identity from a backend that merely sums in another
order. For half dtypes one ulp of the result's magnitude covers the final rounding landing on the
other side of a rounding boundary (baseline and backend each round once); for float32, 16 ulps
(1.9e-6 relative) cover reordered sums over S ≤ 257 keys. No term grows with the logits: a
backend whose weights are off by eps·|logit| (an lse rounded at |max|, scores scaled to base 2
before the shift) is several times over at logits of a few hundred, and that is what this rule is
for. The one other float32 term is FlashAttention's backward cancellation (``_fuzz_judge.floor``).

Non-finite values (``_fuzz_judge``): ``out`` must be NaN exactly where the oracle's is and ±inf
exactly where it is, in every case (the oracle defines the semantics: a row whose allowed scores
hold a NaN is NaN, a NaN a row may not see never reaches it, a fully masked row is 0). Gradients
must be finite and within the tolerance wherever the oracle's are, except in a case whose allowed
inputs hold a NaN: its loss is NaN, and which gradient entries show it is the algorithm's choice
(autograd through the formula, FlashAttention's D = rowsum(dO ∘ O), which spreads a NaN row to
every key of its tiles, or a NaN-aware path differ), so there only the entries where both are
finite are compared. A never-allowed (hostile) value must leave every gradient as the clean one.

Shape legend: q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev), dO (B, H, L, Ev).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np
import torch

import _float64_oracle as oracle
from _fuzz_layouts import draw_layout, share_entries
from _fuzz_poison import HOSTILE, poison  # noqa: F401 - HOSTILE is part of this module's interface

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
FLOOR_ULPS = {"float32": 16.0, "bfloat16": 1.0, "float16": 1.0}
HEADS = [(1, 1), (2, 2), (2, 1), (4, 1), (4, 2), (3, 1), (6, 2), (6, 3)]  # (H, Hkv): MHA, GQA, MQA
# Shape budgets. Small tiles are forced on most cases so small shapes cross tile edges (sizes at
# tile ± 1); "big" cases keep the default tiles (128 × 128 for windows, 256 × 512 dense) and sit at
# their edges. fp16 matmul on this CPU is slow: half sizes stay small. "small" is the default: 10,000
# cases in minutes on a shared 2-core machine; "full" adds wider shapes and a large-logit bf16 example
# (E = 64, L = S = 256, std 10).
BUDGETS = {
    "small": {"sizes": [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33], "half_sizes": [1, 2, 3, 7, 8, 9, 15, 16, 17],
              "big_p": 0.01, "big_sizes": [127, 128, 129], "big_E": [8], "E": [1, 4, 8, 16], "B": [1, 1, 2],
              "heads": HEADS[:6], "tiles": [None, (8, 8), (8, 16), (16, 8), (16, 16)]},
    "full": {"sizes": [1, 2, 3, 5, 8, 15, 16, 17, 31, 32, 33, 47, 64, 65], "half_sizes": [1, 2, 3, 7, 8, 9, 15, 16, 17],
             "big_p": 0.05, "big_sizes": [127, 128, 129, 255, 256, 257], "big_E": [8, 16, 64], "E": [1, 4, 8, 16, 32],
             "B": [1, 1, 2, 3], "heads": HEADS, "tiles": [None, (8, 8), (16, 16), (16, 32), (32, 16), (8, 32)]},
}
QUANTITIES = ("out", "dq", "dk", "dv")


# drawing -----------------------------------------------------------------------------------------
def draw_case(rng: random.Random, index: int, budget: str = "small") -> dict:
    """One case's parameters (JSON-able); ``budget`` names a shape budget of ``BUDGETS``."""
    bud = BUDGETS[budget]
    dtype = rng.choices(list(DTYPES), weights=[4, 4, 2])[0]
    big = dtype != "float16" and rng.random() < bud["big_p"]
    sizes = bud["big_sizes"] if big else (bud["half_sizes"] if dtype == "float16" else bud["sizes"])
    L, S = rng.choice(sizes), rng.choice(sizes)
    if rng.random() < 0.2:
        S = L
    H, Hkv = rng.choice(HEADS[:4] if big else bud["heads"])
    score = rng.choices(["scaled_dot", "dot", "cosine", "general", "general_heads", "additive"], weights=[8, 2, 2, 1, 1, 1])[0]
    if big:
        E = rng.choice([e for e in bud["big_E"] if e <= 16] if score == "additive" else bud["big_E"])
    else:
        E = rng.choice([e for e in bud["E"] if e <= 16] if dtype == "float16" or score == "additive" else bud["E"])
    if score == "cosine" and E == 1:
        # cos of 1-D vectors is ±1: its exact gradient is 0 and any float one is rounding noise
        # amplified by 1/|k|, which measures nothing about a backend
        E = 4
    std = rng.choice([0.5, 1.0, 3.0, 10.0])
    if score in ("dot", "general", "general_heads"):
        std /= E**0.25  # the same logit scale as scaled dot: q·k has std ~ std² sqrt(E)
    return {
        "index": index,
        "seed": rng.randrange(2**31),
        "dtype": dtype,
        "B": 1 if big else rng.choice(bud["B"]),
        "H": H, "Hkv": Hkv, "L": L, "S": S, "E": E,
        "Ev": E if rng.random() < 0.7 else rng.choice([1, 8]),
        "std": std,
        "score": score,
        "scale": None if rng.random() < 0.8 else rng.choice([0.25, 2.0]),
        "mask": _draw_mask(rng, L, S, depth=0),
        "bias": _draw_bias(rng),
        "tiles": None if big else rng.choice(bud["tiles"]),
        "hostile": rng.choice([None, None, "nan", "inf", "-inf", "1e38"]),
        "hostile_at": rng.choice(["kv", "kv", "q"]),  # dead keys/values/bias entries, or dead query rows
        # NaN only: an allowed ±inf makes 0 · inf hinge on whether a weight underflows, which float64
        # and float32 decide differently (never-allowed ±inf are the hostile values above)
        "poison": None if rng.random() < 0.85 else {"tensor": rng.choice(["q", "k", "v", "bias"]), "value": "nan"},
        "layout": draw_layout(rng),
    }


def _draw_mask(rng: random.Random, L: int, S: int, depth: int) -> dict | None:
    kind = rng.choice(["none", "causal", "window", "padding", "document", "prefix_lm", "tensor", "mod"] if depth == 0
                      else ["causal", "window", "padding", "tensor", "mod"])
    align = rng.choice(["bottom_right", "top_left"])
    if kind == "none":
        return None
    if kind == "causal":
        spec = {"kind": "causal", "align": align}
    elif kind == "window":
        left, right = rng.choice([None, 0, 1, 3, 16]), rng.choice([None, 0, 0, 2])
        if left is None and right is None:
            left = 2
        spec = {"kind": "window", "left": left, "right": right, "align": align}
    elif kind == "padding":
        spec = {"kind": "padding", "lengths": [rng.randint(0, S) for _ in range(4)], "side": rng.choice(["right", "left"])}
    elif kind == "document":
        spec = {"kind": "document", "per_batch": rng.random() < 0.5, "ndocs": rng.randint(1, 4), "q_ids": L != S or rng.random() < 0.3}
    elif kind == "prefix_lm":
        spec = {"kind": "prefix_lm", "prefix": rng.randint(0, S) if rng.random() < 0.5 else [rng.randint(0, S) for _ in range(4)], "align": align}
    elif kind == "tensor":
        spec = {"kind": "tensor", "rank": rng.choice([2, 4]), "density": rng.choice([0.3, 0.8])}
    else:
        spec = {"kind": "mod", "every": rng.choice([2, 3])}
    if depth == 0 and rng.random() < 0.3:
        op = rng.choice(["and", "or", "not", "and"])
        if op == "not":
            return {"kind": "not", "a": spec}
        return {"kind": op, "a": spec, "b": _draw_mask(rng, L, S, depth=1)}
    return spec


def _draw_bias(rng: random.Random) -> list[dict]:
    align = rng.choice(["bottom_right", "top_left"])
    kind = rng.choice(["none", "none", "alibi", "t5", "shaw", "tensor", "custom", "softcap", "alibi+tensor", "alibi+softcap"])
    if kind == "none":
        return []
    if kind == "t5":
        nb = rng.choice([8, 32])
        return [{"kind": "t5", "num_buckets": nb, "max_distance": rng.choice([nb, 128]), "bidirectional": rng.random() < 0.6, "align": align}]
    if kind == "shaw":
        return [{"kind": "shaw", "max_distance": rng.choice([2, 16]), "align": align}]
    if kind == "tensor":
        return [{"kind": "tensor", "rank": rng.choice([2, 4])}]
    if kind == "softcap":
        return [{"kind": "softcap", "cap": rng.choice([5.0, 30.0])}]
    if kind == "custom":
        return [{"kind": "custom", "slope": rng.choice([0.05, -0.5])}]
    parts = [{"kind": "alibi", "align": align}]
    if kind.endswith("tensor"):
        parts.append({"kind": "tensor", "rank": 2})
    elif kind.endswith("softcap"):
        parts.append({"kind": "softcap", "cap": 30.0})
    return parts


def mask_label(spec: dict | None) -> str:
    if spec is None:
        return "none"
    if spec["kind"] in ("and", "or"):
        return f"{mask_label(spec['a'])}{'&' if spec['kind'] == 'and' else '|'}{mask_label(spec['b'])}"
    if spec["kind"] == "not":
        return "~" + mask_label(spec["a"])
    return spec["kind"]


def bias_label(parts: list[dict]) -> str:
    return "+".join(p["kind"] for p in parts) or "none"


# building ----------------------------------------------------------------------------------------
@dataclass
class Built:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    d_out: torch.Tensor
    score: object  # what attnkit gets as score=
    mask: object  # ... as mask=
    bias: object  # ... as bias=
    scale: float | None  # ... as scale=
    oracle_score: dict
    oracle_scale: float
    oracle_mask: dict | None
    oracle_biases: list[dict]
    dead: np.ndarray  # (B, Hkv, S) keys nobody may attend
    dead_rows: np.ndarray  # (B, H, L) queries with no allowed key
    poisoned: bool = False  # a non-finite value sits in an allowed position of q, k, v or the bias


def build(p: dict) -> Built:
    import attnkit
    from attnkit import biases, masks, scores

    g = torch.Generator().manual_seed(p["seed"])
    dt = DTYPES[p["dtype"]]
    B, H, Hkv, L, S, E, Ev = (p[n] for n in ("B", "H", "Hkv", "L", "S", "E", "Ev"))

    def randn(*shape, std=1.0):
        return torch.randn(*shape, generator=g) * std

    q = _values(randn(B, H, L, E, std=p["std"]), p).to(dt)
    k = _values(randn(B, Hkv, S, E, std=p["std"]), p).to(dt)
    v = randn(B, Hkv, S, Ev, std=3.0).to(dt)
    d_out = randn(B, H, L, Ev).to(dt)
    lay = p.get("layout") or {}
    if lay.get("k") == "expand":  # keys/values shared across the batch, so stride 0 can hold them
        k = share_entries(k)
    if lay.get("v") == "expand":
        v = share_entries(v)

    sc, o_score = _build_score(p["score"], E, H, randn, scores)
    o_mask = _oracle_mask(p["mask"], B, H, L, S, g)
    mask = _attnkit_mask(o_mask, B, L, S, masks, top=True)
    dead = oracle.dead_keys(o_mask, B, H, Hkv, L, S)
    o_biases, parts = [], []
    for spec in p["bias"]:
        o, m = _build_bias(spec, B, H, L, S, randn, biases)
        o_biases.append(o)
        parts.append(m)
    bias = None if not parts else (parts[0] if len(parts) == 1 else parts)
    default_scale = 1.0 / math.sqrt(E) if p["score"] == "scaled_dot" else 1.0
    ok = oracle.allowed(o_mask, B, H, L, S)
    built = Built(q, k, v, d_out, sc, mask, bias, p["scale"], o_score,
                  p["scale"] if p["scale"] is not None else default_scale, o_mask, o_biases, dead, ~ok.any(-1))
    if p.get("poison"):
        built.poisoned = poison(built, p["poison"], ok, g)
    return built


def _values(x: torch.Tensor, p: dict) -> torch.Tensor:
    """q or k as drawn, or with ``p["values"] == "grid"`` rounded to halves of integers (|x| <= 32):
    every product is a multiple of 1/4 and every dot over E <= 64 sums exactly in any order, even in
    bfloat16 inputs' float32 scores, so the float32 reference's only rounding is after the scores
    (scale, bias, softmax) and an error a backend adds in the same order as the scores' size (an lse
    rounded to an ulp of itself, a merge) stands out against it (``fuzz_attention.py --values grid``).
    Cosine scores keep the drawn values: the grid makes whole rows 0, where a normalised vector's
    gradient is 1/eps, a degenerate input that says nothing of a backend."""
    if p.get("values") != "grid" or p["score"] == "cosine":
        return x
    return (x * 2).round().clamp(-64, 64) / 2


def _build_score(kind, E, H, randn, scores):
    if kind in ("scaled_dot", "dot"):
        return (None if kind == "scaled_dot" and E % 2 else kind), {"kind": kind}
    if kind == "cosine":
        mod = scores.CosineScore(learnable=False)
        return mod, {"kind": "cosine", "tau": float(mod.log_tau.detach().double().exp()), "eps": mod.eps}
    if kind in ("general", "general_heads"):
        mod = scores.GeneralScore(E, num_heads=H if kind == "general_heads" else None)
        with torch.no_grad():
            mod.weight.copy_(torch.eye(E).expand_as(mod.weight) + 0.3 * randn(*mod.weight.shape))
        return mod, {"kind": "general", "w": mod.weight.detach().double().numpy()}
    mod = scores.AdditiveScore(E, 8)
    with torch.no_grad():
        for t in (mod.w_q.weight, mod.w_k.weight, mod.w_k.bias, mod.v.weight):
            t.copy_(randn(*t.shape, std=0.5))
    return mod, {"kind": "additive", "w_q": mod.w_q.weight.detach().double().numpy(), "w_k": mod.w_k.weight.detach().double().numpy(),
                 "b_k": mod.w_k.bias.detach().double().numpy(), "v": mod.v.weight.detach().double().numpy()}


def _oracle_mask(spec, B, H, L, S, g):
    """The params' mask spec with its data filled in (ids, lengths, tensors) for this shape."""
    if spec is None:
        return None
    kind = spec["kind"]
    if kind in ("and", "or"):
        return {"kind": kind, "a": _oracle_mask(spec["a"], B, H, L, S, g), "b": _oracle_mask(spec["b"], B, H, L, S, g)}
    if kind == "not":
        return {"kind": "not", "a": _oracle_mask(spec["a"], B, H, L, S, g)}
    out = dict(spec)
    if kind == "padding":
        out["lengths"] = spec["lengths"][:B]
    elif kind == "prefix_lm" and isinstance(spec["prefix"], list):
        out["prefix"] = spec["prefix"][:B]
    elif kind == "document":
        rows = B if spec["per_batch"] else 1

        def ids(n):  # sorted (contiguous runs, the packed-sequence case) document ids
            cuts = torch.randint(0, spec["ndocs"], (rows, n), generator=g)
            return torch.sort(cuts, dim=1).values.numpy()

        out["kv_ids"] = ids(S)
        out["q_ids"] = ids(L) if spec["q_ids"] else out["kv_ids"]
    elif kind == "tensor":
        shape = (L, S) if spec["rank"] == 2 else (B, H, L, S)
        out["data"] = (torch.rand(*shape, generator=g) < spec["density"]).numpy()
    return out


def _attnkit_mask(spec, B, L, S, masks, top=False):
    if spec is None:
        return None
    kind = spec["kind"]
    if kind == "and":
        return _attnkit_mask(spec["a"], B, L, S, masks) & _attnkit_mask(spec["b"], B, L, S, masks)
    if kind == "or":
        return _attnkit_mask(spec["a"], B, L, S, masks) | _attnkit_mask(spec["b"], B, L, S, masks)
    if kind == "not":
        return ~_attnkit_mask(spec["a"], B, L, S, masks)
    if kind == "causal":
        return masks.causal(spec["align"])
    if kind == "window":
        return masks.sliding_window(spec["left"], spec["right"], spec["align"])
    if kind == "padding":
        return masks.padding_mask(torch.tensor(spec["lengths"]), max_len=S, side=spec["side"])
    if kind == "document":
        kv, qi = torch.from_numpy(spec["kv_ids"]), torch.from_numpy(spec["q_ids"])
        kv = kv[0] if kv.shape[0] == 1 else kv
        qi = qi[0] if qi.shape[0] == 1 else qi
        return masks.document(kv, None if spec["q_ids"] is spec["kv_ids"] else qi)
    if kind == "prefix_lm":
        pre = spec["prefix"]
        return masks.prefix_lm(torch.tensor(pre) if isinstance(pre, list) else pre, spec["align"])
    if kind == "tensor":
        t = torch.from_numpy(spec["data"])
        t = t[None, None] if t.dim() == 2 else t  # (1, 1, L, S): a 2-D one is ambiguous when B == L
        return t if top else masks.TensorMask(t)  # a bare tensor on the left of & is torch's operator
    every = spec["every"]
    return masks.custom(lambda b, h, q, kv: kv % every != 0, depends_on=(), name=f"not_every_{every}")


def _build_bias(spec, B, H, L, S, randn, biases):
    kind = spec["kind"]
    if kind == "alibi":
        return spec, biases.ALiBi(H, align=spec["align"])
    if kind == "t5":
        m = biases.T5RelativeBias(H, num_buckets=spec["num_buckets"], max_distance=spec["max_distance"],
                                  bidirectional=spec["bidirectional"], align=spec["align"])
    elif kind == "shaw":
        m = biases.RelativePositionBias(H, max_distance=spec["max_distance"], align=spec["align"])
    elif kind == "custom":  # a user's bias function of the raw indices: slope · (q_idx - kv_idx)
        c = spec["slope"]
        return spec, biases.custom_bias(lambda b, h, q, kv: c * (q - kv).to(torch.float32), depends_on=(), name="index_slope")
    elif kind == "tensor":
        t = randn(*((L, S) if spec["rank"] == 2 else (B, H, L, S)), std=2.0)
        return {"kind": "tensor", "data": t.double().numpy()}, t
    else:
        cap = spec["cap"]
        return spec, biases.score_mod(lambda s, b, h, q, kv: cap * torch.tanh(s / cap), depends_on=(), name=f"softcap_{cap:g}")
    with torch.no_grad():  # the init std 0.02 would hide bias errors; use O(1) tables
        m.table.copy_(randn(*m.table.shape, std=2.0))
    return {**spec, "table": m.table.detach().double().numpy()}, m
