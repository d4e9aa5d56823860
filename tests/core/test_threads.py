"""Threads: a capture records only the calls of the context that opened it, and
``attnkit.options(...)`` is context-local while ``set_memory_budget`` stays the process default.

Four threads run at the same time (a barrier makes their ``with`` blocks overlap): each captures its
own calls and sets its own options, then checks its own counts and backend choices.
"""

from __future__ import annotations

import threading

import pytest
import torch

import attnkit
from attnkit.core import options as opts

N_THREADS = 4


def _run_threads(fn):
    barrier = threading.Barrier(N_THREADS, timeout=60)
    errors: list[BaseException] = []

    def target(i):
        try:
            fn(i, barrier)
        except BaseException as e:  # noqa: BLE001 - reported to the main thread below
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=target, args=(i,)) for i in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]


def test_capture_records_only_its_own_threads_calls():
    q = k = v = torch.randn(1, 2, 8, 4)
    counts: dict[int, int] = {}

    def work(i, barrier):
        n = 3 + 2 * i  # 3, 5, 7, 9 calls: different per thread, so a shared capture cannot pass
        with attnkit.inspect.capture(record="reports") as rec:
            barrier.wait()  # every capture is open before any thread calls
            for _ in range(n):
                attnkit.attention(q, k, v)
            barrier.wait()  # and stays open until every thread has called
        counts[i] = len(rec)

    _run_threads(work)
    assert counts == {i: 3 + 2 * i for i in range(N_THREADS)}


def test_capture_of_a_model_in_one_thread_ignores_the_same_model_in_another():
    mha = attnkit.MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 5, 8)
    counts: dict[int, int] = {}

    def work(i, barrier):
        if i % 2 == 0:
            with attnkit.inspect.capture(mha) as rec:
                barrier.wait()
                for _ in range(2 + i):
                    mha(x)
                barrier.wait()
            counts[i] = len(rec)
            assert all(r.layer == 0 for r in rec)
        else:
            barrier.wait()
            for _ in range(4):
                mha(x)  # runs the captured model's hooks in an uncapturing thread
            barrier.wait()

    _run_threads(work)
    assert counts == {0: 2, 2: 4}


def test_options_are_context_local_and_setters_are_process_defaults():
    from attnkit.core.call import make_call
    from attnkit.core.dispatch import choose

    # at this size the budget changes auto's choice (blockwise when free, the smallest estimate under
    # a 1-byte budget), so the backend each thread gets shows which budget it saw
    q = k = v = torch.randn(1, 2, 512, 16)
    bias = attnkit.biases.ALiBi(2)

    def settings(i):
        return {"memory_budget": 1 if i % 2 else None, "block_q": 256 + 64 * i, "block_kv": 512}

    expected = {}
    for i in range(N_THREADS):  # what each thread must see, computed one at a time in this thread
        with attnkit.options(**settings(i)):
            expected[i] = choose(make_call(q, k, v, bias=bias), "auto")[0].name
    assert len(set(expected.values())) == 2  # the budget changes the choice, so a leak would show
    seen: dict[int, set] = {}

    def work(i, barrier):
        with attnkit.options(**settings(i)):
            barrier.wait()
            for _ in range(3):
                o = opts.current()
                backend = choose(make_call(q, k, v, bias=bias), "auto")[0].name
                seen.setdefault(i, set()).add((o.memory_budget, o.block_q, o.block_kv, attnkit.get_memory_budget(), backend))
            barrier.wait()

    _run_threads(work)
    for i in range(N_THREADS):
        st = settings(i)
        assert seen[i] == {(st["memory_budget"], st["block_q"], st["block_kv"], st["memory_budget"], expected[i])}
    assert opts.current() == opts.Options()  # nothing leaked into this thread


def test_set_memory_budget_is_a_default_every_thread_sees_and_options_override():
    got = {}
    try:
        attnkit.set_memory_budget(12345)

        def other():
            got["default"] = attnkit.get_memory_budget()
            with attnkit.options(memory_budget=99):
                got["local"] = attnkit.get_memory_budget()
                with attnkit.options(block_q=32):  # nesting keeps the outer fields
                    got["nested"] = (attnkit.get_memory_budget(), opts.current().block_q)
            got["after"] = attnkit.get_memory_budget()

        t = threading.Thread(target=other)
        t.start()
        t.join(60)
    finally:
        attnkit.set_memory_budget(None)
    assert got == {"default": 12345, "local": 99, "nested": (99, 32), "after": 12345}
    assert attnkit.get_memory_budget() is None


@pytest.mark.parametrize("kw", [{"memory_budget": 0}, {"block_q": -1}, {"block_kv": 1.5}, {"block_q": True}, {"tile": 3}])
def test_options_validate_their_arguments(kw):
    name = next(iter(kw))
    with pytest.raises(ValueError, match=name):
        with attnkit.options(**kw):
            pass
    with pytest.raises(ValueError, match=name):
        opts.set_defaults(**kw)


def test_tile_sizes_are_context_local_and_set_tile_sizes_is_the_default():
    from attnkit.backends.tiling import default_tiles

    def tiles():
        return default_tiles(None, 4096, 4096, torch.float32, torch.device("cpu"))

    seen: dict[int, set] = {}

    def work(i, barrier):
        with attnkit.options(block_q=32 * (i + 1), block_kv=16 * (i + 1)):
            barrier.wait()
            for _ in range(3):
                seen.setdefault(i, set()).add(tiles())
            barrier.wait()

    try:
        attnkit.set_tile_sizes(block_q=64, block_kv=64)
        _run_threads(work)
        assert tiles() == (64, 64)  # the process default, outside any options context
    finally:
        attnkit.set_tile_sizes(None, None)
    assert seen == {i: {(32 * (i + 1), 16 * (i + 1))} for i in range(N_THREADS)}
