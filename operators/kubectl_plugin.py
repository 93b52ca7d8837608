"""``kubectl dralloc ...``: the toolkit as a kubectl plugin (the ``kubectl-dralloc`` command).

Why a front of its own: kubectl users type kubectl's flags (``--kubeconfig``, ``--context``,
``-n/--namespace``, ``-A``, ``-o``) and expect the current cluster and the context's namespace,
while ``dralloc`` works on snapshot files by default and its namespace default is
``default``. This module only translates; ``operators.cli`` does the work, so both commands
give the same answers.

- ``explain``, ``simulate`` and ``check`` read the live cluster unless ``-f`` names files;
- ``-n`` defaults to the namespace of the kubeconfig context (as kubectl's does);
- ``-o wide`` is the table; ``-o json|yaml`` as in dralloc;
- ``-A`` is for ``check``, which looks at the whole cluster anyway (its invariants span
  namespaces: a device allocated twice, to claims of two namespaces, is one violation).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from operators import cli

LIVE_COMMANDS = frozenset({"explain", "simulate", "check"})
OUTPUTS = {"wide": "table", "table": "table", "json": "json", "yaml": "yaml"}
USAGE = """usage: kubectl dralloc COMMAND [kubectl flags] [command flags]

commands: explain pod/NAME|resourceclaim/NAME, simulate, check, version
kubectl flags: --kubeconfig PATH, --context NAME, -n/--namespace NS, -A/--all-namespaces,
               -o/--output wide|json|yaml
'kubectl dralloc COMMAND --help' lists the command's own flags (those of 'dralloc COMMAND').
"""


class PluginUsageError(Exception):
    """A flag combination kubectl users could type but that means nothing here."""


def _kubectl_flags() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--kubeconfig")
    parser.add_argument("--context")
    parser.add_argument("-n", "--namespace")
    parser.add_argument("-A", "--all-namespaces", action="store_true")
    parser.add_argument("-o", "--output")
    return parser


def context_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    """The namespace of the context (current-context unless named), as kubectl finds it:
    the first file of ``--kubeconfig``, else of ``$KUBECONFIG``, else ``~/.kube/config``."""
    if kubeconfig:
        paths = [kubeconfig]
    elif os.environ.get("KUBECONFIG"):
        paths = [p for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
    else:
        paths = [str(Path.home() / ".kube" / "config")]
    documents = []
    for path in paths:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(loaded, dict):
            documents.append(loaded)
    if context is None:
        context = next((d["current-context"] for d in documents if d.get("current-context")), None)
    for document in documents:
        for entry in document.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name") == context:
                namespace = (entry.get("context") or {}).get("namespace")
                return str(namespace) if namespace else None
    return None


def translate(argv: Sequence[str]) -> list[str]:
    """kubectl-style arguments -> the equivalent ``dralloc`` arguments."""
    flags, rest = _kubectl_flags().parse_known_args(list(argv))
    if not rest or rest[0].startswith("-"):
        raise PluginUsageError(USAGE)
    command, *args = rest
    if command not in LIVE_COMMANDS:
        if command == "version":
            return [command, *args]
        raise PluginUsageError(f"unknown command {command!r}\n{USAGE}")
    out = [command, *args]
    if "-h" in args or "--help" in args:
        return out
    if not any(a in ("-f", "--filename") or a.startswith("--filename=") for a in args):
        out.append("--live")
        if flags.kubeconfig:
            out.append(f"--kubeconfig={flags.kubeconfig}")
        if flags.context:
            out.append(f"--context={flags.context}")
    if flags.all_namespaces and command != "check":
        raise PluginUsageError(f"-A/--all-namespaces means nothing for {command}: give -n NS")
    if command == "check" and flags.namespace:
        print(
            "kubectl dralloc check: the invariants span namespaces; checking the whole cluster",
            file=sys.stderr,
        )
    elif command != "check":
        namespace = flags.namespace or context_namespace(flags.kubeconfig, flags.context)
        out.append(f"--namespace={namespace or 'default'}")
    if flags.output is not None:
        if flags.output not in OUTPUTS:
            raise PluginUsageError(f"-o {flags.output}: supported are {', '.join(sorted(OUTPUTS))}")
        out.append(f"--output={OUTPUTS[flags.output]}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    try:
        translated = translate(sys.argv[1:] if argv is None else argv)
    except PluginUsageError as exc:
        print(f"kubectl dralloc: {exc}".rstrip(), file=sys.stderr)
        return cli.EXIT_USAGE
    return cli.main(translated)


if __name__ == "__main__":
    sys.exit(main())
