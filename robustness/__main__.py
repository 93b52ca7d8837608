"""``python -m robustness``: seeded runs with faults, each history checked; exit 1 on a violation.

Examples::

    python -m robustness                          # one short run per mode, seed 1
    python -m robustness --mode in-tree --seeds 1-8 --duration 240 --fault-count 12
    python -m robustness --mode in-tree --scheduler-pods --faults none   # kube-scheduler racing
    python -m robustness --mode in-tree --scheduler-pods --policy        # ... refused by policy
    python -m robustness --gate webhook-closed    # the shipped webhook: claims pods fail closed

Each mode gets a fresh testbed (``testbed/up``), unless ``--state-dir`` names a running one
of that mode's kind. The report goes to ``--out`` (``.md`` and ``.json``); a violation prints
the seed, the fault schedule and the events of its subject around it.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from robustness.checker import Violation, check
from robustness.cluster import MODES, Cluster, Unavailable
from robustness.faults import FAULTS
from robustness.gates import GATES
from robustness.history import ClaimFacts, History, PodFacts
from robustness.run import SAFE_FAULTS, Options, Result, Run, load_history, write_report


def _seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds += list(range(int(low), int(high or low) + 1))
    return seeds


def _faults(text: str) -> tuple[str, ...]:
    if text in ("", "none"):
        return ()
    names = tuple(text.split(","))
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown faults {unknown}; known: {sorted(FAULTS)}")
    return names


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m robustness", description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=[*MODES, "both"], default="both")
    p.add_argument("--seeds", type=_seeds, default=[1], help="e.g. 1,5,7-9")
    p.add_argument("--duration", type=float, default=60.0, help="traffic seconds per run")
    p.add_argument("--rate", type=float, default=4.0, help="traffic operations per second")
    p.add_argument(
        "--faults",
        type=_faults,
        default=SAFE_FAULTS,
        help=f"comma list of {sorted(FAULTS)}, or none",
    )
    p.add_argument("--fault-count", type=int, default=4)
    p.add_argument("--nodes", type=int, default=6)
    p.add_argument("--devices-per-node", type=int, default=4)
    p.add_argument(
        "--scheduler-pods",
        action="store_true",
        help="in-tree: kube-scheduler's own pods on the same devices",
    )
    p.add_argument(
        "--gate",
        choices=GATES,
        default="self",
        help="how pods get dralloc's gate: they carry it; the operator's webhook fail-open "
        "(webhook) or as shipped, claims pods failing closed (webhook-closed); or the shipped "
        "MutatingAdmissionPolicy (policy)",
    )
    p.add_argument(
        "--webhook",
        dest="gate",
        action="store_const",
        const="webhook",
        help="the same as --gate=webhook",
    )
    p.add_argument(
        "--fencing",
        action="store_true",
        help="operators use tokens bound to pods of their own, as replicas do, and the shipped "
        "fencing policy lets only the run Lease's holder make claims and allocate",
    )
    p.add_argument(
        "--pod-groups",
        action="store_true",
        help="gangs named by Workload API PodGroups too (the testbed serves PodGroups)",
    )
    p.add_argument(
        "--no-extended-pods",
        dest="extended_pods",
        action="store_false",
        help="in-tree: no pods asking for DRA extended resources",
    )
    p.add_argument(
        "--policy",
        action="store_true",
        help="the claim-allocation admission policy guards the run's namespaces, and the "
        "operator serves all of them (kube-scheduler's pods included)",
    )
    p.add_argument(
        "--preemption",
        action="store_true",
        help="the operators preempt for devices, and the traffic makes pods of a high priority",
    )
    p.add_argument("--settle", type=float, default=180.0, help="seconds to wait for the end state")
    p.add_argument(
        "--state-dir", type=Path, help="a running testbed's state directory (testbed/up --dir)"
    )
    p.add_argument("--out", type=Path, default=Path("bench/results/robustness"))
    p.add_argument(
        "--check-history",
        type=Path,
        metavar="FILE",
        help="check a run's saved history.jsonl again (no cluster; the end-state rules are "
        "not judged: Warning Events are not saved)",
    )
    return p


def rerun_command(argv: Sequence[str]) -> str:
    """The command line that makes these runs again, without the options that name places
    on this machine (``--out``, ``--state-dir``)."""
    kept: list[str] = []
    skip_value = False
    for arg in argv:
        if skip_value:
            skip_value = False
        elif arg in ("--out", "--state-dir"):
            skip_value = True
        elif not arg.startswith(("--out=", "--state-dir=")):
            kept.append(arg)
    return " ".join(["python -m robustness", *map(shlex.quote, kept)])


def explain(violation: Violation, history: History, around: int = 6) -> str:
    """The events of the violation's subject's objects around where it began."""
    words = violation.subject.split("/")
    pods = {
        e.facts.uid for e in history.events
        if isinstance(e.facts, PodFacts) and (e.facts.name in violation.detail or e.facts.name in words)
    }  # fmt: skip
    related = [
        e for e in history.ordered()
        if e.key == violation.subject or e.facts.name in violation.detail or e.facts.name in words
        or (isinstance(e.facts, ClaimFacts) and e.facts.owner_pod in pods)
    ]  # fmt: skip
    near = [e for e in related if e.rv <= violation.start_rv][-around:]
    near += [e for e in related if e.rv > violation.start_rv][:around]
    return "\n".join(
        f"    rv {e.rv} {e.at:7.2f}s {e.kind} {e.type} {e.key}"
        + (" (relisted)" if e.relisted else "")
        + f": {e.facts}"
        for e in near
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.check_history:
        history = load_history(args.check_history)
        history.settled = False
        report = check(history)
        for violation in report.violations:
            print(violation)
        print(f"{report.events} events; violations: {report.by_rule()}")
        return 0 if report.ok else 1
    modes = list(MODES.values()) if args.mode == "both" else [MODES[args.mode]]
    results: list[Result] = []
    work = Path(tempfile.mkdtemp(prefix="dralloc-robustness-"))
    for mode in modes:
        try:
            if args.state_dir:
                kubeconfig = args.state_dir / "kubeconfig"
                from robustness.cluster import find_binaries

                cluster = Cluster(kubeconfig, find_binaries(), args.state_dir, mode)
            else:
                cluster = Cluster.up(
                    mode, work / f"testbed-{mode.name}", workload_api=args.pod_groups
                )
        except Unavailable as exc:
            print(f"robustness: {mode.name}: cannot run: {exc}", file=sys.stderr)
            return 2
        try:
            for seed in args.seeds:
                options = Options(
                    mode=mode, seed=seed, duration_s=args.duration, rate=args.rate,
                    faults=args.faults, fault_count=args.fault_count, nodes=args.nodes,
                    devices_per_node=args.devices_per_node, scheduler_pods=args.scheduler_pods,
                    gate=args.gate, policy=args.policy, pod_groups=args.pod_groups,
                    fencing=args.fencing, extended_pods=args.extended_pods,
                    preemption=args.preemption, settle_s=args.settle,
                )  # fmt: skip
                print(
                    f"robustness: {mode.name} seed {seed}: {args.duration:.0f} s of traffic ...",
                    flush=True,
                )
                result = asyncio.run(Run(cluster, options, work / f"{mode.name}-{seed}").execute())
                results.append(result)
                print(result.summary(), flush=True)
                for violation in result.report.certain[:10]:
                    print(
                        f"  around {violation.rule} {violation.subject}:\n{explain(violation, result.history)}"
                    )
        finally:
            cluster.down()
    write_report(results, args.out, rerun_command(sys.argv[1:] if argv is None else argv))
    print(f"robustness: report in {args.out.with_suffix('.md')} (operator logs under {work})")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
