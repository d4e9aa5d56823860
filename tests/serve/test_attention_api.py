"""``POST /api/attention`` on the running server: weights against Hugging Face eager MiniLM, the mask
rules against an independent NumPy recomputation, long inputs, and every refused input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import request

from attnkit.inspect.head_summary import HEAD_LABELS
from attnkit.serve import limits as LIM

TEXTS = ["The animal didn't cross the street because it was too tired.", "Hi!", "注意力 is all you need."]


@pytest.fixture(scope="module")
def hf_eager():
    transformers = pytest.importorskip("transformers")
    from attnkit.models.bert_loader import minilm_path

    transformers.logging.set_verbosity_error()
    return transformers.BertModel.from_pretrained(str(minilm_path()), attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def tokenizer():
    from attnkit.models.bert_loader import BertTokenizer

    return BertTokenizer(max_length=LIM.MAX_TOKENS)


def hf_weights(hf, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> np.ndarray:
    """(N, B, H, L, L) eager output_attentions."""
    with torch.no_grad():
        out = hf(input_ids=ids, attention_mask=attention_mask, output_attentions=True)
    return np.stack([a.numpy() for a in out.attentions])


@pytest.mark.parametrize("text", TEXTS)
def test_unmasked_weights_equal_hf_eager(post, hf_eager, tokenizer, text):
    status, r = post("/api/attention", {"text": text})
    assert status == 200, r
    b = tokenizer(text)
    assert r["tokens"] == b.tokens[0]
    want = hf_weights(hf_eager, b.input_ids)[:, 0]  # (N, H, L, L)
    got = np.array(r["weights"])
    assert got.shape == want.shape == (6, 12, len(r["tokens"]), len(r["tokens"]))
    assert np.abs(got - want).max() <= 1e-5
    assert r["removed"] == 0 and all(set(row) == {"1"} for row in r["allowed"])


def test_padding_mode_real_rows_equal_hf_batch_and_pad_rows_are_zero(post, hf_eager, tokenizer):
    text = TEXTS[0]
    status, r = post("/api/attention", {"text": text, "mask": "padding"})
    assert status == 200, r
    n = len(tokenizer(text).tokens[0])
    L = n + LIM.PAD_EXTRA
    assert r["tokens"][n:] == ["[PAD]"] * LIM.PAD_EXTRA and r["n_tokens"] == L
    ids = torch.cat([tokenizer(text).input_ids, torch.zeros(1, LIM.PAD_EXTRA, dtype=torch.long)], 1)
    am = (torch.arange(L) < n).long()[None]
    want = hf_weights(hf_eager, ids, am)[:, 0]
    got = np.array(r["weights"])
    assert np.abs(got[:, :, :n] - want[:, :, :n]).max() <= 1e-5  # real queries: Hugging Face's padded batch
    assert not got[:, :, n:].any() and not got[:, :, :, n:].any()  # pad rows and columns exactly 0
    assert r["removed"] == L * L - n * n


def numpy_layer0(hf, ids: torch.Tensor, allowed: np.ndarray) -> np.ndarray:
    """Layer 0 weights (H, L, L) recomputed in float64 NumPy from HF's embeddings and q/k weights."""
    with torch.no_grad():
        x = hf.embeddings(input_ids=ids).double().numpy()[0]  # (L, D)
    sa = hf.encoder.layer[0].attention.self
    H = hf.config.num_attention_heads
    E = x.shape[1] // H

    def proj(lin):
        return (x @ lin.weight.detach().double().numpy().T + lin.bias.detach().double().numpy()).reshape(len(x), H, E).transpose(1, 0, 2)

    q, k = proj(sa.query), proj(sa.key)
    s = q @ k.transpose(0, 2, 1) / np.sqrt(E)
    s = np.where(allowed[None], s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.where(allowed[None], np.exp(s - np.where(np.isfinite(m), m, 0)), 0.0)
    z = e.sum(-1, keepdims=True)
    return np.divide(e, z, out=np.zeros_like(e), where=z > 0)


@pytest.mark.parametrize("mask,window", [("causal", None), ("window", 1), ("window", 3), ("window", 40)])
def test_mask_rules(post, hf_eager, tokenizer, mask, window):
    text = TEXTS[0]
    body = {"text": text, "mask": mask} | ({} if window is None else {"window": window})
    status, r = post("/api/attention", body)
    assert status == 200, r
    L = r["n_tokens"]
    i, j = np.indices((L, L))
    want_allowed = (j <= i) if mask == "causal" else ((j <= i) & (j > i - window))
    allowed = np.array([[c == "1" for c in row] for row in r["allowed"]])
    assert (allowed == want_allowed).all() and r["removed"] == int((~want_allowed).sum())
    w = np.array(r["weights"])
    assert not w[..., ~allowed].any()  # what the mask removes has weight exactly 0
    assert np.allclose(w.sum(-1), 1.0, atol=1e-5)  # every row keeps at least itself
    ref = numpy_layer0(hf_eager, tokenizer(text).input_ids, allowed)
    assert np.abs(w[0] - ref).max() <= 1e-5
    if mask == "window" and window == 1:
        assert np.allclose(w, np.eye(L)[None, None], atol=1e-6)  # a width-1 window sees only itself


def test_diagnostics_rollout_thumbs_and_focus(post):
    status, r = post("/api/attention", {"text": TEXTS[0], "layer": 2, "head": 5})
    assert status == 200
    L = r["n_tokens"]
    assert len(r["heads_info"]) == 6 and all(len(row) == 12 for row in r["heads_info"])
    assert {h["label"] for row in r["heads_info"] for h in row} <= set(HEAD_LABELS)
    assert len(r["rollout"]) == L and abs(sum(r["rollout"]) - 1) < 1e-3
    T = min(L, LIM.THUMB_MAX)
    thumbs = np.array(r["thumbs"]["values"])
    assert thumbs.shape == (6, 12, T, T) and np.allclose(thumbs.max(axis=(-1, -2)), 1.0, atol=1e-6)
    f = r["focus"]
    w = np.array(r["weights"])[2, 5]
    assert (f["layer"], f["head"]) == (2, 5)
    top = np.argsort(-w, axis=-1, kind="stable")[:, : LIM.TOP_K]
    assert np.allclose(np.array(f["topk_weights"]), np.take_along_axis(w, top, -1), atol=1e-5)
    ent = -(w * np.log(np.where(w > 0, w, 1))).sum(-1)
    assert np.allclose(f["entropy"], ent, atol=1e-4)


def test_512_tokens_use_row_summaries_and_513_are_refused(post):
    words = " ".join(["word"] * 510)  # 510 word pieces + [CLS] + [SEP]
    status, r = post("/api/attention", {"text": words, "layer": 5, "head": 0})
    assert status == 200, r
    assert r["n_tokens"] == 512 and r["weights"] is None and "128" in r["weights_note"]
    assert np.array(r["focus"]["topk_indices"]).shape == (512, LIM.TOP_K)
    assert np.array(r["thumbs"]["values"]).shape == (6, 12, LIM.THUMB_MAX, LIM.THUMB_MAX)
    assert len(r["allowed"]) == 512
    status, r = post("/api/attention", {"text": words + " word"})
    assert status == 413 and "513 tokens" in r["error"] and "512" in r["error"] and r["field"] == "text"


@pytest.mark.parametrize("body,status,needle", [
    ({"text": "hi", "mask": "diagonal"}, 400, "mask must be one of"),
    ({"text": "hi", "mask": "window", "window": 0}, 400, "window must be in [1, 512]"),
    ({"text": "hi", "mask": "window", "window": "3"}, 400, "window must be an integer"),
    ({"text": ""}, 400, "text is empty"),
    ({"text": 5}, 400, "text must be a string"),
    ({"text": "x" * (LIM.MAX_TEXT_CHARS + 1)}, 413, f"the limit is {LIM.MAX_TEXT_CHARS}"),
    ({"text": "hi", "layer": 6}, 400, "layer must be in [0, 5]"),
    ({"text": "hi", "maks": "causal"}, 400, "unknown field(s) ['maks']"),
    (["hi"], 400, "must be a JSON object"),
])
def test_bad_attention_bodies(post, body, status, needle):
    got, r = post("/api/attention", body)
    assert got == status and needle in r["error"], r


def test_malformed_and_oversized_requests_then_the_server_still_answers(server, post, get):
    status, r = post("/api/attention", raw=b'{"text": "unterminated')
    assert status == 400 and r["error"].startswith("malformed JSON")
    status, r = post("/api/attention", raw=b"\xff\xfe not utf-8")
    assert status == 400 and "malformed JSON" in r["error"]
    big = json.dumps({"text": "a" * (LIM.MAX_BODY_BYTES + 10)}).encode()
    status, r = post("/api/attention", raw=big)
    assert status == 413 and str(LIM.MAX_BODY_BYTES) in r["error"]
    status, r = post("/api/nothing", {"text": "hi"})
    assert status == 404 and "/api/attention" in r["error"]
    status, r = get("/assets/../server.py")
    assert status == 404
    status, r = get("/lessons/zh/../../README.md")
    assert status == 404
    status, r = get("/api/info")
    assert status == 200 and r["limits"]["max_tokens"] == LIM.MAX_TOKENS


def test_pages_are_served_with_a_self_only_policy(server):
    import http.client

    conn = http.client.HTTPConnection(*server, timeout=30)
    conn.request("GET", "/")
    resp = conn.getresponse()
    html = resp.read().decode()
    assert resp.status == 200 and '<html lang="zh-CN">' in html
    assert "default-src 'self'" in resp.getheader("Content-Security-Policy")
    conn.close()
    status, text = request(server, "GET", "/lessons/zh/04_masks.py")
    assert status == 200 and "掩码" in text


def test_a_client_that_stops_sending_is_dropped_and_others_are_served(server, get, monkeypatch):
    import socket
    import time

    from attnkit.serve.server import Handler

    monkeypatch.setattr(Handler, "timeout", 0.5)  # the socket timeout of every new connection
    with socket.create_connection(server, timeout=10) as s:
        s.sendall(b"POST /api/attention HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"text\": ")  # 90 bytes short
        t = time.perf_counter()
        got = s.recv(4096)  # the server gives up on the body and closes (an empty read), or answers an error
        assert time.perf_counter() - t < 5
        assert got == b"" or b"HTTP/1.1 " in got
    status, r = get("/api/info")
    assert status == 200
