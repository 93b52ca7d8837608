"""The ``dralloc`` command line: ``run`` (the operator), ``version``, ``simulate``, ``explain``,
``check`` and ``webhook-cert``.

``simulate`` and ``explain`` run the operator's allocator offline on a snapshot; ``check``
verifies the DRA invariants (no device allocated twice, capacities and counters respected,
reservations pointing at live pods, finalizers held) on one. A snapshot is YAML or JSON files
(``kubectl get ... -o yaml`` output, either API group) or, with ``--live``, the current
cluster, read with list calls only. ``webhook-cert`` manages the webhook's certificate.
Exit status: 0 success (the scenario fits, no violation), 1 the scenario does not fit or an
invariant is broken, 2 bad usage, a bad snapshot (the message names the file, the object
and the field) or a cluster that cannot be read.
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from operators import __version__
from operators.groups import API_GROUPS

if TYPE_CHECKING:  # the commands import what they need when they run (a quick --help)
    from operators.toolkit.simulate import AddQuota

EXIT_OK = 0
EXIT_DOES_NOT_FIT = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dralloc",
        description="Kubernetes DRA with structured parameters: the operator and its toolkit.",
        epilog="Run 'dralloc COMMAND --help' for the options of a command.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="run the operator (same as python -m operators)",
        description="Run the operator. Every flag of 'python -m operators --help' is accepted.",
        add_help=False,
    )
    run.add_argument("operator_args", nargs=argparse.REMAINDER)

    version = commands.add_parser("version", help="print the dralloc version")
    version.add_argument("--short", action="store_true", help="only the version number")

    simulate = commands.add_parser(
        "simulate",
        help="what fits where if pods are added or a device is tainted",
        description=(
            "Settle a snapshot (pending pods get placed), then apply scenarios in order: "
            "--add-pods N with --template (a ResourceClaimTemplate) or --like-pod, or "
            "--add-gang N with --template (all N placed together or none), and/or "
            "--taint-device. Reports placements, evictions and pending pods with reasons; "
            "exits 1 when a pod of the scenario finds no node."
        ),
    )
    _snapshot_arguments(simulate)
    _max_gang_size_argument(simulate)
    simulate.add_argument("--add-pods", type=int, metavar="N", help="number of pods to add")
    simulate.add_argument(
        "--add-gang", type=int, metavar="N",
        help="add a gang of N pods (with --template) that is placed all together or not at all",
    )  # fmt: skip
    simulate.add_argument(
        "--gang-size", type=int, metavar="M",
        help="with --add-gang: members that must be placed at once (default: N)",
    )  # fmt: skip
    simulate.add_argument(
        "--gang-topology", metavar="LABEL|attribute:DOMAIN/NAME",
        help=(
            "with --add-gang: every member on nodes with one value of this node label, or "
            "every member's devices with one value of this device attribute"
        ),
    )  # fmt: skip
    simulate.add_argument(
        "--template", metavar="[NS/]NAME", help="ResourceClaimTemplate of each added pod"
    )
    simulate.add_argument(
        "--like-pod", metavar="[NS/]NAME", help="copy the claims of this pod for each added pod"
    )
    simulate.add_argument(
        "--taint-device", metavar="DRIVER/POOL/DEVICE", action="append", default=[],
        help="taint this device (repeatable)",
    )  # fmt: skip
    simulate.add_argument(
        "--taint-effect", choices=["NoExecute", "NoSchedule"], default="NoExecute"
    )
    simulate.add_argument("--taint-key", default="dralloc.dev/simulated")
    simulate.add_argument(
        "--device-policy", choices=["first-fit", "pack"], default="first-fit",
        help="device choice on a node, as the operator's --device-policy",
    )  # fmt: skip
    simulate.add_argument(
        "--add-quota", metavar="FILE", action="append", default=[],
        help="a DeviceQuota manifest to add before the other scenarios (repeatable)",
    )  # fmt: skip
    simulate.add_argument(
        "--preemption", action="store_true",
        help="preempt lower-priority pods for a pod that fits nowhere, as the operator's "
        "--preemption (without it a pending pod is told what it would preempt)",
    )  # fmt: skip
    simulate.add_argument(
        "--progress", choices=["auto", "always", "never"], default="auto",
        help="progress bar on stderr (auto: on a terminal, for runs over half a second)",
    )  # fmt: skip

    explain = commands.add_parser(
        "explain",
        help="why a pod or claim is (not) allocated, node by node",
        description="Per node and per request, what the allocator says about a pod or claim.",
    )
    explain.add_argument("subject", metavar="pod/NAME|resourceclaim/NAME")
    _snapshot_arguments(explain)
    _max_gang_size_argument(explain)
    _add_check_parser(commands)

    cert = commands.add_parser(
        "webhook-cert",
        help="create or renew the webhook's shared certificate and patch the caBundle",
        description=(
            "Ensure the Secret with the webhook's serving certificate exists and is valid, "
            "and that the MutatingWebhookConfiguration trusts it. Run by the "
            "dralloc-webhook-cert Job of manifests/base; safe to run again (renews only "
            "when needed)."
        ),
    )
    cert.add_argument("--namespace", default="dralloc-system")
    cert.add_argument("--secret", default="dralloc-webhook-tls")
    cert.add_argument("--service", default="dralloc-webhook")
    cert.add_argument("--webhook-configuration", default="dralloc")
    cert.add_argument("--renew-days", type=int, default=30, help="renew when fewer days are left")
    cert.add_argument("--kubeconfig", default="", help="default: $KUBECONFIG or in-cluster")
    return parser


def _snapshot_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_argument_group("snapshot (one of)")
    source.add_argument(
        "-f", "--filename", action="append", default=[], metavar="PATH",
        help="YAML/JSON file or directory (repeatable); kind: List is accepted",
    )  # fmt: skip
    source.add_argument(
        "--live", action="store_true", help="read the current cluster (read-only: lists only)"
    )
    source.add_argument("--kubeconfig", help="kubeconfig for --live (default: $KUBECONFIG)")
    source.add_argument("--context", help="kubeconfig context for --live")
    source.add_argument(
        "--api-group", choices=list(API_GROUPS),
        help="DRA API group to read with --live (default: dralloc's if installed)",
    )  # fmt: skip
    parser.add_argument("-n", "--namespace", default="default", help="namespace of names given")
    parser.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")
    parser.add_argument(
        "--feature-gates", default="", metavar="Name=bool,...",
        help="allocator feature gates (upstream names), e.g. DRAPrioritizedList=false",
    )  # fmt: skip


def _max_gang_size_argument(parser: argparse.ArgumentParser) -> None:
    from operators.api.annotations import GANG_SIZE_MAX

    parser.add_argument(
        "--max-gang-size", type=int, default=GANG_SIZE_MAX, metavar="N",
        help="the operator's max_gang_size (DRALLOC_MAX_GANG_SIZE): a larger gang is "
        f"refused on each member, as the operator refuses it (default {GANG_SIZE_MAX})",
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["run"]:
        return _run(args_list[1:])
    args = build_parser().parse_args(args_list)
    if args.command == "version":
        return _version(args.short)
    from operators.toolkit.usererrors import ToolkitError

    try:
        if args.command == "simulate":
            return _simulate(args)
        if args.command == "check":
            return _check(args)
        if args.command == "webhook-cert":
            return _webhook_cert(args)
        return _explain(args)
    except ToolkitError as exc:
        print(f"dralloc {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `dralloc ... | head`: the reader left; not an error of ours
        sys.stderr.close()
        return EXIT_OK


def _run(operator_args: list[str]) -> int:
    from operators import process

    process.main(operator_args)
    return EXIT_OK


def _version(short: bool) -> int:
    if short:
        print(__version__)
        return EXIT_OK
    from importlib.metadata import PackageNotFoundError, version

    try:
        kopf_version = version("kopf")
    except PackageNotFoundError:
        kopf_version = "not installed"
    print(
        f"dralloc {__version__} (python {platform.python_version()}, kopf {kopf_version}, "
        "API resource.dralloc.dev/v1, reads resource.k8s.io/v1)"
    )
    return EXIT_OK


def _load(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from operators.toolkit.live import read_cluster
    from operators.toolkit.snapshot import build_snapshot
    from operators.toolkit.sources import read_objects
    from operators.toolkit.usererrors import ToolkitError

    if bool(args.filename) == bool(args.live):
        raise ToolkitError("give a snapshot with -f PATH (repeatable) or --live, not both")
    if args.live:
        objects = read_cluster(args.kubeconfig, args.context, args.api_group)
    else:
        objects = read_objects(args.filename)
    if not args.live:
        return build_snapshot(objects)

    def skip(error: ToolkitError) -> None:
        print(f"dralloc: warning: left out {error}", file=sys.stderr)

    return build_snapshot(objects, on_invalid=skip)


def _features(text: str):  # type: ignore[no-untyped-def]
    from operators.allocator.features import GATE_TO_FIELD, Features
    from operators.settings import FeatureGates, SettingsError
    from operators.toolkit.usererrors import ToolkitError

    try:
        gates = FeatureGates.parse(text)
    except SettingsError as exc:
        raise ToolkitError(str(exc)) from exc
    # The settings know every gate the operator reads; the allocator only its own subset.
    return Features.from_gates({k: v for k, v in gates.enabled.items() if k in GATE_TO_FIELD})


def _split_name(text: str, namespace: str) -> tuple[str, str]:
    space, sep, name = text.rpartition("/")
    return (space, name) if sep else (namespace, text)


def _simulate(args: argparse.Namespace) -> int:
    from operators.api.annotations import AnnotationError, GangTopology
    from operators.toolkit import render
    from operators.toolkit.progress import Progress
    from operators.toolkit.simulate import (
        AddGang,
        AddPods,
        Scenario,
        TaintDevice,
        simulate,
        work_size,
    )
    from operators.toolkit.usererrors import ToolkitError

    scenarios: list[Scenario] = [_quota_scenario(path, args.namespace) for path in args.add_quota]
    if args.add_pods is not None:
        if bool(args.template) == bool(args.like_pod):
            raise ToolkitError("--add-pods needs exactly one of --template or --like-pod")
        namespace, name = _split_name(args.template or args.like_pod, args.namespace)
        if args.template:
            scenarios.append(AddPods(args.add_pods, namespace, template=name))
        else:
            scenarios.append(AddPods(args.add_pods, namespace, like_pod=name))
    elif args.add_gang is not None:
        if not args.template or args.like_pod:
            raise ToolkitError("--add-gang needs --template (and no --like-pod)")
        namespace, name = _split_name(args.template, args.namespace)
        topology = None
        if args.gang_topology is not None:
            try:
                topology = GangTopology.parse(args.gang_topology)
            except AnnotationError as error:
                raise ToolkitError(f"--gang-topology: {'; '.join(error.problems)}") from None
        scenarios.append(
            AddGang(args.add_gang, namespace, name, size=args.gang_size, topology=topology)
        )
    elif args.template or args.like_pod:
        raise ToolkitError("--template and --like-pod go with --add-pods N or --add-gang N")
    if (args.gang_size is not None or args.gang_topology is not None) and args.add_gang is None:
        raise ToolkitError("--gang-size and --gang-topology go with --add-gang N")
    for device in args.taint_device:
        scenarios.append(TaintDevice(device, effect=args.taint_effect, key=args.taint_key))
    features = _features(args.feature_gates)
    snapshot = _load(args)
    mode = "never" if args.progress == "never" else args.progress
    with Progress(work_size(snapshot, scenarios), "simulating", mode=mode) as bar:
        report = simulate(
            snapshot,
            scenarios,
            features=features,
            device_policy=args.device_policy,
            progress=bar.advance,
            max_gang_size=args.max_gang_size,
            preemption=args.preemption,
        )
    print(render.simulation(report, args.output))
    return EXIT_OK if report.fits else EXIT_DOES_NOT_FIT


def _quota_scenario(path: str, namespace: str) -> AddQuota:
    """The DeviceQuota in a manifest file, as a simulate scenario (validated like the API's)."""
    from pathlib import Path

    import yaml

    from operators.api import DeviceQuota, InvalidObjectError, parse_object
    from operators.toolkit.simulate import AddQuota
    from operators.toolkit.usererrors import ToolkitError

    try:
        body = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ToolkitError(f"--add-quota {path}: {error}") from None
    if not isinstance(body, dict) or body.get("kind") != "DeviceQuota":
        raise ToolkitError(f"--add-quota {path}: expected one DeviceQuota manifest")
    body.setdefault("metadata", {}).setdefault("namespace", namespace)
    try:
        model = parse_object(body)
    except InvalidObjectError as error:
        raise ToolkitError(f"--add-quota {path}: {error}") from None
    assert isinstance(model, DeviceQuota)
    return AddQuota(model.to_kube())


def _webhook_cert(args: argparse.Namespace) -> int:
    import asyncio

    from operators.toolkit.webhook_cert import run

    outcome = asyncio.run(
        run(
            args.kubeconfig,
            namespace=args.namespace,
            secret=args.secret,
            service=args.service,
            configuration=args.webhook_configuration,
            renew_days=args.renew_days,
        )
    )
    print(outcome.describe())
    return EXIT_OK


def _explain(args: argparse.Namespace) -> int:
    from operators.toolkit import render
    from operators.toolkit.explain import explain

    namespace, name = args.namespace, args.subject
    kind, _, rest = name.partition("/")
    if "/" in rest:  # pod/NS/NAME
        namespace, rest = rest.split("/", 1)
    features = _features(args.feature_gates)
    snapshot = _load(args)
    result = explain(
        snapshot, f"{kind}/{rest}", namespace, features=features, max_gang_size=args.max_gang_size
    )
    print(render.explanation(result, args.output))
    return EXIT_OK


# -- dralloc check (invariants; the rules live in operators/toolkit/check.py) ----------------


def _add_check_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from operators.toolkit.check import ALL_RULES, DEFAULT_RULES

    check = commands.add_parser(
        "check",
        help="check the invariants (no device twice, reservations, finalizers, counters)",
        description=(
            "Check DRA invariants on a snapshot or a live cluster (read-only). "
            "Exits 1 listing the violations, 0 when there are none."
        ),
    )
    _snapshot_arguments(check)
    check.add_argument(
        "--rule", action="append", choices=list(ALL_RULES), metavar="RULE",
        help=f"check only this rule (repeatable); default: {', '.join(DEFAULT_RULES)}",
    )  # fmt: skip


def _check(args: argparse.Namespace) -> int:
    from operators.toolkit.check import (
        DEFAULT_RULES,
        SelectorMode,
        check_snapshot,
        render_report,
        tolerant_snapshot,
    )
    from operators.toolkit.live import read_cluster
    from operators.toolkit.sources import read_objects
    from operators.toolkit.usererrors import ToolkitError

    if bool(args.filename) == bool(args.live):
        raise ToolkitError("give a snapshot with -f PATH (repeatable) or --live, not both")
    if args.live:
        objects = read_cluster(args.kubeconfig, args.context, args.api_group)
    else:
        objects = read_objects(args.filename)
    snapshot, unreadable = tolerant_snapshot(objects)
    features = _features(args.feature_gates)
    # Files hold new objects (checked as admission would), a cluster stored ones.
    selectors = SelectorMode(
        stored=bool(args.live),
        list_attributes=features.list_type_attributes,
        consumable_capacity=features.consumable_capacity,
    )
    report = check_snapshot(
        snapshot,
        args.rule or DEFAULT_RULES,
        pods_complete=True if args.live else None,
        unreadable=unreadable,
        selectors=selectors,
    )
    print(render_report(report, args.output))
    return EXIT_OK if report.ok else EXIT_DOES_NOT_FIT


if __name__ == "__main__":
    sys.exit(main())
