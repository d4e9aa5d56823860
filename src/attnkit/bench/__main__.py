"""``python -m attnkit.bench``: the benchmark's command line and its worker-subprocess entry point."""

import sys

from .harness import main

sys.exit(main())
