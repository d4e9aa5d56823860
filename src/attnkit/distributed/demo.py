"""Ring attention demo: shard a sequence over every rank, attend, gather, check against one process.

Run (CPU, gloo):   torchrun --nproc-per-node 4 -m attnkit.distributed.demo --causal
                   (or examples/ring_attention_demo.py, the same program)
Run (GPUs, nccl):  the same command on a machine with >= 4 GPUs; each rank takes cuda:LOCAL_RANK.
``--json PATH`` makes rank 0 also write its numbers there (``attnkit report`` uses it).

Every rank builds the same full q, k, v from one seed (in a real model each rank would only ever
hold its shard), keeps its shard, runs ``ring_attention`` forward and backward, and gathers the
result. Rank 0 compares with PyTorch's scaled_dot_product_attention on the full sequence.
The default length 1000 is not a multiple of 2 * world_size, to show the padding path.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from attnkit.distributed import gather_sequence, ring_attention, shard_sequence
from attnkit.core.masks import causal


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq-len", type=int, default=1000)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2, help="GQA: heads must be a multiple of this")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--layout", choices=["contiguous", "zigzag"], default="zigzag")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds any ring step may wait for a peer")
    ap.add_argument("--json", default=None, help="rank 0 writes its results to this file")
    args = ap.parse_args(argv)

    # torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    g = torch.Generator().manual_seed(0)  # the same full sequence on every rank
    L, B = args.seq_len, 1
    q = torch.randn(B, args.heads, L, args.dim, generator=g).to(device)
    k = torch.randn(B, args.kv_heads, L, args.dim, generator=g).to(device)
    v = torch.randn(B, args.kv_heads, L, args.dim, generator=g).to(device)

    # Shard (pads at the end when L does not divide), attend, backward.
    q_l, k_l, v_l = (shard_sequence(t, dim=2, layout=args.layout).requires_grad_() for t in (q, k, v))
    t0 = time.perf_counter()
    mask = causal() if args.causal else None
    out_l = ring_attention(q_l, k_l, v_l, mask=mask, layout=args.layout, seq_len=L, timeout=args.timeout).out
    out_l.sum().backward()
    seconds = time.perf_counter() - t0

    out = gather_sequence(out_l.detach(), dim=2, layout=args.layout, seq_len=L)
    dq = gather_sequence(q_l.grad, dim=2, layout=args.layout, seq_len=L)
    if rank == 0:
        q_ref = q.clone().requires_grad_()
        ref = F.scaled_dot_product_attention(q_ref, k, v, is_causal=args.causal, enable_gqa=True)
        ref.sum().backward()
        print(f"world_size={world_size} backend={dist.get_backend()} L={L} (shard {q_l.shape[2]} per rank, "
              f"layout={args.layout}, causal={args.causal})")
        res = {
            "world_size": world_size, "backend": dist.get_backend(), "seq_len": L, "shard_len": q_l.shape[2],
            "layout": args.layout, "causal": args.causal, "heads": args.heads, "kv_heads": args.kv_heads,
            "max_abs_out_diff": (out - ref).abs().max().item(), "max_abs_dq_diff": (dq - q_ref.grad).abs().max().item(),
            "rank0_seconds_fwd_bwd": seconds,
        }
        print(f"max |out - sdpa|   = {res['max_abs_out_diff']:.2e}")
        print(f"max |dq - sdpa dq| = {res['max_abs_dq_diff']:.2e}")
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(res, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
