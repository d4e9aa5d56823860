"""``attnkit.cache`` is a real module (``src/attnkit/cache.py``), not a ``sys.modules`` entry: it
re-exports exactly the public names of :mod:`attnkit.modules.cache`, as the same objects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import attnkit
import attnkit.modules.cache as impl


def test_attnkit_cache_is_a_file_of_its_own():
    assert Path(attnkit.cache.__file__).name == "cache.py" and Path(attnkit.cache.__file__).parent.name == "attnkit"
    assert sys.modules["attnkit.cache"] is attnkit.cache


def test_it_re_exports_exactly_the_public_names_of_the_caches():
    assert sorted(attnkit.cache.__all__) == sorted(impl.__all__), "add a new cache to both __all__ lists"
    for name in impl.__all__:
        assert getattr(attnkit.cache, name) is getattr(impl, name), name


def test_from_attnkit_cache_import_works_in_a_fresh_process():
    code = "from attnkit.cache import DynamicCache, make_cache; print(type(make_cache('static', max_len=4)).__name__)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "PYTHONPATH": str(Path(attnkit.__file__).parents[1])})
    assert r.returncode == 0 and r.stdout.strip() == "StaticCache", r.stderr[-2000:]
