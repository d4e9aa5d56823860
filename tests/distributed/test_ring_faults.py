"""A rank that dies or hangs mid-ring makes every other rank fail within the timeout, not hang.

Three gloo ranks (an odd ring: neighbours differ on both sides) run a causal zigzag ring with a
5 s timeout. Rank 1 finishes ring step 0 and then either exits (its sockets close: the neighbours
see the failure at once) or hangs (nothing closes: only the per-operation timeout can save them).
"""

from __future__ import annotations

import pytest

from _ring_cases import fault_worker
from _ring_harness import run_ranks

WORLD_SIZE = 3
VICTIM = 1
TIMEOUT_S = 5.0
SLACK_S = 3.0  # scheduling noise on a loaded 2-core machine


@pytest.mark.parametrize("mode", ["exit", "hang"])
def test_peer_failure_raises_within_timeout(mode):
    per_rank = run_ranks(fault_worker, WORLD_SIZE, VICTIM, mode, TIMEOUT_S, timeout=60.0, allow_missing=(VICTIM,))
    survivors = {r: res for r, res in per_rank.items() if r != VICTIM}
    assert sorted(survivors) == [r for r in range(WORLD_SIZE) if r != VICTIM]
    for rank, res in survivors.items():
        assert res["error"] is not None, f"rank {rank} finished the ring although rank {VICTIM} {mode}ed: {res}"
        assert res["elapsed"] < TIMEOUT_S + SLACK_S, f"rank {rank} took {res['elapsed']:.1f} s to fail: {res}"
        assert "peer rank has probably died or hung" in res["message"]
    if mode == "hang":
        # Nobody closed a socket, so at least one neighbour must have been freed by the timeout itself.
        timed_out = [r for r, res in survivors.items() if res["is_timeout"]]
        assert timed_out, f"no rank raised RingTimeoutError: {survivors}"
        for rank in timed_out:
            assert survivors[rank]["elapsed"] >= 0.9 * TIMEOUT_S, survivors[rank]
            assert "within 5 s" in survivors[rank]["message"], survivors[rank]["message"]
