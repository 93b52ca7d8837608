"""The ``dralloc`` command line: ``run`` (the operator), ``version``, ``simulate``, ``explain``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from operators import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dralloc", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("version", help="print the dralloc version")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(f"dralloc {__version__}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
