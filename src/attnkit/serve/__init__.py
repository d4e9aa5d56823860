"""``attnkit serve``: a live attention playground in the browser, Chinese first, on a real model.

Type a sentence and see every head of all-MiniLM-L6-v2 (attnkit's own BERT, weights captured from
the real forward pass), toggle a mask and see exactly what it removes, and step a small decoder
token by token while its KV cache grows — or, with an evicting cache, forgets. Everything is
served from this package by a local server; nothing is fetched from the network.

* :mod:`~attnkit.serve.server` — the HTTP server (standard library) and its routes;
* :mod:`~attnkit.serve.attention_api` — ``POST /api/attention``;
* :mod:`~attnkit.serve.decode_api` — ``POST /api/decode`` and the kept-positions protocol;
* :mod:`~attnkit.serve.char_model` — the tiny character decoder, trained once and cached;
* :mod:`~attnkit.serve.limits` — the input limits and the API's error type;
* :mod:`~attnkit.serve.unit_json` — fast JSON text of large weight arrays.
"""

from __future__ import annotations

import webbrowser

from .server import PlaygroundServer, make_server

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def serve(host: str = "127.0.0.1", port: int = 8765, *, lang: str = "zh", open_browser: bool = True) -> None:
    """Load the model, print the address, open the page (unless ``open_browser=False``), serve until Ctrl-C."""
    if lang not in ("zh", "en"):
        raise ValueError(f"lang must be 'zh' or 'en', got {lang!r}")
    print("loading all-MiniLM-L6-v2 ...", flush=True)
    server = make_server(host, port)
    url = server.url + ("?lang=en" if lang == "en" else "")
    print(f"attnkit serve: {url}", flush=True)
    if host in LOOPBACK:
        print("local only: the server listens on this machine's loopback address; nothing is sent off it", flush=True)
    else:
        print(f"warning: listening on {host}, so other machines on the network can reach this server", flush=True)
    print("Ctrl-C stops it.", flush=True)
    if open_browser:
        webbrowser.open(url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


__all__ = ["serve", "make_server", "PlaygroundServer"]
