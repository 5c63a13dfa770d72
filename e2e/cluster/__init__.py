"""A local Kubernetes control plane for the e2e tests, built from Go modules, run without Docker.

``python -m e2e.cluster build`` builds the binaries; ``python -m e2e.cluster up`` runs a cluster
in the foreground. From Python: ``with LocalCluster() as cluster: ...``.
"""

from e2e.cluster.build import Binaries, binary_paths, ensure_binaries
from e2e.cluster.nodes import NodeSpec, Taint, parse_node_specs
from e2e.cluster.runner import LocalCluster, start_kwok

__all__ = [
    "Binaries",
    "LocalCluster",
    "NodeSpec",
    "Taint",
    "binary_paths",
    "ensure_binaries",
    "parse_node_specs",
    "start_kwok",
]
