"""The benchmark suites: which (n, dtype, mask, bias, backend) configurations each suite measures,
and which configurations are skipped (with the reason recorded) because their dense tensors cannot fit.

Shape: B = 1, H = 8, E = Ev = 64, L = S = n.
"""

from __future__ import annotations

B, H, E = 1, 8, 64
WINDOW = 256
MASKS = ("none", "causal", "sliding256", "document")
BIASES = ("none", "alibi", "t5")
BACKENDS = ("reference", "sdpa", "blockwise", "auto", "linear")


def _skip_reason(spec: dict) -> str | None:
    n, be, bias, mask = spec["n"], spec["backend"], spec["bias"], spec["mask"]
    es = 2 if spec["dtype"] == "bfloat16" else 4
    if be == "reference" and B * H * n * n * 4 * 4 > 6 * 2**30:
        return "reference would hold ~4 dense (B, H, L, S) fp32 tensors (> 6 GiB)"
    if be == "sdpa" and bias != "none" and 2 * B * H * n * n * es > 12 * 2**30:
        return "the dense (1, H, L, S) bias and its masked copy exceed 12 GiB"
    if be == "linear" and (bias != "none" or mask not in ("none", "causal")):
        return "linear attention serves only no mask or causal, without bias"
    return None


def suite_specs(suite: str) -> list[dict]:
    def spec(n, dtype, mask, bias, backend, mode="fwd", runs=5, tag=""):
        return dict(n=n, dtype=dtype, mask=mask, bias=bias, backend=backend, mode=mode, runs=runs, tag=tag)

    out = []
    if suite == "quick":
        for mask, bias in (("none", "none"), ("causal", "none"), ("sliding256", "none"), ("none", "alibi")):
            for be in ("sdpa", "blockwise", "auto"):
                out.append(spec(2048, "float32", mask, bias, be, runs=3, tag="quick"))
        out.append(spec(2048, "float32", "causal", "none", "linear", runs=3, tag="quick"))
        return out
    if suite == "must":
        for be in ("sdpa", "blockwise", "auto"):
            out.append(spec(16384, "float32", "sliding256", "none", be, tag="window16k"))
            for bias in ("alibi", "t5"):
                out.append(spec(8192, "float32", "none", bias, be, tag="bias8k"))
            out.append(spec(4096, "bfloat16", "none", "none", be, tag="bf16dense4k"))
        for n in (1024, 4096, 16384):
            for dtype in ("float32", "bfloat16"):
                for mask in ("none", "causal"):
                    # interleaved with the SDPA baseline in one process (11 runs each at n <= 4k)
                    s_ = spec(n, dtype, mask, "none", "auto", runs=11 if n <= 4096 else 5, tag="auto_vs_sdpa")
                    s_["pair"] = "sdpa"
                    out.append(s_)
        for n in (2048, 4096, 8192):
            for be in ("blockwise", "sdpa"):
                out.append(spec(n, "float32", "sliding256", "none", be, mode="fwdbwd", runs=3, tag="train_window"))
        for n in (256, 512, 1024, 2048, 4096, 8192, 16384):
            for be in ("linear", "sdpa"):
                out.append(spec(n, "float32", "causal", "none", be, tag="linear_crossover"))
        return out
    if suite == "full":
        for n in (1024, 4096, 16384):
            for dtype in ("float32", "bfloat16"):
                for mask in MASKS:
                    for bias in BIASES:
                        for be in BACKENDS:
                            out.append(spec(n, dtype, mask, bias, be, tag="full"))
        return out
    raise ValueError(f"suite must be one of ['full', 'must', 'quick'], got {suite!r}")
