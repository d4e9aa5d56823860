"""The report's prose sections: the parts of the page that measure nothing (a section that measures,
times or trains is an experiment, see :mod:`attnkit.experiments`).

A prose section is a module with plain facts and functions, no computation and no cache:

* ``ID``: the section's anchor on the page; ``TITLE``, ``QUESTION``, ``HOW_TO_READ``: (English,
  Chinese) pairs; ``ORDER``: its place among the experiments' ``report_order``; ``LESSON``: the
  course lesson that goes deeper (its file name without ``.py``; "" for none);
* ``render(ctx, lang) -> html``: the prose, from what ``ctx`` holds (the numbers of the sections
  already on the page, ``ctx.data``, by id);
* optionally ``summary(ctx, lang) -> (measured, meaning) | None``: its row of the closing table.

Listed in :data:`PROSE` (the older-than-the-Transformer comparison, read from the seq2seq section).
"""

from . import older

PROSE = (older,)
