"""Ring attention demo — the program lives in :mod:`attnkit.distributed.demo`.

    torchrun --nproc-per-node 4 examples/ring_attention_demo.py --causal --layout zigzag
"""

from attnkit.distributed.demo import main

if __name__ == "__main__":
    main()
