"""dralloc's robustness suite: random faults under seeded traffic, the whole history checked.

In the style of etcd's robustness tests: traffic (``traffic``) and faults (``faults``) run
against a real control plane from ``testbed/`` with the operator, while a recorder
(``recorder``) keeps every watch event of claims, pods and quotas with its resourceVersion.
The checker (``checker``) then judges the whole history, revision by revision, against the
rules of docs/design.md "Correctness rules": a device is never held by two claims at any moment,
a bound pod has its devices, a gang is released whole, a quota is never exceeded by an
allocation, and every pod ends bound or explained. ``python -m robustness --help``.

It is a program, not a test: ``tests/e2e/test_robustness.py`` runs a short seeded run of it
in each API mode; long runs are a command with a report, like the benchmarks.
"""
