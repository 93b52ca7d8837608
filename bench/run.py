"""The one benchmark command: ``python -m bench`` (``--quick`` for a smoke-sized run).

Runs, in order: level 1 (dralloc's allocator vs upstream's Go allocator on every workload in
``bench/workloads/``), the engine scale points (100, 500, 2,000 nodes), the operator footprint
(RSS and informer startup, when the testbed is built), the operator's cache at upstream's
scalability envelope (``bench/cache_scale.py``) and level 2 (end to end on the testbed:
in-tree DRA, dralloc's operator on its CRDs, and dralloc in in-tree mode). Each part that cannot run says why in the results instead
of failing the run. Results go to ``bench/results/`` (JSON, markdown, PNG).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import cache_scale, level1, report
from bench.scenario import Workload, expand, load_all
from operators.api.common import KUBERNETES_GROUP
from operators.api.models import GROUP

QUICK_FACTOR = 0.2


def select(only: Sequence[str], quick: bool) -> list[Workload]:
    workloads = load_all()
    if only:
        chosen = [w for w in workloads if w.key in only or w.name in only]
        missing = set(only) - {w.key for w in chosen} - {w.name for w in chosen}
        if missing:
            raise SystemExit(f"unknown workload(s): {', '.join(sorted(missing))}")
        return chosen
    if quick:
        return [w.scaled(QUICK_FACTOR) for w in workloads if "quick" in w.tags]
    # The 2,000-node point belongs to the scale section only.
    return [w for w in workloads if w.tags != ("scale",)]


def profile_dralloc(workload: Workload, lines: int = 18) -> str:
    """cProfile of dralloc's measured steps: the functions where the time goes, by own time."""
    scenario = expand(workload)
    replay = level1.DrallocReplay(scenario)
    placements: list[tuple[str, str]] = []
    if scenario.init_steps:
        replay.warm_up(scenario.init_steps[0])
    replay.run(scenario.init_steps, placements)
    if scenario.measure_steps:
        replay.warm_up(scenario.measure_steps[0])
    profiler = cProfile.Profile()
    with level1.operator_gc():
        profiler.enable()
        replay.run(scenario.measure_steps, placements)
        profiler.disable()
    buffer = io.StringIO()
    stats = pstats.Stats(profiler, stream=buffer)
    stats.sort_stats("tottime").print_stats(lines)
    text = buffer.getvalue()
    # Keep the table, drop the preamble; shorten the repository prefix of file names.
    root = str(Path(__file__).resolve().parent.parent) + "/"
    return f"{workload.name}\n" + text[text.find("   ncalls") :].replace(root, "")


