"""Failure classes the fuzz knows to be open, each a request to a backend's owner.

``OPEN_REQUESTS`` maps a request's name to a predicate ``(params, backend, verdict, hostile_applied,
poisoned) -> bool`` that says whether a failure belongs to it. The test suite xfails (not strictly)
a case whose every failure is claimed by one; ``benchmarks/fuzz_attention.py`` counts failures per
request, and "unexplained" for the rest. A predicate claims as little as it can: the backend that
fails, the dtype, what broke and the input feature that breaks it. Remove an entry when its fix
lands: the cases it covered must then pass.
"""

from __future__ import annotations


def _ran(name, v, backend):  # the backend that actually ran (auto reports its choice in v.detail)
    return name == backend or (name == "auto" and v.detail == backend)


def _broke(v) -> set[str]:
    return set(v.failure.split(","))


def _torch_flash_accuracy(p, name, v, hostile_applied, poisoned) -> bool:
    # PyTorch's fused CPU flash-attention kernel (the sdpa backend, and auto when it picks sdpa) is less
    # accurate than the plain float32 softmax it is judged against: a faster exp and weights
    # recomputed from a rounded lse; measured up to ~600 ulps of |dv| and ~200 of |out| in float32
    # (hostile values in dead keys change nothing here: a leak shows as a non-finite or huge error,
    # which this never claims)
    if poisoned or p["dtype"] not in ("float32", "bfloat16") or (hostile_applied and p.get("hostile_at") == "q"):
        return False
    kernel = _ran(name, v, "sdpa")  # blockwise's fused route takes its gradients from the tile loop
    broke = _broke(v)
    if not kernel or not broke <= {"out", "dq", "dk", "dv"}:
        return False
    return all(v.errors[n] <= 64 * v.tolerances[n] for n in broke)  # finite, and within 64x: rounding, not a leak


OPEN_REQUESTS: dict = {
    "torch-cpu-flash-fp32-accuracy": _torch_flash_accuracy,
}


def classify(params: dict, backend: str, verdict, hostile_applied: bool, poisoned: bool = False) -> str:
    """The first open request claiming this failure, or "unexplained" (always, for an exception:
    a valid call that raises is never an accepted precision or leak problem)."""
    if verdict.failure.startswith("exception"):
        return "unexplained"
    for name, claims in OPEN_REQUESTS.items():
        if claims(params, backend, verdict, hostile_applied, poisoned):
            return name
    return "unexplained"
