"""Hunting the whole class of stale-cache bugs, not only known cases: random call sequences, cached against uncached.

A hypothesis state machine holds the state masks read (document ids, padding lengths, a dense bool
tensor shared with NumPy, a closure's int and tensor, a module global, a list, a bound object's
attribute, a window inside a combined mask, a bias's parameter) and, between calls, edits it in
place, through ``.data`` and through NumPy, rebinds it to new tensors (the old ones freed, their
addresses free for reuse), rebuilds mask objects and predicates, and switches between grad,
no-grad and inference mode. Every call runs on every backend with the caches on and again with
them off (:func:`attnkit.core.cache_keys.caches_disabled`): the two must agree, and both must agree
with the reference backend. In grad mode the gradients are compared too.

``TRUST_EXAMPLES`` / ``TRUST_STEPS`` in the environment scale the run (CI: 8 sequences of up to
12 steps); the counts a run made are checked to be non-trivial.

Shape legend: q, k, v (B, H, N, E); doc (N,); lens (B,); dense (1, 1, N, N).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import attnkit
from attnkit import masks as M

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule  # noqa: E402

from attnkit.core.cache_keys import caches_disabled  # noqa: E402

B, H, N, E = 2, 2, 288, 8
BACKENDS = ("auto", "sdpa", "blockwise", "reference")
MODES = ("grad", "no_grad", "inference")
TOL = dict(atol=3e-5, rtol=1e-4)
COUNTS = {"sequences": 0, "steps": 0, "calls": 0, "edits": 0}
_G_WIDTH = 16  # a module global a predicate reads


def _docs(cut: int) -> torch.Tensor:
    return torch.tensor([0] * cut + [1] * (N - cut))


def _global_window(b, h, q, kv):
    return (kv <= q) & (q - kv < _G_WIDTH)


class Holder:
    """A bound method's object: its ``ids`` attribute is rebound between calls."""

    def __init__(self, ids: torch.Tensor):
        self.ids = ids

    def same(self, b, h, q, kv):
        return self.ids[q] == self.ids[kv]


