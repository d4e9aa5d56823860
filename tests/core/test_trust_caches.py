"""No cache or mode may change an answer: the ways caches went wrong, as regression tests.

Each test repeats a pattern users write every day (evaluation under ``torch.inference_mode()``, a
predicate whose captured variable, global or bound object changes between calls, a part of a
combined mask edited, mask data written through ``.data`` or NumPy, a mask edited between forward
and backward) and compares every backend with a fresh ``reference`` computation of the same call
(the reference backend keeps no cache). What they guard against: caches keyed by ``id()`` and
``_version`` served stale outputs (errors up to 2), crashed on inference tensors ("Inference tensors
do not track version counter"), handed inference tensors to training ("cannot be saved for
backward"), and a backward re-read an edited mask (a gradient matching neither mask).

Shape legend: q, k, v (B, H, n, E).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnkit
from attnkit import masks as M

pytestmark = pytest.mark.usefixtures("one_thread")

B, H, N, E = 2, 2, 320, 16
BACKENDS = ("auto", "sdpa", "blockwise", "reference")
CACHED_BACKENDS = ("auto", "blockwise", "sdpa")
TOL = dict(atol=2e-5, rtol=1e-4)
_WINDOW = 8  # read by _global_window_predicate: rebound per "batch", as FlexAttention's document_id idiom does


def _qkv(seed: int = 0, n: int = N, grad: bool = False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, E, generator=g).requires_grad_(grad) for _ in range(3)]


def _fresh(q, k, v, mask):
    """The answer a fresh computation gives: the reference backend, which caches nothing."""
    with torch.inference_mode(False), torch.no_grad():
        return attnkit.attention(q.detach().clone(), k.detach().clone(), v.detach().clone(), mask=mask, backend="reference").out


def _mask_kinds(n: int = N) -> dict:
    doc = torch.tensor([0] * (n // 3) + [1] * (n - n // 3))
    lens = torch.tensor([n, n // 2])
    dense = torch.rand(B, 1, n, n, generator=torch.Generator().manual_seed(1)) > 0.3
    dense[..., 0] = True
    return {
        "padding": M.padding_mask(lens, n),
        "document": M.document(doc),
        "bool tensor": dense,
        "prefix-LM": M.prefix_lm(torch.tensor([5, 40])),
        "custom": M.custom(lambda b, h, q, kv: doc[q] == doc[kv], depends_on=()),
        "padding & window": M.padding_mask(lens, n) & M.sliding_window(32, 0),
    }


# inference mode -----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", list(_mask_kinds()))
def test_inference_mode_works_with_every_mask_kind(kind, backend):
    q, k, v = _qkv()
    want = _fresh(q, k, v, _mask_kinds()[kind])
    with torch.inference_mode():
        mask = _mask_kinds()[kind]  # its tensors are inference tensors: no version counter
        for _ in range(2):  # the second call may come from a cache
            out = attnkit.attention(q, k, v, mask=mask, backend=backend).out
            torch.testing.assert_close(out, want, **TOL)


@pytest.mark.parametrize("backend", CACHED_BACKENDS)
def test_masks_built_in_inference_mode_work(backend):
    q, k, v = _qkv()
    with torch.inference_mode():
        lens = torch.tensor([N, N // 2])  # an inference tensor: no version counter
        mask = M.padding_mask(lens, N)
        out = attnkit.attention(q, k, v, mask=mask, backend=backend).out
        out2 = attnkit.attention(q, k, v, mask=mask, backend=backend).out
    want = _fresh(q, k, v, M.padding_mask([N, N // 2], N))
    torch.testing.assert_close(out, want, **TOL)
    torch.testing.assert_close(out2, want, **TOL)


@pytest.mark.parametrize("backend", CACHED_BACKENDS)
@pytest.mark.parametrize("kind", ["padding", "document", "bool tensor", "custom"])
def test_an_evaluation_in_inference_mode_does_not_poison_later_training(kind, backend):
    mask = _mask_kinds()[kind]
    q, k, v = _qkv(grad=True)
    with torch.inference_mode():
        attnkit.attention(q, k, v, mask=mask, backend=backend)
    out = attnkit.attention(q, k, v, mask=mask, backend=backend).out
    out.square().sum().backward()  # must not meet a cached inference tensor ("cannot be saved for backward")
    ref = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    attnkit.attention(*ref, mask=mask, backend="reference").out.square().sum().backward()
    for got, want in zip((q, k, v), ref):
        torch.testing.assert_close(got.grad, want.grad, atol=1e-4, rtol=1e-4)


def test_multihead_attention_in_inference_mode_on_a_padded_batch():
    torch.manual_seed(0)
    mha = attnkit.MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 40, 32)
    valid = torch.ones(2, 40, dtype=torch.bool)
    valid[1, 25:] = False
    with torch.no_grad():
        want, _ = mha(x, key_padding_mask=valid)
    for _ in range(2):
        with torch.inference_mode():
            got, _ = mha(x, key_padding_mask=valid)
        torch.testing.assert_close(got, want, **TOL)


def test_hugging_face_bert_in_inference_mode_on_a_padded_batch():
    transformers = pytest.importorskip("transformers")
    from attnkit.integrations import hf as akhf

    akhf.register()
    cfg = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    eager = transformers.BertModel(cfg, add_pooling_layer=False).eval()
    eager.set_attn_implementation("eager")
    ours = transformers.BertModel(cfg, add_pooling_layer=False).eval()
    ours.load_state_dict(eager.state_dict())
    ours.set_attn_implementation("attnkit")
    ids = torch.randint(1, 50, (2, 24), generator=torch.Generator().manual_seed(0))
    att = torch.ones(2, 24, dtype=torch.long)
    att[1, 15:] = 0
    with torch.no_grad():
        want = eager(input_ids=ids, attention_mask=att).last_hidden_state
    for _ in range(2):
        with torch.inference_mode():
            got = ours(input_ids=ids, attention_mask=att).last_hidden_state
        torch.testing.assert_close(got[0], want[0], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(got[1, :15], want[1, :15], atol=1e-4, rtol=1e-4)


# state a predicate reads, changed between calls -----------------------------------------------------
def _check_steps(backend, mask_for_step, steps: int = 6):
    """Each step changes what the mask reads; every backend must agree with a fresh computation."""
    q, k, v = _qkv()
    for step in range(steps):
        mask = mask_for_step(step)
        out = attnkit.attention(q, k, v, mask=mask, backend=backend).out
        torch.testing.assert_close(out, _fresh(q, k, v, mask), **TOL, msg=f"step {step}")


def _docs(step: int, n: int = N) -> torch.Tensor:
    cut = [n // 4, n // 2, 3 * n // 4][step % 3]
    return torch.tensor([0] * cut + [1] * (n - cut))


@pytest.mark.parametrize("backend", CACHED_BACKENDS)
def test_a_closure_variable_rebound_to_a_new_tensor_each_step(backend):
    doc_ids = _docs(0)

    def same_doc(b, h, q, kv):
        return doc_ids[q] == doc_ids[kv]

    def step(i):
        nonlocal doc_ids
        doc_ids = _docs(i)  # the old tensor is freed: its address may come back with version 0
        return same_doc

    _check_steps(backend, step, steps=12)


@pytest.mark.parametrize("backend", CACHED_BACKENDS)
def test_a_captured_int_changed_between_calls(backend):
    width = 8

    def window(b, h, q, kv):
        return (kv <= q) & (q - kv < width)

    def step(i):
        nonlocal width
        width = (8, 200, 40)[i % 3]
        return window

    _check_steps(backend, step)


def _global_window_predicate(b, h, q, kv):
    return (kv <= q) & (q - kv < _WINDOW)


@pytest.mark.parametrize("backend", CACHED_BACKENDS)
def test_a_module_global_rebound_per_batch(backend):
    global _WINDOW

    def step(i):
        global _WINDOW
        _WINDOW = (8, 200, 40)[i % 3]
        return _global_window_predicate

    try:
        _check_steps(backend, step)
    finally:
        _WINDOW = 8


@pytest.mark.parametrize("backend", CACHED_BACKENDS)
def test_a_tensor_in_a_closure_list_replaced(backend):
    box = [_docs(0)]

    def same_doc(b, h, q, kv):
        return box[0][q] == box[0][kv]

    def step(i):
        box[0] = _docs(i)
        return same_doc

    _check_steps(backend, step)


@pytest.mark.parametrize("backend", CACHED_BACKENDS)
def test_a_bound_methods_attribute_changed(backend):
    class Docs:
        def __init__(self):
            self.ids = _docs(0)

        def same(self, b, h, q, kv):
            return self.ids[q] == self.ids[kv]

    docs = Docs()
    pred = docs.same  # one bound method object, used every step

    def step(i):
        docs.ids = _docs(i)
        return pred

    _check_steps(backend, step)


@pytest.mark.parametrize("backend", CACHED_BACKENDS)
def test_a_part_of_a_combined_mask_edited(backend):
    window = M.sliding_window(200, 0)
    mask = M.padding_mask([N, N // 2], N) & window

    def step(i):
        window.left, window.right = ((200, 0), (8, 3), (40, 40))[i % 3]
        return mask

    _check_steps(backend, step)


@pytest.mark.parametrize("backend", CACHED_BACKENDS)
def test_writes_through_data_are_seen(backend):
    dense = torch.ones(1, 1, N, N, dtype=torch.bool).tril()
    doc = _docs(0)
    doc_mask = M.document(doc)

    def step(i):
        dense.data.copy_(torch.ones(N, N, dtype=torch.bool).tril(-(i % 3) * 50))
        doc.data.copy_(_docs(i))  # .data: no version bump
        return (dense, doc_mask)[i % 2]

    _check_steps(backend, step)


@pytest.mark.parametrize("backend", CACHED_BACKENDS)
def test_writes_through_a_shared_numpy_array_are_seen(backend):
    arr = np.zeros(N, dtype=np.int64)
    mask = M.document(torch.from_numpy(arr))  # shares arr's memory

    def step(i):
        arr[:] = _docs(i).numpy()
        return mask

    _check_steps(backend, step)


# forward and backward ------------------------------------------------------------------------------
@pytest.mark.parametrize("edit", ["in place", ".data"])
@pytest.mark.parametrize("kind", ["document", "custom"])
def test_a_mask_edited_between_forward_and_backward_raises_like_torch(kind, edit):
    doc = _docs(0)
    mask = M.document(doc) if kind == "document" else M.custom(lambda b, h, q, kv: doc[q] == doc[kv], depends_on=())
    q, k, v = _qkv(grad=True)
    out = attnkit.attention(q, k, v, mask=mask, backend="blockwise").out
    (doc if edit == "in place" else doc.data).copy_(_docs(1))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


# the switch ------------------------------------------------------------------------------------------
def test_caches_disabled_computes_every_call_afresh():
    from attnkit.core import cache_keys, call_cache, tile_map

    q, k, v = _qkv()
    mask = M.custom(lambda b, h, q_, kv: kv <= q_, depends_on=())
    call_cache.clear()
    tile_map.clear_cache()
    with cache_keys.caches_disabled():
        assert not cache_keys.enabled()
        for _ in range(3):
            attnkit.attention(q, k, v, mask=M.padding_mask([N, 9], N))
            attnkit.attention(q, k, v, mask=mask, backend="blockwise")
    assert cache_keys.enabled()
    assert call_cache.info()["hits"] == 0 and tile_map.cache_info()["hits"] == tile_map.cache_info()["size"] == 0


def test_the_environment_variable_turns_the_caches_off():
    import os
    import subprocess
    import sys

    code = ("import torch, attnkit; from attnkit.core import cache_keys, call_cache; q = torch.randn(1, 1, 8, 4); "
            "[attnkit.attention(q, q, q) for _ in range(3)]; print(cache_keys.enabled(), call_cache.info()['hits'])")
    env = {**os.environ, "ATTNKIT_NO_CACHE": "1", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.stdout.split() == ["False", "0"], res.stderr
