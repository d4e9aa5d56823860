"""The three states a (query-block, key-block) tile can be in under a mask."""

from __future__ import annotations

import enum


class TileState(enum.Enum):
    """What a mask says about a whole tile: skip it, compute it without the mask, or evaluate the mask."""

    EMPTY = "empty"  # no pair may attend: the tile is skipped
    FULL = "full"  # every pair may attend: no mask evaluation needed
    PARTIAL = "partial"  # some may: the mask is evaluated on the tile

    def __and__(self, other: "TileState") -> "TileState":
        if TileState.EMPTY in (self, other):
            return TileState.EMPTY
        if self is TileState.FULL and other is TileState.FULL:
            return TileState.FULL
        return TileState.PARTIAL

    def __or__(self, other: "TileState") -> "TileState":
        if TileState.FULL in (self, other):
            return TileState.FULL
        if self is TileState.EMPTY and other is TileState.EMPTY:
            return TileState.EMPTY
        return TileState.PARTIAL

    def __invert__(self) -> "TileState":
        if self is TileState.EMPTY:
            return TileState.FULL
        if self is TileState.FULL:
            return TileState.EMPTY
        return TileState.PARTIAL
