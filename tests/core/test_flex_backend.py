"""The optional ``flex`` backend: where it is registered, what it declines and why, that ``auto`` does
pick it on CPU only where measured faster (its estimate against the committed CPU race,
``benchmarks/results/flex_race.json``, and ``flex_cpu_quick.json``), never for CPU training, that eager
calls load no compiler, the BlockMask it builds from attnkit's tile states, and
(``ATTNKIT_FLEX_COMPILE=1``: one CPU compile of about ten seconds) its compiled output against the
float64 reference. Its CUDA estimate is checked in ``test_cost_device.py``.

Shape legend: B batch, H heads, L queries, S keys, E head dim.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import attnkit
from attnkit import biases as Bi
from attnkit import masks as M
from attnkit import scores as Sc
from attnkit.backends import flex
from attnkit.core import cost, registry
from attnkit.core.call import make_call
from _flex_cases import RESULTS, case_call, rank_backends, speed_rows

flex_mod = pytest.importorskip("torch.nn.attention.flex_attention")
FLEX_RACE = RESULTS / "flex_race.json"


def _registered() -> bool:
    return "flex" in {b.name for b in attnkit.available_backends()}


@pytest.fixture
def enabled():
    """flex registered for the test, the registry as it was afterwards."""
    was = _registered()
    flex.enable()
    yield
    if not was:
        flex.disable()


def _qkv(L=64, requires_grad=False, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(0)
    ts = [torch.randn(2, 4, L, 16, generator=g, dtype=torch.float64).to(dtype) for _ in range(3)]
    return [t.to(device).requires_grad_(requires_grad) for t in ts]


def test_registered_by_default_only_where_a_cuda_device_is():
    assert flex.default_enabled() == torch.cuda.is_available()
    assert _registered() == flex.default_enabled()


def test_enable_and_disable(enabled):
    assert registry.get("flex").priority < min(b.priority for b in attnkit.available_backends() if b.exact and b.name != "flex")
    flex.disable()
    assert not _registered()
    flex.enable()
    assert _registered()


def test_available_here():
    assert flex.available() is None  # torch 2.13 has flex_attention and torch.compile


@pytest.mark.parametrize(
    "kw, requires_grad, words",
    [
        ({}, True, ["no CPU backward", "torch.no_grad()", "blockwise"]),
        ({"return_weights": True}, False, ["weights"]),
        ({"dropout_p": 0.1}, False, ["dropout"]),
        ({"score": Sc.AdditiveScore(16, 8)}, False, ["dot-product"]),
    ],
    ids=["cpu_training", "weights", "dropout", "additive_score"],
)
def test_declines_with_the_reason(kw, requires_grad, words):
    q, k, v = _qkv(requires_grad=requires_grad)
    why = flex.supports(make_call(q, k, v, mask=M.causal(), **kw))
    assert why is not None
    for w in words:
        assert w in why, (w, why)


def test_a_learned_bias_needs_gradients_too():
    q, k, v = _qkv()
    t5 = Bi.T5RelativeBias(4)  # learned table: an nn.Parameter
    assert "no CPU backward" in flex.supports(make_call(q, k, v, bias=t5))
    with torch.no_grad():
        assert flex.supports(make_call(q, k, v, bias=t5)) is None


def test_serves_cpu_inference():
    q, k, v = _qkv(requires_grad=True)
    with torch.no_grad():
        assert flex.supports(make_call(q, k, v, mask=M.causal(), bias=Bi.ALiBi(4))) is None
    q, k, v = _qkv()
    assert flex.supports(make_call(q, k, v, mask=lambda b, h, qi, kv: kv <= qi)) is None


def test_cpu_sinks_are_declined_there_is_no_lse():
    q, k, v = _qkv()
    with torch.no_grad():
        why = flex.supports(make_call(q, k, v, mask=M.causal(), sinks=torch.zeros(4)))
    assert "log-sum-exp" in why and "sinks" in why


def test_unavailable_torch_is_a_reason(monkeypatch):
    monkeypatch.setattr(flex, "available", lambda: "this torch has no torch.nn.attention.flex_attention")
    q, k, v = _qkv()
    assert "flex_attention" in flex.supports(make_call(q, k, v))


def test_a_tensor_on_another_device_is_named():
    """FlexAttention's compiled mask_mod / score_mod cannot copy between devices (a device_put in the
    graph fails to lower): ALiBi slopes or captured ids elsewhere than q are declined, by name."""
    cpu, meta = torch.device("cpu"), torch.device("meta")
    alibi = Bi.ALiBi(4)
    assert flex._tensor_elsewhere(None, alibi, cpu) is None
    assert flex._tensor_elsewhere(None, alibi.to(meta), cpu) == "bias.slopes"
    ids = torch.zeros(8, dtype=torch.long, device=meta)
    custom = M.custom(lambda b, h, qi, kv: ids[qi] == ids[kv])
    assert "captured" in flex._tensor_elsewhere(M.causal() & custom, None, cpu)
    assert flex._tensor_elsewhere(M.document(ids), None, cpu).startswith("mask.")
    assert flex._tensor_elsewhere(M.document(ids), None, meta) is None


def test_forced_on_cpu_training_raises_with_the_reason(enabled):
    q, k, v = _qkv(requires_grad=True)
    with pytest.raises(ValueError) as err:
        attnkit.attention(q, k, v, mask=M.causal(), backend="flex")
    assert "backend='flex' cannot serve" in str(err.value) and "no CPU backward" in str(err.value)


@pytest.mark.parametrize("mask", [M.causal(), M.sliding_window(left=255), None], ids=["causal", "window", "none"])
def test_auto_does_not_pick_it_on_cpu(enabled, mask):
    """Its measured CPU rate is below the others' (flex_race.json): auto passes it over as slower."""
    q, k, v = _qkv(L=1024)
    with torch.no_grad():
        call = make_call(q, k, v, mask=mask)
        res = attnkit.attention(q, k, v, mask=mask)
    assert res.report.backend != "flex"
    assert "slower" in res.report.rejected["flex"]
    est = flex.estimate(call)
    assert est["time_s"] > min(b.estimate(call)["time_s"] for b in attnkit.available_backends() if b.exact and b.name != "flex")