class CacheTrust(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        global _G_WIDTH
        _G_WIDTH = 16
        COUNTS["sequences"] += 1
        self.doc = _docs(100)
        self.arr = np.ones((1, 1, N, N), dtype=np.bool_)
        self.dense = torch.from_numpy(self.arr)  # shares arr's memory
        self.lens = torch.tensor([N, 150])
        self.width = 24
        self.box = [_docs(60)]
        self.holder = Holder(_docs(200))
        self.method = self.holder.same
        self.window = M.sliding_window(64, 0)
        self.scale_p = torch.nn.Parameter(torch.tensor(0.5))
        self._build()

    def _build(self):
        """Mask objects and predicates made from the current state (rebuilt by :meth:`rebuild`)."""
        width, box = None, self.box
        me = self

        def closure_window(b, h, q, kv):
            return (kv <= q) & (q - kv < me.width)

        def closure_list(b, h, q, kv):
            return box[0][q] == box[0][kv]

        del width
        self.masks = {
            "document": M.document(self.doc),
            "padding": M.padding_mask(self.lens, N),
            "dense": self.dense,
            "closure int": closure_window,
            "closure list": closure_list,
            "global": _global_window,
            "bound method": self.method,
            "padding & window": M.padding_mask(self.lens, N) & self.window,
            "prefix-LM": M.prefix_lm(self.lens // 3),
            "none": None,
        }

    # edits between calls (one rule, so a sequence is about half calls) ----------------------------
    @rule(what=st.sampled_from(["doc in place", "doc .data", "doc rebind", "dense numpy", "lengths in place",
                                "lengths rebind", "closure int", "global", "list item", "bound attribute",
                                "window part", "parameter", "rebuild"]),
          i=st.integers(0, N - 1), j=st.integers(0, 8), flag=st.booleans())
    def edit(self, what, i, j, flag):
        global _G_WIDTH
        COUNTS["edits"] += 1
        if what == "doc in place":
            self.doc[i:] = j % 3
        elif what == "doc .data":
            self.doc.data[i:] = j % 3  # no version bump
        elif what == "doc rebind":  # a new tensor; the old mask object and its tensor freed
            self.doc = _docs(i)
            self.masks["document"] = M.document(self.doc)
        elif what == "dense numpy":
            self.arr[0, 0, i:, : 32 * j + 1] = flag
            self.arr[..., 0] = True  # every row keeps a key
        elif what == "lengths in place":
            self.lens[1] = i + 1
        elif what == "lengths rebind":
            self.lens = torch.tensor([N, i + 1])
            self._build()
        elif what == "closure int":
            self.width = i + 1
        elif what == "global":
            _G_WIDTH = i + 1
        elif what == "list item":
            self.box[0] = _docs(i)
        elif what == "bound attribute":
            self.holder.ids = _docs(i)
        elif what == "window part":
            self.window.left, self.window.right = i, j
        elif what == "parameter":
            self.scale_p.data.fill_(j / 4 - 1)
        else:  # fresh mask objects and predicates over the same state (the old ones freed)
            self._build()

    # calls --------------------------------------------------------------------------------------
    @rule(name=st.sampled_from(["document", "padding", "dense", "closure int", "closure list", "global",
                                "bound method", "padding & window", "prefix-LM", "none"]),
          mode=st.sampled_from(MODES), seed=st.integers(0, 3), with_bias=st.booleans())
    def call(self, name, mode, seed, with_bias):
        COUNTS["steps"] += 1
        mask = self.masks[name]
        if isinstance(mask, torch.Tensor) and not bool(self.dense.any(-1).all()):
            return
        bias = None
        if with_bias:
            p = self.scale_p

            def bias(b, h, q, kv):  # a parameter reached through a closure
                return p * (kv - q).float() / N

        g = torch.Generator().manual_seed(seed)
        qkv = [torch.randn(B, H, N, E, generator=g) for _ in range(3)]
        want = _run(qkv, mask, bias, "reference", mode, cached=False)
        for backend in BACKENDS:
            got = _run(qkv, mask, bias, backend, mode, cached=True)
            fresh = _run(qkv, mask, bias, backend, mode, cached=False)
            for a, b_, c in zip(got, fresh, want):
                torch.testing.assert_close(a, b_, **TOL, msg=f"{backend} {mode} {name}: cached != uncached")
                torch.testing.assert_close(a, c, **TOL, msg=f"{backend} {mode} {name}: != reference")

    @invariant()
    def dense_rows_keep_a_key(self):
        assert bool(self.dense[..., 0].all())


def _run(qkv, mask, bias, backend, mode, cached):
    """(out[, dq, dk, dv]) of one call in ``mode``, with the caches on or off."""
    COUNTS["calls"] += 1
    if mode == "inference":
        ctx = torch.inference_mode()
    elif mode == "no_grad":
        ctx = torch.no_grad()
    else:
        ctx = torch.enable_grad()
    with ctx, (caches_disabled() if not cached else _nothing()):
        q, k, v = [t.clone().requires_grad_(mode == "grad") for t in qkv]
        out = attnkit.attention(q, k, v, mask=mask, bias=bias, backend=backend).out
        if mode != "grad":
            return [out.detach().clone()]
        out.square().sum().backward()
        return [out.detach(), q.grad, k.grad, v.grad]


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


CacheTrust.TestCase.settings = settings(
    max_examples=int(os.environ.get("TRUST_EXAMPLES", 8)),
    stateful_step_count=int(os.environ.get("TRUST_STEPS", 12)),
)
TestCacheTrust = pytest.mark.usefixtures("one_thread")(CacheTrust.TestCase)


def test_the_machine_ran_a_real_sequence():
    """Runs after the machine (file order): the counts show it exercised calls and edits."""
    if COUNTS["sequences"] == 0:
        pytest.skip("the state machine did not run in this session (deselected)")
    assert COUNTS["calls"] >= 9 * COUNTS["steps"] > 0 and COUNTS["edits"] > 0


def _random_mask(rng, n: int, doc: torch.Tensor, lens: torch.Tensor):
    """One of the mask kinds over shared state, for an (n, n) call."""
    kind = rng.choice(["causal", "window", "document", "padding", "dense", "custom", "combined", "prefix", "chunked"])
    if kind == "causal":
        return M.causal()
    if kind == "window":
        return M.sliding_window(rng.randint(0, n), rng.randint(0, 4))
    if kind == "document":
        return M.document(doc[:n])
    if kind == "padding":
        return M.padding_mask(lens.clamp(max=n), n)
    if kind == "dense":
        t = torch.rand(1, 1, n, n, generator=torch.Generator().manual_seed(rng.randint(0, 9))) > 0.5
        t[..., 0] = True
        return t
    if kind == "custom":
        d = doc[:n]
        return lambda b, h, q, kv: d[q] == d[kv]
    if kind == "combined":
        return M.padding_mask(lens.clamp(max=n), n) & M.sliding_window(rng.randint(1, n), 0)
    if kind == "prefix":
        return M.prefix_lm(rng.randint(0, n))
    return M.chunked(rng.randint(1, n))


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("seed", range(int(os.environ.get("TRUST_SEQUENCES", 2))))
def test_random_call_sequences_cached_equal_uncached(seed):
    """A seeded sequence of calls of varied shapes, masks, backends and modes, with the shared
    document ids and lengths edited in place, through ``.data`` or rebound between calls: every
    call with the caches on equals the same call with them off."""
    import random

    rng = random.Random(seed)
    doc, lens = torch.zeros(320, dtype=torch.long), torch.tensor([320, 100])
    for step in range(int(os.environ.get("TRUST_SEQUENCE_LENGTH", 30))):
        n = rng.choice([1, 7, 64, 130, 320])
        edit = rng.choice(["none", "in place", ".data", "rebind"])
        if edit == "in place":
            doc[rng.randint(0, 319):] += 1
        elif edit == ".data":
            lens.data[1] = rng.randint(1, 320)
        elif edit == "rebind":
            doc = torch.tensor(sorted(rng.randint(0, 3) for _ in range(320)))
        mask = _random_mask(rng, n, doc, lens)
        mode, backend = rng.choice(MODES), rng.choice(BACKENDS)
        g = torch.Generator().manual_seed(step)
        qkv = [torch.randn(2, 2, n, 8, generator=g) for _ in range(3)]
        got = _run(qkv, mask, None, backend, mode, cached=True)
        want = _run(qkv, mask, None, backend, mode, cached=False)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, **TOL, msg=f"step {step}: {backend} {mode} n={n} {mask!r}")
