"""Offline loaders for the experiments' real data sets, one file per data set.

Nothing here downloads: data comes from installed packages (pip or Debian) or from a path the user
gives. A loader whose data is missing raises :class:`MissingData` naming the package to install or
the path to give.
"""

from ._missing import MissingData

__all__ = ["MissingData"]
