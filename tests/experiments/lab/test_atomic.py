"""Temporary files of atomic writes: a leftover of a dead writer is cleared, a live writer's file is not."""

from __future__ import annotations

import os
import subprocess
import sys

from attnkit.experiments.lab.atomic import remove_stale_temporaries, write_atomic


def test_only_temporaries_of_dead_writers_are_removed(tmp_path):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        files = {name: tmp_path / f".lstm-seed0.pt.tmp-{pid}" for name, pid in
                 (("live", live.pid), ("dead", dead.pid), ("own", os.getpid()))}
        odd = tmp_path / ".x.pt.tmp-notapid"
        for f in (*files.values(), odd):
            f.write_bytes(b"half")
        keep = tmp_path / "lstm-seed0.pt"
        keep.write_bytes(b"whole")
        remove_stale_temporaries(tmp_path)
        assert files["live"].exists()  # another process sharing the folder is still writing it
        assert not files["dead"].exists() and not files["own"].exists() and not odd.exists()
        assert keep.read_bytes() == b"whole"
    finally:
        live.kill()
        live.wait()
    remove_stale_temporaries(tmp_path)
    assert not files["live"].exists()  # its writer has gone


def test_write_atomic_leaves_no_temporary(tmp_path):
    path = write_atomic(tmp_path / "a.json", lambda f: f.write("{}"), binary=False)
    assert path.read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == ["a.json"]
