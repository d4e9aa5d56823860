"""Failure classes the fuzz knows to be open, each a request to a backend's owner.

``OPEN_REQUESTS`` maps a request's name to a predicate ``(params, backend, verdict, hostile_applied,
poisoned) -> bool`` that says whether a failure belongs to it. The test suite xfails (not strictly)
a case whose every failure is claimed by one; ``benchmarks/fuzz_attention.py`` counts failures per
request, and "unexplained" for the rest. A predicate claims as little as it can: the backend that
fails, the dtype, what broke and the input feature that breaks it. Remove an entry when its fix
lands: the cases it covered must then pass.
"""

from __future__ import annotations


# empty: no failure class is open. Add ``"name": predicate`` (a predicate may use ``v.detail``, the
# backend ``auto`` picked, and ``set(v.failure.split(","))``, what broke) when one is filed.
OPEN_REQUESTS: dict = {}


def classify(params: dict, backend: str, verdict, hostile_applied: bool, poisoned: bool = False) -> str:
    """The first open request claiming this failure, or "unexplained" (always, for an exception:
    a valid call that raises is never an accepted precision or leak problem)."""
    if verdict.failure.startswith("exception"):
        return "unexplained"
    for name, claims in OPEN_REQUESTS.items():
        if claims(params, backend, verdict, hostile_applied, poisoned):
            return name
    return "unexplained"
