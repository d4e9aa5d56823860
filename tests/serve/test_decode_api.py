"""``POST /api/decode``: which positions each cache kind keeps at every step, the bytes it holds,
the kept-positions protocol, decoding with a cache equal to decoding without one, bad requests."""

from __future__ import annotations

import pytest
import torch
from conftest import quick_decoder

from attnkit.modules import cache as C
from attnkit.serve.decode_api import kept_positions, self_attention_kinds

PROMPT = "And God said, "
P = len(PROMPT)


def decode(post, cache, steps=12, **extra):
    status, r = post("/api/decode", {"prompt": PROMPT, "steps": steps, "cache": cache, **extra})
    assert status == 200, r
    return r


def test_dynamic_cache_keeps_every_position_and_grows(post):
    r = decode(post, {"kind": "dynamic", "initial_capacity": 16})
    assert len(r["steps"]) == 12 and r["stopped"] is None and r["prompt_tokens"] == P
    for i, s in enumerate(r["steps"]):
        assert s["kept_positions"] == list(range(P + i))  # step i is predicted from the prompt and i earlier characters
    nbytes = [s["nbytes"] for s in r["steps"]]
    assert nbytes == sorted(nbytes) and nbytes[-1] > nbytes[0]  # capacity 16 doubles to 32 while decoding


@pytest.mark.parametrize("window", [1, 5, 16])
def test_sliding_cache_keeps_the_last_window(post, window):
    r = decode(post, {"kind": "sliding", "window": window}, steps=10)
    for i, s in enumerate(r["steps"]):
        t = P + i
        assert s["kept_positions"] == list(range(max(0, t - window), t))
    assert len({s["nbytes"] for s in r["steps"]}) == 1  # a ring buffer never grows


def test_static_cache_stops_when_full_and_keeps_the_steps_so_far(post):
    r = decode(post, {"kind": "static", "max_len": P + 3}, steps=10)
    assert len(r["steps"]) == 4 and "max_len" in r["stopped"]
    assert r["steps"][-1]["kept_positions"] == list(range(P + 3))


def test_cached_greedy_decoding_equals_recomputing_the_prefix(post, decoder_folder):
    r = decode(post, {"kind": "dynamic"}, steps=15, temperature=0)
    dec = quick_decoder(decoder_folder)  # read back from the cache folder the server trained into
    ids, _ = dec.encode(PROMPT)
    want = dec.model.generate(torch.tensor([ids]), 15, cache=None)[0].tolist()
    assert "".join(s["token"] for s in r["steps"]) == "".join(dec.vocab[i] for i in want)


def test_same_seed_same_text_and_unknown_characters_are_reported(post):
    a = decode(post, {"kind": "dynamic"}, seed=3)
    b = decode(post, {"kind": "dynamic"}, seed=3)
    assert [s["token"] for s in a["steps"]] == [s["token"] for s in b["steps"]]
    status, r = post("/api/decode", {"prompt": "起初 God", "steps": 2})
    assert status == 200 and r["unknown_chars"] == ["初", "起"] and r["prompt_tokens"] == len("起初 God")


class _Declares:
    """A cache that says what it keeps (the protocol's first rule), as a tensor or a list."""

    def __init__(self, kept):
        self.kept = kept

    def kept_positions(self):
        return self.kept


def test_kept_positions_protocol():
    assert kept_positions(_Declares(torch.tensor([[0, 1, 7, 9]])), 10) == [0, 1, 7, 9]  # batched: row 0
    assert kept_positions(_Declares([9, 0, 4]), 10) == [0, 4, 9]
    assert kept_positions(object(), 4) == [0, 1, 2, 3]  # anything else keeps everything
    ring = C.make_cache("sliding", window=3)
    for p in range(5):
        ring.update(torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))
    assert kept_positions(ring, 5) == [2, 3, 4]
    assert kept_positions(C.make_cache("dynamic"), 0) == []


