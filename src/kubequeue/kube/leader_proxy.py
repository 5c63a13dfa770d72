"""Reach the leading replica through the API server, as ``kubectl queue`` does: read the Lease
to find which pod leads, then GET its HTTP endpoint through the pod proxy subresource. The user
needs only a kubeconfig (and RBAC to get the Lease and pods/proxy in the controller's namespace),
no URL and no port-forward."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from kubequeue.kube.client import ApiError, KubeClient

__all__ = ["LeaderNotFound", "get_from_leader", "leader_pod"]


class LeaderNotFound(RuntimeError):
    """No replica holds the Lease (the controller is down, or another namespace/name)."""


async def leader_pod(client: KubeClient, namespace: str, lease: str) -> str:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{lease}"
    try:
        found = await client.get(path)
    except ApiError as exc:
        if exc.not_found:
            raise LeaderNotFound(
                f"no Lease {namespace}/{lease}: is kube-queue installed there? "
                "(--namespace / --lease-name)"
            ) from None
        raise
    holder = str((found.get("spec") or {}).get("holderIdentity") or "")
    if not holder:
        raise LeaderNotFound(f"nobody holds Lease {namespace}/{lease}: is kube-queue running?")
    # The identity is "<pod name>_<random suffix>" (settings.py).
    return holder.rsplit("_", 1)[0]


async def get_from_leader(
    client: KubeClient,
    namespace: str,
    lease: str,
    port: int,
    path: str,
    query: Sequence[tuple[str, str]] = (),
) -> Any:
    pod = await leader_pod(client, namespace, lease)
    proxied = f"/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy{path}"
    try:
        return msgspec.json.decode(await client.request("GET", proxied, query=query))
    except ApiError as exc:
        if exc.not_found:
            # The pod exists (it holds the Lease) but nothing answers at that path.
            raise LeaderNotFound(
                f"the leader {namespace}/{pod} does not serve {path} on port {port}: it may run "
                "with --debug-address off or HOST:PORT (then use kubectl port-forward), or "
                "another --port"
            ) from None
        raise
