"""Pipeline partitioning for pipeplan: clusters of devices and plans over them.

Public surface::

    from planner import Cluster, ClusterError, Link, load_cluster, builtin_clusters
"""

from planner.cluster import Cluster, ClusterError, Link, builtin_clusters, load_cluster

__all__ = ["Cluster", "ClusterError", "Link", "builtin_clusters", "load_cluster"]