KNOWN_KWARGS = {"static": {"max_len": 64}, "sliding": {"window": 8}, "sink": {"sinks": 2, "window": 6},
                "h2o": {"budget": 8, "recent": 4}, "snapkv": {"budget": 8, "window": 4, "kernel": 3},
                "quantized": {"bits": 4, "group": 8, "residual": 4}}  # a kind added later: its arguments here


def test_every_registered_self_attention_kind_decodes(post):
    assert set(self_attention_kinds()) == set(C.KINDS) - {"cross"}
    for kind in self_attention_kinds():
        status, r = post("/api/decode", {"prompt": PROMPT, "steps": 3, "cache": {"kind": kind, **KNOWN_KWARGS.get(kind, {})}})
        if kind not in KNOWN_KWARGS and status == 400:  # a newer kind that needs arguments: refused in its own words
            assert r["error"].startswith(f"cache {kind!r} with {{}}:"), r
            continue
        assert status == 200, r
        assert len(r["steps"]) == 3 and all(s["nbytes"] > 0 for s in r["steps"])


class SinkAndRecent(C.DynamicCache):
    """A toy evicting kind registered for the test: it stores everything but declares that it keeps
    the first ``sinks`` positions and the last ``recent`` — the protocol an eviction cache follows."""

    kind = "toy_sink"

    def __init__(self, *, sinks: int = 1, recent: int = 4):
        self.sinks, self.recent = sinks, recent
        super().__init__()

    def kept_positions(self):
        t = int(self.lengths[0])
        return sorted(set(range(min(self.sinks, t))) | set(range(max(0, t - self.recent), t)))


def test_a_kind_registered_later_is_offered_and_its_kept_positions_are_reported(post, get, monkeypatch):
    monkeypatch.setitem(C.KINDS, "toy_sink", SinkAndRecent)
    assert "toy_sink" in get("/api/info")[1]["decode"]["kinds"]
    r = decode(post, {"kind": "toy_sink", "sinks": 2, "recent": 3}, steps=6)
    for i, s in enumerate(r["steps"]):
        t = P + i
        assert s["kept_positions"] == [0, 1, t - 3, t - 2, t - 1]
    assert r["cache"] == {"kind": "toy_sink", "sinks": 2, "recent": 3}


@pytest.mark.parametrize("body,needle", [
    ({"prompt": PROMPT, "cache": {"kind": "cross"}}, "cache.kind must be one of"),
    ({"prompt": PROMPT, "cache": {"kind": "paged"}}, "cache.kind must be one of"),
    ({"prompt": PROMPT, "cache": {"kind": "sliding"}}, "cache 'sliding'"),
    ({"prompt": PROMPT, "cache": {"kind": "dynamic", "size": 3}}, "size"),
    ({"prompt": PROMPT, "cache": {"kind": "sliding", "window": [3]}}, "cache.window must be a number"),
    ({"prompt": PROMPT, "cache": "dynamic"}, "cache must be an object"),
    ({"prompt": PROMPT, "steps": 0}, "steps must be in [1, 200]"),
    ({"prompt": PROMPT, "steps": 201}, "steps must be in [1, 200]"),
    ({"prompt": "", "steps": 3}, "prompt is empty"),
    ({"prompt": PROMPT, "temperature": -1}, "temperature must be a number"),
])
def test_bad_decode_bodies(post, body, needle):
    status, r = post("/api/decode", body)
    assert status == 400 and needle in r["error"], r
    status, r = post("/api/decode", {"prompt": "x" * 201})
    assert status == 413 and "the limit is 200" in r["error"]


def test_eviction_kinds_report_what_they_keep(post):
    """A sink cache keeps its first tokens and the recent window: the page draws exactly these."""
    status, r = post("/api/decode", {"prompt": PROMPT, "steps": 4, "cache": {"kind": "sink", "sinks": 2, "window": 6}})
    assert status == 200, r
    for step in r["steps"][1:]:  # the prompt arrives as one chunk and is cut to the budget at the next write
        kept = step["kept_positions"]
        assert len(kept) <= 2 + 6 + 1 and kept[:2] == [0, 1] and kept[2] > 2, kept  # sinks, then a recent window
