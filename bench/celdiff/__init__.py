"""Differential test of dralloc's CEL against upstream's DRA CEL: ``python -m bench celdiff``.

Random device selectors over random devices (``cases``, seeded) go to both sides
(``sides``): upstream's ``k8s.io/dynamic-resource-allocation/cel`` at the testbed's
default Kubernetes version, through the Go program in this directory, and
``operators.cel``. Every case where they disagree is classified (``compare``) and the
figures by category are printed with examples. Like the other benchmarks it is not a
test: the smoke test only checks that it runs; the issue's target is 0 counted mismatches.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.celdiff import compare, sides
from bench.celdiff.cases import generate


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench celdiff", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--examples", type=int, default=3, help="examples per kind of mismatch")
    parser.add_argument("--show", type=int, nargs="*", default=[], help="print these cases in full")
    parser.add_argument("--json", type=Path, help="also write every finding to this file")
    args = parser.parse_args(argv)

    try:
        binary = sides.upstream_binary()
    except sides.UpstreamUnavailable as error:
        print(f"celdiff: the upstream side is unavailable: {error}", file=sys.stderr)
        return 2
    versions = sides.upstream_versions(binary)
    cases = generate(args.cases, args.seed)
    started = time.perf_counter()
    upstream = sides.run_upstream(cases, binary)
    upstream_seconds = time.perf_counter() - started
    started = time.perf_counter()
    dralloc = sides.run_dralloc(cases)
    dralloc_seconds = time.perf_counter() - started
    print(
        f"celdiff: seed {args.seed}, upstream "
        + ", ".join(f"{k}@{v}" for k, v in sorted(versions.items()))
        + f" ({upstream_seconds:.1f}s; dralloc {dralloc_seconds:.1f}s)"
    )
    summary = compare.summarize(cases, upstream, dralloc)
    compare.report(summary, sys.stdout, examples=args.examples)
    by_id = {case.id: (case, up, dr) for case, up, dr in zip(cases, upstream, dralloc, strict=True)}
    for case_id in args.show:
        case, up, dr = by_id[case_id]
        print(f"\n#{case_id} {case.to_json_line()}\n  upstream: {up}\n  dralloc:  {dr}")
    if args.json:
        rows = [
            {"category": f.category, "detail": f.detail, "case": json.loads(f.case.to_json_line())}
            for f in summary.findings
        ]
        args.json.write_text(
            json.dumps({"seed": args.seed, "cases": args.cases, "findings": rows}, indent=1)
        )
    return 0
