"""Failure classes the fuzz knows to be open, each a request to the backend owners (issue 8).

``OPEN_REQUESTS`` maps a request's name (as filed in /tmp/attnkit-coord/backend-requests.md) to a
predicate ``(params, backend, verdict, hostile_applied) -> bool`` that says whether a failure
belongs to it. The test suite xfails (not strictly) a case whose every failure is claimed by one;
``benchmarks/fuzz_attention.py`` counts failures per request, and "unexplained" for the rest.
Remove an entry when its fix lands: the cases it covered must then pass.
"""

from __future__ import annotations

HALF = ("bfloat16", "float16")


def _ran(name, v, backend):  # the backend that actually ran (auto reports its choice in v.detail)
    return name == backend or (name == "auto" and v.detail == backend)


OPEN_REQUESTS = {
    "issue 8 item 2 (H1): masked keys/bias holding NaN/inf/1e38 leak into out and grads":
        lambda p, name, v, hostile: hostile and not _ran(name, v, "blockwise"),  # blockwise: fixed (A1)
    "issue 8 item 1 (H1): sdpa half-precision bias materialized in the input dtype":
        lambda p, name, v, hostile: p["dtype"] in HALF and bool(p["bias"]) and _ran(name, v, "sdpa"),
    "H4 request (H1, scores.py): cosine/general scores transformed in the half dtype":
        lambda p, name, v, hostile: p["dtype"] in HALF and p["score"] in ("cosine", "general", "general_heads")
        and _ran(name, v, "sdpa"),  # blockwise: as_dot on float32 copies (A1)
    "H4 request (H1): reference sums GQA/MQA dk, dv over the group in the half dtype":
        lambda p, name, v, hostile: p["dtype"] in HALF and p["Hkv"] < p["H"] and _ran(name, v, "reference")
        and set(v.failure.split(",")) <= {"dk", "dv"},
    "H4 request (H1): sdpa backward in half precision beyond 2x the reference":
        lambda p, name, v, hostile: p["dtype"] in HALF and _ran(name, v, "sdpa") and "out" not in v.failure.split(","),
}


def classify(params: dict, backend: str, verdict, hostile_applied: bool) -> str:
    """The first open request claiming this failure, or "unexplained" (always, for an exception:
    a valid call that raises is never an accepted precision or leak problem)."""
    if verdict.failure.startswith("exception"):
        return "unexplained"
    for name, claims in OPEN_REQUESTS.items():
        if claims(params, backend, verdict, hostile_applied):
            return name
    return "unexplained"