def run_level1(
    workloads: Sequence[Workload],
    *,
    upstream: bool,
    repeat: int,
    binpack: bool,
    log: Any,
    quotas: str | None = None,
    python_gc: bool = False,
    memory: bool = False,
) -> tuple[list[dict[str, Any]], str | None]:
    binary = None
    skipped = None
    if upstream:
        try:
            binary = level1.upstream_binary()
        except level1.UpstreamUnavailable as error:
            skipped = str(error)
    rows = []
    for workload in workloads:
        started = time.perf_counter()
        comparison = level1.compare(
            expand(workload),
            workload.key,
            binary,
            repeat=repeat,
            binpack=binpack,
            quotas=quotas,
            python_gc=python_gc,
            memory=memory or "scale" in workload.tags,
        )
        row = comparison.to_json()
        row["tags"] = list(workload.tags)
        rows.append(row)
        up = comparison.upstream.pods_per_second if comparison.upstream else None
        plain = comparison.dralloc_no_quotas
        without = (
            ""
            if plain is None
            else f" (without quotas {plain.pods_per_second:,.0f} pods/s, ratio "
            f"{'-' if comparison.ratio_no_quotas is None else f'{comparison.ratio_no_quotas:.2f}x'})"
        )
        print(
            f"  {workload.name}: dralloc {comparison.dralloc.pods_per_second:,.0f} pods/s, "
            f"upstream {'-' if up is None else f'{up:,.0f}'} pods/s, ratio "
            f"{'-' if comparison.ratio is None else f'{comparison.ratio:.2f}x'}{without}, same "
            f"placements {comparison.same_placements} ({time.perf_counter() - started:.0f}s)",
            file=log,
            flush=True,
        )
    return rows, skipped


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="small workloads, fewer pods, no level 2"
    )
    parser.add_argument(
        "--level",
        choices=["1", "2", "cache", "all"],
        default="all",
        help="cache: the operator's cache at 5,000 nodes and 150,000 pods, in both modes",
    )
    parser.add_argument("--only", nargs="*", default=[], help="workload file names (without .json)")
    parser.add_argument("--no-upstream", action="store_true", help="skip the Go allocator")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="level-1 runs per engine, alternating, best kept (a run lasts ~0.05-2 s: "
        "on a shared machine one run is mostly noise)",
    )
    parser.add_argument("--no-binpack", action="store_true", help="skip dralloc's binpack column")
    parser.add_argument(
        "--quotas",
        nargs="?",
        const="roomy",
        choices=("roomy", "checked"),
        help="level 1: dralloc with a DeviceQuota (limits no pod reaches) per namespace and "
        "class; `roomy` (the default) lets the search see that no quota can refuse, "
        "`checked` adds a capacity limit so that every device taken is checked",
    )
    parser.add_argument(
        "--python-gc",
        action="store_true",
        help="level 1: dralloc under CPython's collector settings, not the operator's "
        "(young threshold, state frozen after the initial list; see bench/level1.py)",
    )
    parser.add_argument(
        "--systems",
        nargs="*",
        default=[],
        help="level-2 systems by name (default all: in-tree, dralloc, 'dralloc in-tree mode')",
    )
    parser.add_argument("--out", type=Path, default=report.RESULTS_DIR)
    parser.add_argument(
        "--keep-profiles",
        type=Path,
        default=None,
        metavar="DIR",
        help="level 2: copy the raw profiles (the API server's pprof, the operator's py-spy "
        "stacks) into DIR, named by workload and system, for go tool pprof and comparisons",
    )
    parser.add_argument(
        "--operator-identity",
        choices=("installed", "admin"),
        default="installed",
        help="level 2: the operator as installed (its account's token, roles and the "
        "admission policies on its writes; the default) or as the testbed's admin",
    )
    args = parser.parse_args(argv)
    log = sys.stderr

    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "quick": args.quick,
        "quotas": args.quotas,
        "pythonGc": args.python_gc,
        "machine": report.machine(),
        "skipped": {},
    }
    if args.level in ("1", "all"):
        workloads = select(args.only, args.quick)
        print(f"level 1: {len(workloads)} workloads", file=log)
        rows, skipped = run_level1(
            workloads,
            upstream=not args.no_upstream,
            repeat=1 if args.quick else args.repeat,
            binpack=not args.no_binpack and not args.quick,
            log=log,
            quotas=args.quotas,
            python_gc=args.python_gc,
        )
        if skipped:
            results["skipped"]["upstream (level 1)"] = skipped
        results["level1"] = rows
        results["level1Summary"] = report.summarize_level1(rows)
        if not args.only:
            scale_extra = (
                []
                if args.quick
                else [w for w in load_all("scale") if w.key not in {r["file"] for r in rows}]
            )
            print(f"scale: {len(scale_extra)} extra workloads", file=log)
            extra_rows, _ = run_level1(
                scale_extra,
                upstream=not args.no_upstream and not skipped,
                repeat=1,
                binpack=False,
                log=log,
                python_gc=args.python_gc,
            )
            results["scale"] = sorted(
                [r for r in rows + extra_rows if "scale" in r["tags"]], key=lambda r: r["nodes"]
            )
        rated = [r for r in rows if r.get("ratio") and not r.get("smoke")]
        if rated and not args.quick:
            slowest = min(rated, key=lambda r: r["ratio"])
            workload = next(w for w in workloads if w.key == slowest["file"])
            print(f"profiling dralloc on {workload.name}", file=log)
            results["profile"] = profile_dralloc(workload)
    if args.level == "cache" or (args.level == "all" and not args.quick and not args.only):
        results["cacheScale"] = [
            cache_scale.run(cache_scale.Size(api_group=group), log)
            for group in (GROUP, KUBERNETES_GROUP)
        ]
    if args.level in ("2", "all") and not args.quick:
        from bench import level2

        level2.run_into(
            results,
            log=log,
            only=args.only,
            systems=level2.systems_named(args.systems),
            keep_profiles=args.keep_profiles,
            as_installed=args.operator_identity == "installed",
        )
    stem = "" if args.level == "all" and not args.only else f"level{args.level}"
    if args.only:
        stem = "only"
    written = report.write(results, args.out, stem)
    summary = results.get("level1Summary") or {}
    if summary:
        print(
            f"level 1: geometric mean {summary['geomean']:.2f}x, lowest {summary['min']:.2f}x "
            f"({summary['minWorkload']})",
            file=log,
        )
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
