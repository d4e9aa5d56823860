"""``pytest --inference-mode`` (``tests/_inference_mode.py``) on a tiny test file, in a fresh pytest
process: each body runs under ``torch.inference_mode()``, a failure that only needs autograd is
*not applicable* (reported xfailed), an explained one is too, and any other failure stays a failure.
Without the option the bodies run in grad mode (this file's own run shows it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

import _inference_mode as im

CASES = '''
import pytest
import torch


def test_body_runs_in_inference_mode():
    assert torch.is_inference_mode_enabled()


def test_a_backward_needs_autograd():
    x = torch.ones(2, requires_grad=True)
    (x * 2).sum().backward()


def test_another_error_is_a_finding():
    raise ValueError("a finding")


def test_in_an_exception_group_one_other_error_is_a_finding():
    x = torch.ones(2, requires_grad=True)
    try:
        (x * 2).sum().backward()
    except RuntimeError as e:
        raise ExceptionGroup("two", [e, KeyError("other")])
'''


def _run(tmp_path: Path, *options: str) -> tuple[dict | None, str]:
    (tmp_path / "test_cases.py").write_text(CASES, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    report = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(im.__file__).parent), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "_inference_mode",
           "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"), *options,
           "--inference-mode-report", str(report), str(tmp_path / "test_cases.py")]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    return (json.loads(report.read_text()) if report.exists() else None), p.stdout + p.stderr


def test_the_option_runs_bodies_in_inference_mode_and_sorts_the_failures(tmp_path):
    got, log = _run(tmp_path, "--inference-mode")
    assert got is not None, log
    assert got["counts"] == {"passed": 1, "not_applicable": 1, "explained": 0, "failed": 2, "skipped": 0}, log
    assert got["passed"] == ["test_cases.py::test_body_runs_in_inference_mode"]
    assert "does not require grad" in got["not_applicable"]["test_cases.py::test_a_backward_needs_autograd"]
    assert sorted(got["failed"]) == ["test_cases.py::test_another_error_is_a_finding",
                                     "test_cases.py::test_in_an_exception_group_one_other_error_is_a_finding"]
    assert "1 xfailed" in log and "2 failed" in log and "inference mode" in log


def test_without_the_option_bodies_run_in_grad_mode(request):
    assert not request.config.getoption("inference_mode") or torch.is_inference_mode_enabled()
    if not request.config.getoption("inference_mode"):
        assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


def test_only_autograd_messages_make_a_failure_not_applicable():
    try:
        (torch.ones(2, requires_grad=True).detach() * 2).sum().backward()
    except RuntimeError as e:
        autograd = e
    assert im.autograd_need(autograd) == "does not require grad and does not have a grad_fn"
    assert im.autograd_need(ValueError("shape mismatch")) is None
    wrapped = ValueError("backend failed")
    wrapped.__cause__ = autograd
    assert im.autograd_need(wrapped) is not None  # raised from autograd's error
    assert im.autograd_need(ExceptionGroup("g", [autograd, autograd])) is not None
    assert im.autograd_need(ExceptionGroup("g", [autograd, KeyError("k")])) is None
