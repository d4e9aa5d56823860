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
group), or when the test is one of :data:`EXPLAINED`: failures investigated and found to assert what
only a recorded backward does (a refusal that protects a gradient, the tensors saved for backward),
each with its reason. Any other failure stays a failure: it is a finding.

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

# autograd's messages when a body under inference mode asks for a graph it could not record. Not among
# them: "Inference tensors cannot be saved for backward", which a test body entirely in inference mode
# only meets where a custom autograd.Function tries to record under enable_grad() (a finding, fixed
# in core/call.py; tests/core/test_trust_inference_mode.py)
AUTOGRAD_NEEDS = (
    "does not require grad and does not have a grad_fn",
    "One of the differentiated Tensors does not require grad",
    "Inplace update to inference tensor outside InferenceMode",
    "Setting requires_grad=True on inference tensor outside InferenceMode",
    "gradcheck expects at least one input tensor to require gradient",
    "expects at least one input tensor to require gradient",
    "Numerical gradient for function expected to be zero",  # gradcheck: the output has no graph
)
# tests whose failure under inference mode was investigated and needs autograd in a way no message
# shows (an assertion on what only a recorded backward does): node id without parameters -> why
EXPLAINED = {
    "tests/core/test_sdpa_flash.py::test_gradients_below_the_rerun_threshold_match_float64":
        "a GQA call recording no backward takes the public SDPA function, which returns no lse (backends/sdpa.py); "
        "the test reads the lse on its way to gradients",
    "tests/core/test_sdpa_flash.py::test_gradient_into_lse_matches_float64_logsumexp":
        "as above: no lse from the public SDPA function for GQA without a backward",
    "tests/core/test_bad_inputs.py::test_blockwise_double_backward_says_it_is_unsupported_and_names_the_reference":
        "gradgradcheck builds a first-order graph first, which inference mode never records",
    "tests/core/test_call_cache.py::test_what_validation_or_the_choice_reads_misses":
        "its grad_mode case turns grad mode off against a default of on; inference mode keeps it off for both calls, "
        "which then rightly share a cache key",
    "tests/core/test_compile.py::test_a_captured_tensor_of_a_bias_defined_in_the_graph_is_refused_not_silently_untrained":
        "refused only where autograd records (a gradient could be lost); with none recorded the call runs, as the "
        "test's own no_grad half expects",
    "tests/core/test_flex_backend.py::test_declines_with_the_reason":
        "its cpu_training case: flex declines CPU calls that record a backward, and inference mode records none",
    "tests/core/test_flex_backend.py::test_a_learned_bias_needs_gradients_too": "as above: no backward is recorded",
    "tests/core/test_flex_backend.py::test_forced_on_cpu_training_raises_with_the_reason": "as above",
    "tests/core/test_flex_backend.py::test_auto_never_picks_it_for_cpu_training": "as above",
    "tests/core/test_trust_flex_grads.py::test_a_tensor_only_the_bias_reaches_makes_a_cpu_call_need_a_backward":
        "as above: a captured tensor needs a backward only where one is recorded",
    "tests/core/test_trust_flex_grads.py::test_forced_flex_raises_rather_than_drop_the_gradient": "as above",
    "tests/core/test_trust_flex_grads.py::test_learned_alibi_slopes_make_a_cpu_call_need_a_backward": "as above",
    "tests/core/test_sinks.py::test_a_backend_without_a_differentiable_lse_is_refused_not_silently_wrong":
        "refused only when q or k need gradients through the lse; inference mode records none",
    "tests/core/test_trust_grads.py::test_a_tensor_read_directly_and_through_one_computed_from_it_is_declined_by_blockwise":
        "blockwise declines only where its backward would count a path twice; inference mode has no backward",
    "tests/backends/test_blockwise_props.py::test_no_LxS_tensor_is_held":
        "reads the tensors saved for backward (out.grad_fn), which inference mode never records",
    "tests/models/detection/test_detector.py::test_activation_memory_grows_with_attention_and_leaves_batchnorm_alone":
        "measures the activations autograd saves for backward; inference mode saves none (0 MB)",
    "tests/distributed/test_ring_masks.py::test_ring_refuses_what_it_cannot_serve_before_any_communication":
        "ring attention refuses a trainable bias only where autograd records; under inference mode it goes on "
        "and asks for a process group",
}
_NEEDS = re.compile("|".join(re.escape(m) for m in AUTOGRAD_NEEDS))
_PREFIX = "not applicable under inference mode"
_TALLY = pytest.StashKey[dict]()  # the run's node ids by outcome


def _empty() -> dict:
    return {"passed": [], "not_applicable": {}, "explained": {}, "failed": [], "skipped": []}


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
    tally = item.config.stash.setdefault(_TALLY, _empty())
    if rep.passed and not hasattr(rep, "wasxfail"):
        tally["passed"].append(item.nodeid)
    elif rep.failed and call.excinfo is not None and (need := autograd_need(call.excinfo.value)):
        rep.outcome = "skipped"
        rep.wasxfail = f"{_PREFIX}: {need}"
        tally["not_applicable"][item.nodeid] = need
    elif rep.failed and (why := EXPLAINED.get(item.nodeid.split("[")[0])):
        rep.outcome = "skipped"
        rep.wasxfail = f"{_PREFIX} (explained): {why}"
        tally["explained"][item.nodeid] = why
    elif rep.failed:
        tally["failed"].append(item.nodeid)
    else:
        tally["skipped"].append(item.nodeid)


def pytest_terminal_summary(terminalreporter, config) -> None:
    if not _enabled(config):
        return
    tally = config.stash.get(_TALLY, _empty())
    counts = {k: len(v) for k, v in tally.items()}
    terminalreporter.section("inference mode", sep="-", bold=False)
    terminalreporter.write_line(
        f"{counts['passed']} passed, {counts['not_applicable']} not applicable (need autograd), "
        f"{counts['explained']} explained (need autograd, EXPLAINED), {counts['failed']} failed (findings), "
        f"{counts['skipped']} skipped or xfailed")
    path = config.getoption("inference_mode_report")
    if path:
        Path(path).write_text(json.dumps({"counts": counts, **tally}, indent=1) + "\n", encoding="utf-8")
