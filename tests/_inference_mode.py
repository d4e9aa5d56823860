"""``pytest --inference-mode``: every test's body under ``torch.inference_mode()``.

Inference mode is where evaluation and serving run (``with torch.inference_mode(): model(x)``), and
tensors made there carry no version counter and cannot join autograd later: code that keys a cache
by ``_version`` or hands a cached tensor to a later training call breaks there and nowhere else. This
option runs the whole suite's bodies in that mode (fixtures still set up and tear down outside it,
as a user's objects are made before the ``with``), so every call the suite makes is also made there.

A test that needs autograd cannot apply: its ``backward()``, ``torch.autograd.grad`` or gradcheck
finds no graph. Such a failure is reported as *not applicable* (pytest's ``xfailed``, the reason
starting ``not applicable under inference mode``) only when the error is one of autograd's own
(:data:`AUTOGRAD_NEEDS`, searched through the exception, its causes and the members of an exception
group). Any other failure stays a failure: it is a finding.

``--inference-mode-report PATH`` writes the counts and the node ids of the not applicable and the
failed tests as JSON. Loaded by ``tests/conftest.py``; ``tests/test_inference_mode_option.py`` runs
it on a tiny test file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

# autograd's messages when a body under inference mode asks for a graph it could not record
AUTOGRAD_NEEDS = (
    "Inference tensors cannot be saved for backward",
    "does not require grad and does not have a grad_fn",
    "One of the differentiated Tensors does not require grad",
    "Inplace update to inference tensor outside InferenceMode",
    "Setting requires_grad=True on inference tensor outside InferenceMode",
    "gradcheck expects at least one input tensor to require gradient",
    "expects at least one input tensor to require gradient",
    "Numerical gradient for function expected to be zero",  # gradcheck: the output has no graph
)
_NEEDS = re.compile("|".join(re.escape(m) for m in AUTOGRAD_NEEDS))
_PREFIX = "not applicable under inference mode"


def pytest_addoption(parser) -> None:
    group = parser.getgroup("attnkit")
    group.addoption("--inference-mode", action="store_true", default=False,
                    help="run every test's body under torch.inference_mode(); failures that only need "
                         "autograd are reported as not applicable (xfailed)")
    group.addoption("--inference-mode-report", metavar="PATH", default=None,
                    help="with --inference-mode: write the counts and the node ids as JSON to PATH")


def _enabled(config) -> bool:
    return bool(config.getoption("inference_mode", default=False))


def _leaves(exc: BaseException, seen: set[int] | None = None):
    """The exceptions an error is made of: each member of an exception group, followed down its
    ``__cause__`` / ``__context__`` chain (a wrapper raised ``from`` autograd's error counts as it)."""
    seen = set() if seen is None else seen
    if id(exc) in seen:
        return
    seen.add(id(exc))
    if isinstance(exc, BaseExceptionGroup):
        for member in exc.exceptions:
            yield from _leaves(member, seen)
        return
    yield exc
    for nxt in (exc.__cause__, exc.__context__):
        if nxt is not None:
            yield from _leaves(nxt, seen)


def autograd_need(exc: BaseException) -> str | None:
    """The autograd message that makes a failure *not applicable* (the first match), else None.
    An exception group counts only when every member needs autograd: one other error is a finding."""
    members = list(exc.exceptions) if isinstance(exc, BaseExceptionGroup) else [exc]
    found = []
    for member in members:
        hit = next((m.group(0) for e in _leaves(member) if (m := _NEEDS.search(str(e)))), None)
        if hit is None:
            return None
        found.append(hit)
    return found[0] if found else None


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    if not _enabled(pyfuncitem.config):
        yield
        return
    with torch.inference_mode():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not _enabled(item.config) or rep.when != "call":
        return
    tally = item.config.stash.setdefault(_TALLY, {"passed": [], "not_applicable": {}, "failed": [], "skipped": []})
    if rep.passed and not hasattr(rep, "wasxfail"):
        tally["passed"].append(item.nodeid)
    elif rep.failed and call.excinfo is not None and (need := autograd_need(call.excinfo.value)):
        rep.outcome = "skipped"
        rep.wasxfail = f"{_PREFIX}: {need}"
        tally["not_applicable"][item.nodeid] = need
    elif rep.failed:
        tally["failed"].append(item.nodeid)
    else:
        tally["skipped"].append(item.nodeid)


_TALLY = pytest.StashKey[dict]()


def pytest_terminal_summary(terminalreporter, config) -> None:
    if not _enabled(config):
        return
    tally = config.stash.get(_TALLY, {"passed": [], "not_applicable": {}, "failed": [], "skipped": []})
    counts = {k: len(v) for k, v in tally.items()}
    terminalreporter.section("inference mode", sep="-", bold=False)
    terminalreporter.write_line(
        f"{counts['passed']} passed, {counts['not_applicable']} not applicable (need autograd), "
        f"{counts['failed']} failed (findings), {counts['skipped']} skipped or xfailed")
    path = config.getoption("inference_mode_report")
    if path:
        Path(path).write_text(json.dumps({"counts": counts, **tally}, indent=1) + "\n", encoding="utf-8")