def _shaped(L: int, mask, dtype=torch.float32):
    # expanded zero-stride tensors: a benchmark's shapes without its memory (B=1, H=8, E=64)
    q = torch.zeros((), dtype=dtype).expand(1, 8, L, 64)
    return make_call(q, q, q, mask=mask)


def test_auto_never_picks_it_for_cpu_training(enabled):
    q, k, v = _qkv(L=256, requires_grad=True)
    res = attnkit.attention(q, k, v, mask=M.sliding_window(left=31))
    assert res.report.backend != "flex" and "no CPU backward" in res.report.rejected["flex"]


def test_the_estimate_reads_the_rates_of_the_device():
    call = _shaped(16384, M.sliding_window(255, 0))
    cpu = flex.estimate(call)
    with cost.on_device("cuda"):
        cuda = flex.estimate(call)
    assert cuda["time_s"] < cpu["time_s"] / 50 and cuda["bytes"] == cpu["bytes"]
    assert flex.estimate(call) == cpu  # the CPU table again outside the block
    assert "compiled FlexAttention" in cpu["path"] and f"{flex.AMORTISED_CALLS:,} calls" in cpu["path"]


RACE_MASKS = {"window256_16k_fp32_fwd": lambda n: M.sliding_window(255, 0),
              "document_16k_fp32_fwd": lambda n: M.document(torch.arange(n) // 1024),
              "chunked_16k_fp32_fwd": lambda n: M.chunked(1024), "prefix_lm_16k_fp32_fwd": lambda n: M.prefix_lm(1024)}


def _cpu_race() -> dict[str, dict]:
    by = {}
    for r in json.loads(FLEX_RACE.read_text())["rows"]:
        by.setdefault(r["case"], {})[r["impl"]] = r
    return {c: v for c, v in by.items() if "flex" in v and "blockwise_fused" in v}


def test_the_cpu_race_has_the_cases():
    # the race also times Flex beside causal and bf16 rows (informative; the estimate checks below
    # cover the fp32 mask cases the tile-state and band routes serve)
    assert set(RACE_MASKS) <= set(_cpu_race())


@pytest.mark.parametrize("case", sorted(RACE_MASKS))
def test_cpu_estimate_loses_to_blockwise_as_measured(case, enabled):
    """flex_race.json: compiled FlexAttention was slower than blockwise's fused kernel in every case
    (1.5x to 2.3x); the estimates rank them so, by a ratio within 2x of the measured one, and
    ``auto``'s ranking passes flex over."""
    impls = _cpu_race()[case]
    r = impls["flex"]
    call = _shaped(r["L"], RACE_MASKS[case](r["L"]))
    names = ("sdpa", "blockwise", "reference", "flex")
    estimates = {n: registry.get(n).estimate(call) for n in names}
    best, _ = cost.rank([registry.get(n) for n in names], estimates, None)
    assert best.name == "blockwise"
    measured = r["median_ms"] / impls["blockwise_fused"]["median_ms"]
    predicted = estimates["flex"]["time_s"] / estimates["blockwise"]["time_s"]
    assert measured > 1 and predicted > 1
    assert measured / 2 < predicted < measured * 2, (case, predicted, measured)


FLEX_CPU = "flex_cpu_quick.json"  # benchmarks/flex_cuda.py run on this CPU (--quick: n = 2048 / 1024)


def _cpu_rows() -> dict[str, dict]:
    return speed_rows(FLEX_CPU) if (RESULTS / FLEX_CPU).exists() else {}


def test_the_cpu_run_of_the_flex_cases_exists():
    rows = _cpu_rows()
    assert len(rows) >= 5 and all(r["flex"]["median_ms"] > 0 for r in rows.values())


@pytest.mark.parametrize("case", sorted(_cpu_rows()))
def test_on_cpu_auto_picks_flex_only_where_it_measured_faster(case):
    """Where the CPU estimates pick flex (inference: calls without gradients), it was measured faster
    than what ``auto`` ran without it, in the same run; and so was the run's own choice."""
    r = _cpu_rows()[case]
    best, _, est = rank_backends(case_call(case, r["n"], getattr(torch, r["dtype"])))
    flex_ms, auto_ms = r["flex"]["median_ms"], r["auto"]["median_ms"]
    if best == "flex":
        assert flex_ms < auto_ms, (case, {k: v["time_s"] for k, v in est.items()})
    if r["auto_with_flex_choice"] == "flex":
        assert flex_ms < auto_ms


def test_a_new_shape_past_the_recompile_limit_is_never_picked(monkeypatch):
    """Past torch's recompile limit a new shape would run FlexAttention's unfused eager path."""
    call = _shaped(4096, M.sliding_window(255, 0))
    monkeypatch.setattr(flex, "_COMPILED_KEYS", {("shape", i) for i in range(flex._recompile_limit())})
    est = flex.estimate(call)
    assert est["time_s"] == float("inf") and "recompile limit" in est["path"]
    flex._COMPILED_KEYS.add(flex._compile_key(call))  # a shape it has compiled stays estimated
    assert flex.estimate(call)["time_s"] < float("inf")


def test_eager_calls_with_flex_registered_load_no_compiler():
    """supports and estimate run on every auto call: neither imports FlexAttention or Dynamo."""
    code = """
import sys, torch, attnkit
from attnkit import masks
from attnkit.backends import flex
flex.enable()
q = torch.randn(1, 2, 256, 16, requires_grad=True)
attnkit.attention(q, q, q, mask=masks.causal()).out.sum().backward()
with torch.no_grad():
    res = attnkit.attention(q, q, q, mask=masks.sliding_window(31))
assert "flex" in res.report.rejected, res.report.rejected
print(sorted(m for m in ("torch._dynamo", "sympy", "torch.nn.attention.flex_attention") if m in sys.modules))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize(
    "mask",
    [M.causal(), M.sliding_window(left=40, right=5), M.document(torch.tensor([0] * 100 + [1] * 156)),
     M.custom(lambda b, h, qi, kv: (kv // 64) % 2 == 0)],
    ids=["causal", "window", "document", "custom"],
)
def test_block_mask_from_tile_states_equals_create_block_mask(mask):
    """The BlockMask built from attnkit's tile states is FlexAttention's own for the same predicate."""
    n = 256
    ours = flex.block_mask(mask, n, n, torch.device("cpu"))
    theirs = flex_mod.create_block_mask(mask.predicate(n, n), None, None, n, n, device="cpu", BLOCK_SIZE=flex.BLOCK)
    assert torch.equal(ours.to_dense(), theirs.to_dense())
    for a, b in ((ours.full_kv_num_blocks, theirs.full_kv_num_blocks), (ours.kv_num_blocks, theirs.kv_num_blocks)):
        assert torch.equal(a, b)


def test_block_masks_are_kept_per_mask_object_until_its_tensors_change():
    """A document mask (no cache key) is not rebuilt per call: the same object with unchanged ids
    gives the same BlockMask; ids changed in place give a new, right one; a custom predicate passed
    as a new mask object each call shares the block lists through its cached tile map."""
    n, cpu = 512, torch.device("cpu")
    ids = torch.arange(n) // 100
    doc = M.document(ids)
    first = flex.cached_block_mask(doc, n, n, cpu)
    assert flex.cached_block_mask(doc, n, n, cpu) is first
    ids[:] = torch.arange(n) // 200
    again = flex.cached_block_mask(doc, n, n, cpu)
    assert again is not first
    assert torch.equal(again.to_dense(), flex.block_mask(M.document(ids.clone()), n, n, cpu).to_dense())

    def same_doc(b, h, qi, kv):
        return ids[qi] == ids[kv]

    custom = flex.cached_block_mask(M.custom(same_doc, depends_on=()), n, n, cpu)
    other = flex.cached_block_mask(M.custom(same_doc, depends_on=()), n, n, cpu)
    assert other.kv_indices is custom.kv_indices and other.mask_mod is not custom.mask_mod  # shared lists, its own mask_mod


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_block_mask_gives_flex_attention_the_masked_result():
    """Eager FlexAttention with our BlockMask equals the float64 reference (no compile)."""
    q, k, v = _qkv(L=256, dtype=torch.float64)
    mask = M.sliding_window(left=40, right=5)
    with torch.no_grad():
        out = flex_mod.flex_attention(q, k, v, block_mask=flex.block_mask(mask, 256, 256, torch.device("cpu")))
    ref = attnkit.attention(q, k, v, mask=mask, backend="reference").out
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)


@pytest.mark.skipif(not os.environ.get("ATTNKIT_FLEX_COMPILE"), reason="compiles FlexAttention on CPU (~10 s); set ATTNKIT_FLEX_COMPILE=1")
def test_compiled_cpu_inference_equals_the_reference(enabled):
    """One compile: a custom window predicate with GQA and a softcap score_mod."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 256, 16, generator=g)
    k, v = (torch.randn(1, 2, 256, 16, generator=g) for _ in range(2))
    mask = lambda b, h, qi, kv: (kv <= qi) & (qi - kv < 100)  # noqa: E731
    mod = lambda s, b, h, qi, kv: 5.0 * torch.tanh(s / 5.0)  # noqa: E731
    with torch.no_grad():
        got = attnkit.attention(q, k, v, mask=mask, bias=mod, backend="flex")
        truth = attnkit.attention(q.double(), k.double(), v.double(), mask=mask, bias=mod, backend="reference").out
        ref32 = attnkit.attention(q, k, v, mask=mask, bias=mod, backend="reference").out
    assert got.report.backend == "flex"
    err, own = (got.out.double() - truth).abs().max().item(), (ref32.double() - truth).abs().max().item()
    assert err <= 2.0 * own + 4e-6
