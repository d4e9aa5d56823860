"""The cost section reads its visible benchmark against itself: where plain attention on blockwise took more memory
than SDPA (27 vs 6 MiB) and ``auto`` was slower than the backend it picked (85.0 vs 70.1 ms), the page says so."""

from __future__ import annotations

from attnkit.experiments.cost.experiment import quick_reading

ROWS = [["none", "sdpa", "sdpa", "60.0", "6.0", "1.00"], ["none", "blockwise", "blockwise", "70.1", "27.0", "1.17"],
        ["none", "auto", "blockwise", "85.0", "27.0", "1.42"]]


def test_memory_and_auto_are_read_from_the_rows():
    en = quick_reading(ROWS, "en")
    assert "blockwise 27.0 MiB, SDPA 6.0 MiB" in en and "needed less memory than blockwise here" in en
    assert "auto ran blockwise in 85.0 ms, blockwise by name 70.1 ms" in en and "not the choice's price" in en
    zh = quick_reading(ROWS, "zh")
    assert "分块 27.0 MiB，SDPA 6.0 MiB" in zh and "auto 选了 blockwise，85.0 毫秒，直接指定 blockwise 为 70.1 毫秒" in zh
    assert quick_reading([], "en") == ""
