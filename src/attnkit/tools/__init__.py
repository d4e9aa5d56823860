"""Command-line helpers that are not part of the attention library itself (``attnkit doctor``)."""
