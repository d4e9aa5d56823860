"""The one-page HTML report that ``attnkit report`` writes."""

from .build import build_report, default_sections

__all__ = ["build_report", "default_sections"]
