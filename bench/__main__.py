"""``python -m bench``: every benchmark, one command (see bench/run.py).

``python -m bench celdiff [...]`` runs the CEL differential test instead (bench/celdiff).
"""

import sys

if sys.argv[1:2] == ["celdiff"]:
    from bench.celdiff import main as celdiff

    sys.exit(celdiff(sys.argv[2:]))

from bench.run import main

sys.exit(main())
