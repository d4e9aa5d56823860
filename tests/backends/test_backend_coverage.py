"""Every registered backend serves exactly the cases ``_backend_coverage.SERVES`` says it does.

The parity and property tests run each backend only on the cases the table says it serves, and
fail (not skip) when ``supports(call)`` declines one of them. This file pins the other direction:
a backend that declines a case the table lists, or starts serving one the table says it declines,
fails here with the case and the backend's reason, and a new backend fails until it has a row.
"""

from __future__ import annotations

import itertools

import pytest

import attnkit
from _backend_coverage import SERVES, served
from _core_cases import BIASES, MASKS, SCORES, SHAPES, make_qkv
from attnkit.core import registry
from attnkit.core.call import make_call

CASES = list(itertools.product(SHAPES, SCORES, MASKS, BIASES, (False, True)))


def _why(backend: str, shape_name: str, score: str, mask: str, bias: str, weights: bool) -> str | None:
    s = SHAPES[shape_name]
    q, k, v = make_qkv(s)
    call = make_call(q, k, v, score=SCORES[score](s), mask=MASKS[mask](s), bias=BIASES[bias](s), return_weights=weights)
    return registry.get(backend).supports(call)


def test_every_registered_backend_has_a_row():
    names = {b.name for b in attnkit.available_backends()}
    assert names - set(SERVES) == set(), "add a row to tests/backends/_backend_coverage.py for each new backend"
    assert set(SERVES) - names == set(), "a backend in the coverage table is no longer registered"


@pytest.mark.parametrize("backend", sorted(SERVES))
def test_supports_agrees_with_the_table(backend):
    wrong = []
    for shape_name, score, mask, bias, weights in CASES:
        why = _why(backend, shape_name, score, mask, bias, weights)
        expected = served(backend, score, mask, bias, weights, square=SHAPES[shape_name][3] == SHAPES[shape_name][4])
        if expected != (why is None):
            wrong.append(f"{shape_name}/{score}/{mask}/{bias}/weights={weights}: "
                         + (f"declines ({why})" if expected else "serves it, the table says it declines"))
        elif why is not None:
            assert isinstance(why, str) and why.strip(), f"{backend} declines without a reason"
    assert not wrong, f"{backend}: {len(wrong)} case(s) disagree with the coverage table, e.g.\n" + "\n".join(wrong[:10])


def test_the_table_is_not_vacuous():
    """What the table pins: the three exact backends run every parity case without weights except
    SDPA's two declines, and only reference and blockwise give weights."""
    cases = [(sc, m, b) for sc, m, b in itertools.product(SCORES, MASKS, BIASES)]
    assert all(served("reference", *c) and served("blockwise", *c, weights=True) for c in cases)
    sdpa_declines = {c for c in cases if not served("sdpa", *c)}
    assert {(sc, b) for sc, _, b in sdpa_declines} == {("additive", b) for b in BIASES} | {(sc, "softcap") for sc in SCORES}
    assert [n for n in SERVES if SERVES[n].weights] == ["reference", "blockwise"]
