"""The cases of ``benchmarks/flex_cuda.py`` as attnkit calls, for checking the cost model against its
committed results (``flex_cuda.json`` on an H200, ``flex_cpu_quick.json`` on this CPU) without running
them: expanded zero-stride tensors give the benchmark's shapes without its memory.

Shape legend: B = 1 batch, H = 8 heads, n queries and keys, E = 64 head dim.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from attnkit import biases as Bi
from attnkit import masks as M
from attnkit.core import cost
from attnkit.core.call import make_call

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def speed_rows(name: str) -> dict[str, dict]:
    """The ``speed`` rows of ``benchmarks/results/<name>``, by case."""
    return {r["case"]: r for r in json.loads((RESULTS / name).read_text())["speed"]}


def case_call(case: str, n: int, dtype: torch.dtype):
    """The benchmark's call for ``case``: a 256-key window, causal (+ ALiBi), or its custom predicate
    over 1k documents with the ids captured."""
    ids = torch.arange(n) // 1024

    def same_doc(b, h, q_idx, kv_idx):
        return ids[q_idx] == ids[kv_idx]

    mask = M.causal() if "causal" in case else M.sliding_window(255, 0) if "window" in case else M.custom(same_doc)
    q = torch.zeros((), dtype=dtype).expand(1, 8, n, 64)
    return make_call(q, q, q, mask=mask, bias=Bi.ALiBi(8) if "alibi" in case else None)


def rank_backends(call, device: str = "cpu"):
    """(name, explain, estimates) of ``auto``'s ranking of sdpa, blockwise, reference and flex for
    ``call`` with ``device``'s rates, flex included whether or not it is registered here."""
    from attnkit.backends import flex, sdpa
    from attnkit.backends import reference as ref
    from attnkit.backends.blockwise import estimate as bw_estimate
    from attnkit.core.registry import Backend

    cands = [Backend("sdpa", sdpa.run, sdpa.supports, True, sdpa.estimate, 10),
             Backend("blockwise", None, None, True, bw_estimate, 5),
             Backend("reference", ref.run, ref.supports, True, ref.estimate, 0),
             Backend("flex", flex.run, flex.supports, True, flex.estimate, -5)]
    with cost.on_device(device):
        estimates = {b.name: b.estimate(call) for b in cands}
    best, explain = cost.rank(cands, estimates, None)
    return best.name, explain, estimates
