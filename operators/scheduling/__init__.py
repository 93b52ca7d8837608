"""What kube-scheduler checks besides devices, so dralloc pins pods only where they will run.

Pure like the allocator (no I/O, no kopf): :mod:`model` reads pods and nodes,
:mod:`resources` does the request arithmetic, :mod:`usage` keeps per-node totals from pod
events, and :mod:`filters` gives per-node verdicts in the scheduler's words. The operator's
allocation loop and the toolkit's simulated cluster both use it, so `dralloc simulate`
answers "does it fit" the way the cluster will.
"""
