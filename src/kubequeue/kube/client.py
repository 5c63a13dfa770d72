"""The only code that speaks HTTP to the API server.

Built on kubernetes-asyncio's ApiClient for what it does well (kubeconfig and in-cluster auth,
token refresh, TLS), but every call is raw (``_preload_content=False``): we choose the path,
headers and timeouts, read bytes, and decode them ourselves. Generated models would cost ~5x the
CPU on the watch hot path and hide the HTTP status (36.x does not raise for raw responses).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import msgspec
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

__all__ = ["ApiError", "KubeClient", "connect"]

_JSON = "application/json"
_MERGE_PATCH = "application/merge-patch+json"
# Ordinary requests: connect fast, never hang a decision on a silent socket.
DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=30, sock_connect=10)


class _Status(msgspec.Struct):
    reason: str = ""
    message: str = ""
    code: int = 0


class ApiError(Exception):
    """A non-2xx answer from the API server, with its Status reason and message."""

    def __init__(self, status: int, reason: str, message: str, path: str) -> None:
        super().__init__(f"{status} {reason}: {message} ({path})")
        self.status = status
        self.reason = reason
        self.message = message
        self.path = path

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def gone(self) -> bool:
        return self.status == 410


def _error(status: int, body: bytes, path: str) -> ApiError:
    try:
        st = msgspec.json.decode(body, type=_Status)
        return ApiError(status, st.reason or str(status), st.message or body[:200].decode(), path)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return ApiError(status, str(status), body[:200].decode(errors="replace"), path)


class KubeClient:
    def __init__(self, api: Any) -> None:
        self._api = api

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
        content_type: str = _JSON,
        timeout: aiohttp.ClientTimeout = DEFAULT_TIMEOUT,
    ) -> aiohttp.ClientResponse:
        """The raw response, or ApiError: 36.x returns non-2xx responses unraised in raw mode,
        a later release may raise ApiException again; both end up as ApiError."""
        try:
            resp: aiohttp.ClientResponse = await self._api.call_api(
                path,
                method,
                query_params=list(query),
                header_params={"Accept": _JSON, "Content-Type": content_type},
                body=dict(body) if body is not None else None,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
        except k8s_client.ApiException as exc:
            raise ApiError(exc.status or 0, str(exc.reason), str(exc.body), path) from None
        return resp

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Mapping[str, Any] | None = None,
        content_type: str = _JSON,
        timeout: aiohttp.ClientTimeout = DEFAULT_TIMEOUT,
    ) -> bytes:
        """One request; returns the body, raises ApiError on any non-2xx status."""
        resp = await self._call(
            method, path, query=query, body=body, content_type=content_type, timeout=timeout
        )
        async with resp:
            data = await resp.read()
            if not 200 <= resp.status < 300:
                raise _error(resp.status, data, path)
            return data

    async def get(self, path: str, query: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
        result: dict[str, Any] = msgspec.json.decode(await self.request("GET", path, query=query))
        return result

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = msgspec.json.decode(await self.request("POST", path, body=body))
        return result

    async def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = msgspec.json.decode(await self.request("PUT", path, body=body))
        return result

    async def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """A JSON merge patch; ``metadata.resourceVersion`` in the body is a precondition."""
        data = await self.request("PATCH", path, body=body, content_type=_MERGE_PATCH)
        result: dict[str, Any] = msgspec.json.decode(data)
        return result

    @asynccontextmanager
    async def stream(
        self, path: str, query: Sequence[tuple[str, str]], timeout: aiohttp.ClientTimeout
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A streaming GET (watch); raises ApiError before yielding if the status is not 2xx."""
        resp = await self._call("GET", path, query=query, timeout=timeout)
        async with resp:
            if not 200 <= resp.status < 300:
                raise _error(resp.status, await resp.read(), path)
            yield resp


@asynccontextmanager
async def connect(
    kubeconfig: str | None = None, context: str | None = None
) -> AsyncIterator[KubeClient]:
    """A client from an explicit kubeconfig, else $KUBECONFIG / ~/.kube/config, else in-cluster."""
    cfg = k8s_client.Configuration()
    in_cluster = "KUBERNETES_SERVICE_HOST" in os.environ
    if kubeconfig or not in_cluster:
        await k8s_config.load_kube_config(
            config_file=kubeconfig or os.environ.get("KUBECONFIG") or None,
            context=context,
            client_configuration=cfg,
            persist_config=False,
        )
    else:
        k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    # One connection per watch plus writers; the default pool of 100 is plenty, but say so.
    cfg.connection_pool_maxsize = 64
    async with k8s_client.ApiClient(cfg) as api:
        yield KubeClient(api)
