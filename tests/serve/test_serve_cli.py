"""``attnkit serve`` on the command line: its flags, its refusals, and what it prints when it starts."""

from __future__ import annotations

import pytest

from attnkit import cli
from attnkit import serve as serve_pkg


class FakeServer:
    """Stands in for the real server: records how it was built, stops at once like Ctrl-C."""

    url = "http://127.0.0.1:8765/"

    def __init__(self, host, port):
        self.args, self.closed = (host, port), False

    def serve_forever(self):
        raise KeyboardInterrupt

    def server_close(self):
        self.closed = True


@pytest.fixture
def fake(monkeypatch):
    made, opened = [], []

    def make(host, port):
        made.append(FakeServer(host, port))
        return made[-1]

    monkeypatch.setattr(serve_pkg, "make_server", make)
    monkeypatch.setattr(serve_pkg.webbrowser, "open", opened.append)
    return made, opened


def test_serve_defaults_print_the_local_address_and_open_the_page(fake, capsys):
    made, opened = fake
    assert cli.main(["serve"]) == 0
    out = capsys.readouterr().out
    assert made[0].args == ("127.0.0.1", 8765) and made[0].closed
    assert "http://127.0.0.1:8765/" in out and "local only" in out
    assert opened == ["http://127.0.0.1:8765/"]


def test_serve_english_without_browser(fake, capsys):
    made, opened = fake
    assert cli.main(["serve", "--lang", "en", "--no-browser", "--port", "9000"]) == 0
    assert made[0].args == ("127.0.0.1", 9000) and opened == []
    assert "?lang=en" in capsys.readouterr().out


def test_serve_on_a_public_address_warns(fake, capsys):
    assert cli.main(["serve", "--host", "0.0.0.0", "--no-browser"]) == 0
    assert "other machines on the network can reach" in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [
    (["serve", "--port", "70000"], "--port must be in [0, 65535]"),
    (["serve", "--lang", "fr"], "invalid choice: 'fr'"),
])
def test_bad_serve_flags(fake, capsys, argv, needle):
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse's own refusals exit 2
        code = e.code
    assert code == 2 and needle in capsys.readouterr().err
    assert fake[0] == []  # nothing was started
