"""Seeded faults, fired at random times while the traffic runs.

A fault is a blocking action on the testbed or the operators (it runs in a thread, so the
traffic and the recorder go on around it) that returns what it did, for the report. The
schedule (which fault, when) comes from the run's seed, so a seed reproduces it.

- ``operator-kill``: SIGKILL the operator; a new one starts at once, as a Deployment's
  kubelet would, and takes the Lease when it expires. Writes in flight are cut.
- ``apiserver-restart``: kube-apiserver stopped for 1-3 s and started again; every watch
  ends, and clients resume or relist.
- ``compact-and-restart``: etcd compacted to its current revision, then kube-apiserver
  restarted: a client whose watch was behind gets 410 and must relist.
- ``etcd-compact``: compaction alone (kube-apiserver does it every 5 minutes).
- ``scheduler-restart``: kube-scheduler stopped for 1-2 s and started again.
- ``second-operator``: a second operator on another Lease (a laptop's ``kopf run`` beside the
  in-cluster one) runs for 5-15 s, then is killed. Both believe they lead.
- ``proxy-cut``: every connection of the operators to the API server cut at once (``proxy``).
- ``lease-lost``: the API server unreachable from the operators only, for 8-14 s (longer than
  their Lease's 8 s): they stand down, and lead again once it is back.
- ``lose-answers``: for 0.5-3 s the operators' requests reach the API server but their
  answers are lost (their connections cut): writes that landed look failed.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from robustness.cluster import Cluster, Operator
from robustness.proxy import Proxy


@dataclass(frozen=True)
class Fired:
    at: float
    """Seconds since the traffic started."""
    name: str
    what: str


class Faults:
    def __init__(
        self,
        cluster: Cluster,
        operators: Callable[[], list[Operator]],
        rng: random.Random,
        proxy: Proxy | None = None,
        start_rogue: Callable[[], Operator] | None = None,
    ):
        self.cluster = cluster
        self.proxy = proxy
        self.start_rogue = start_rogue
        """Starts an operator on a Lease of its own (the second-operator fault)."""
        self.operators = operators
        """The live operators (the run restarts those that exit)."""
        self.rng = rng

    def operator_kill(self) -> str:
        live = [o for o in self.operators() if o.alive()]
        if not live:
            return "no operator alive"
        victim = self.rng.choice(live)
        victim.kill()
        return f"killed {victim.identity}"

    def apiserver_restart(self) -> str:
        down = self.rng.uniform(1, 3)
        self.cluster.restart("kube-apiserver", down, self.cluster.ready)
        return f"down {down:.1f} s"

    def compact_and_restart(self) -> str:
        revision = self.cluster.etcd_compact()
        down = self.rng.uniform(1, 2)
        self.cluster.restart("kube-apiserver", down, self.cluster.ready)
        return f"compacted at {revision}, down {down:.1f} s"

    def etcd_compact(self) -> str:
        return f"compacted at {self.cluster.etcd_compact()}"

    def scheduler_restart(self) -> str:
        down = self.rng.uniform(1, 2)
        self.cluster.restart("kube-scheduler", down)
        return f"down {down:.1f} s"

    def second_operator(self) -> str:
        if self.start_rogue is None:
            return "no way to start one"
        seconds = self.rng.uniform(5, 15)
        rogue = self.start_rogue()
        threading.Event().wait(seconds)
        rogue.kill()
        return f"{rogue.identity} on Lease {rogue.lease} for {seconds:.1f} s"

    def proxy_cut(self) -> str:
        if self.proxy is None:
            return "no proxy"
        return f"cut {self.proxy.cut()} connections"

    def lease_lost(self) -> str:
        if self.proxy is None:
            return "no proxy"
        seconds = self.rng.uniform(8, 14)
        cut = self.proxy.partition(seconds)
        return f"operators cut off for {seconds:.1f} s ({cut} connections cut)"

    def lose_answers(self) -> str:
        if self.proxy is None:
            return "no proxy"
        seconds = self.rng.uniform(0.5, 3)
        lost = self.proxy.lose_answers(seconds)
        return f"{lost} requests lost their answers in {seconds:.1f} s"


FAULTS: Final = {
    "operator-kill": Faults.operator_kill,
    "apiserver-restart": Faults.apiserver_restart,
    "compact-and-restart": Faults.compact_and_restart,
    "etcd-compact": Faults.etcd_compact,
    "scheduler-restart": Faults.scheduler_restart,
    "second-operator": Faults.second_operator,
    "proxy-cut": Faults.proxy_cut,
    "lose-answers": Faults.lose_answers,
    "lease-lost": Faults.lease_lost,
}


def schedule(
    rng: random.Random, names: list[str], count: int, window: float
) -> list[tuple[float, str]]:
    """``count`` faults drawn from ``names``, at sorted random times in the first 90% of
    ``window`` seconds (so the last one has time to take effect before the traffic stops)."""
    if not names:
        return []
    return sorted((rng.uniform(0.05, 0.9) * window, rng.choice(names)) for _ in range(count))
