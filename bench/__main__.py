"""``python -m bench``: every benchmark, one command (see bench/run.py)."""

import sys

from bench.run import main

sys.exit(main())
