"""The one-page HTML report that ``attnkit report`` writes: :mod:`.build` runs the sections (cached,
:mod:`.cache`) in the order of :mod:`.contents` and writes the page; :mod:`.experiment_section`
makes a section of each registered experiment (every part that measures), :mod:`.sections` holds
the prose parts that measure nothing. Imports flow report → experiments → page."""

from .build import build_report, default_sections

__all__ = ["build_report", "default_sections"]
