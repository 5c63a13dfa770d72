"""The mutating admission webhook server (HTTPS, AdmissionReview v1).

Served by every replica, leader or not, so creates do not depend on which replica leads. Paths:
``/mutate/native-suspend``, ``/mutate/auto-queue`` and ``/mutate/pod-gate`` (see mutations.py;
the last answers "no change" when pinning is off, so a configuration left behind does no harm).
A request we cannot understand is allowed unchanged with a warning: the webhook must never be
the reason a valid object cannot be created, whatever the configured failurePolicy says about
outages.
"""

from __future__ import annotations

import base64
import functools
import json
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import structlog
from aiohttp import web

from kubequeue.webhook.mutations import JsonPatch, auto_queue, native_suspend, pod_gate

__all__ = ["WebhookServer"]

log = structlog.get_logger(__name__)

Mutator = Callable[[str, dict[str, Any]], JsonPatch]
_MUTATORS: dict[str, Mutator] = {
    "native-suspend": native_suspend,
    "auto-queue": auto_queue,
    "pod-gate": pod_gate,
}
# Mutators whose change is worth telling the creator about (as an API warning).
_HELD = "kube-queue: created suspended; kube-queue admits it when the cluster has room"
_WARNINGS = {"native-suspend": _HELD, "auto-queue": _HELD}


def _unchanged(kind: str, obj: dict[str, Any]) -> JsonPatch:
    return []


def review_response(
    review: dict[str, Any], mutator: Mutator, warning: str | None = None
) -> dict[str, Any]:
    request = review.get("request")
    if not isinstance(request, dict):
        request = {}
    uid = request.get("uid")
    response: dict[str, Any] = {"uid": uid if isinstance(uid, str) else "", "allowed": True}
    obj = request.get("object")
    group_kind = request.get("kind")
    kind = group_kind.get("kind") if isinstance(group_kind, dict) else ""
    kind = kind if isinstance(kind, str) else ""
    if request.get("operation") == "CREATE" and isinstance(obj, dict):
        meta = obj.get("metadata")
        namespace = request.get("namespace")
        if isinstance(meta, dict) and not meta.get("namespace") and isinstance(namespace, str):
            # A created object may not carry its namespace yet; the request does (the pod
            # webhook finds the pod's job by it).
            obj = {**obj, "metadata": {**meta, "namespace": namespace}}
        ops = mutator(kind, obj)
        if ops:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
            if warning is not None:
                response["warnings"] = [warning]
            meta = obj.get("metadata") or {}
            # Jobs are few and each mutation is news; every pod of every admitted job is not.
            (log.info if warning is not None else log.debug)(
                "webhook.mutated",
                kind=kind,
                namespace=request.get("namespace"),
                name=meta.get("name") or meta.get("generateName"),
                ops=len(ops),
            )
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class WebhookServer:
    def __init__(
        self,
        host: str,
        port: int,
        cert_dir: Path,
        *,
        gate_pods: bool = True,
        pin_pod: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.cert_dir = cert_dir
        self.gate_pods = gate_pods
        # The leader's plan, asked for the node of a new pod (None: gate it; see mutations.py).
        self.pin_pod = pin_pod

    def _ssl(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_dir / "tls.crt", self.cert_dir / "tls.key")
        return context

    async def run(self) -> None:
        app = web.Application(client_max_size=8 * 2**20)
        for name, mutator in _MUTATORS.items():
            dry = None
            if name == "pod-gate" and not self.gate_pods:
                mutator = _unchanged
            elif name == "pod-gate" and self.pin_pod is not None:
                # A dry run must not take a slot: it gets the gate, as from a standby.
                mutator, dry = functools.partial(pod_gate, pin=self.pin_pod), pod_gate
            handler = self._handler(mutator, _WARNINGS.get(name), dry)
            app.router.add_post(f"/mutate/{name}", handler)
        # After refusing a body over client_max_size, aiohttp keeps reading and discarding the
        # rest for lingering_time (10 s by default) so the client can read the 413; meanwhile
        # the connection is held and shutdown waits for it. The API server never sends a review
        # that large (its own request limit is 3 MiB), so only a hostile or broken client is
        # lingered for, and a second is enough for it to read the answer.
        runner = web.AppRunner(app, access_log=None, lingering_time=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, ssl_context=self._ssl())
        await site.start()
        log.info("webhook.serving", port=self.port, cert_dir=str(self.cert_dir))
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await runner.cleanup()

    def _handler(
        self, mutator: Mutator, warning: str | None, dry: Mutator | None = None
    ) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.Response:
            try:
                review = await request.json()
                if not isinstance(review, dict):
                    raise TypeError(f"an AdmissionReview is an object, not {type(review).__name__}")
                request_part = review.get("request")
                if (
                    dry is not None
                    and isinstance(request_part, dict)
                    and request_part.get("dryRun")
                ):
                    return web.json_response(review_response(review, dry, warning))
                return web.json_response(review_response(review, mutator, warning))
            except web.HTTPException:
                raise  # e.g. 413: the body is over client_max_size
            except Exception as exc:
                # (RecursionError from deep nesting, UnicodeDecodeError, ValueError, ...)
                log.warning("webhook.bad_review", error=f"{type(exc).__name__}: {exc}"[:300])
                return web.json_response(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": {
                            "uid": "",
                            "allowed": True,
                            "warnings": [
                                f"kube-queue: unreadable AdmissionReview ({type(exc).__name__})"
                            ],
                        },
                    }
                )

        return handle
