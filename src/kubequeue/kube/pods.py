"""Pods read on demand (not watched): a namespace's pods, to tell a user why a job's pods never
started. Bounded: at most ``limit`` pods are read."""

from __future__ import annotations

import msgspec

from kubequeue.kube.client import KubeClient
from kubequeue.objects import ObjectList, PodDiagnosis

__all__ = ["list_pods"]

_decoder = msgspec.json.Decoder(ObjectList[PodDiagnosis])


async def list_pods(client: KubeClient, namespace: str, limit: int = 2000) -> list[PodDiagnosis]:
    out: list[PodDiagnosis] = []
    token = ""
    while len(out) < limit:
        query = [("limit", str(min(500, limit - len(out))))]
        if token:
            query.append(("continue", token))
        page = _decoder.decode(
            await client.request("GET", f"/api/v1/namespaces/{namespace}/pods", query=query)
        )
        out.extend(page.items)
        token = page.metadata.continue_
        if not token:
            break
    return out
