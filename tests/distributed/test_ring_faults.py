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


def test_a_send_to_a_dead_peer_raises_ring_comm_error_while_posting(monkeypatch):
    """gloo raises while *posting* a send to a peer whose socket has closed (before any wait): that
    too must be a RingCommError naming the peer, not the backend's bare RuntimeError."""
    import torch
    import torch.distributed as dist

    from attnkit.distributed import comm

    def closed(ops):
        raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:16557")

    monkeypatch.setattr(dist, "batch_isend_irecv", closed)
    ring = object.__new__(comm.RingComm)  # no process group needed to post
    ring.group, ring.timeout, ring.rank, ring.world_size, ring.next, ring.prev = None, None, 0, 3, 1, 2
    monkeypatch.setattr(dist, "P2POp", lambda *a, **kw: None)
    with pytest.raises(comm.RingCommError, match="peer rank has probably died or hung") as info:
        ring.exchange([torch.zeros(2)], tag=0, what="forward step 1")
    assert "forward step 1" in str(info.value) and "Connection closed by peer" in str(info.value)
    assert not isinstance(info.value, comm.RingTimeoutError)
