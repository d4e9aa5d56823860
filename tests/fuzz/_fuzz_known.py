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


OPEN_REQUESTS: dict = {
    # every class filed under issue 8 is fixed (blockwise, sdpa, reference: half precision in float32,
    # leak-proof masked keys/values/bias, GQA group sums in float32); add an entry here only with a request
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
