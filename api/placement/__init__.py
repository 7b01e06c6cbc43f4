"""Cluster-aware placement of deployments (the resource manager's view of issue 17 item 4).

- :mod:`.payload`: what a worker process is asked: the cluster, the deployments on it, the trigger;
- :mod:`.decide`: what it does (in the worker): place the new deployment against the others' loads,
  then re-plan the others (``planner.replan``) where that raises the cluster's total throughput;
- :mod:`.service`: the server's side: one decision at a time per cluster, recorded atomically;
- :mod:`.views`: deployments and decisions as the API shows them.
"""
