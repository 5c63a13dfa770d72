"""kube-queue: admits suspended Kubernetes jobs when real per-node capacity fits them."""

__version__ = "0.1.0"
__all__ = ["__version__"]
