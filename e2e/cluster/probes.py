"""Health probes over plain stdlib HTTP(S): they must work before any client library is set up."""

from __future__ import annotations

import http.client
import ssl
import urllib.error
import urllib.request
from pathlib import Path


def client_tls(ca_cert: Path, client_cert: Path, client_key: Path) -> ssl.SSLContext:
    """TLS context that verifies the apiserver and presents a client certificate."""
    context = ssl.create_default_context(cafile=str(ca_cert))
    context.load_cert_chain(str(client_cert), str(client_key))
    return context


def self_signed_tls() -> ssl.SSLContext:
    """TLS context for the health ports of controller-manager and scheduler.

    They serve a self-signed certificate generated at start-up, and /healthz is public, so there is
    nothing to verify against.
    """
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def http_status(url: str, tls: ssl.SSLContext | None = None, timeout_s: float = 2.0) -> int:
    """HTTP status of a GET, or 0 if nothing answered (refused, reset, timeout)."""
    try:
        with urllib.request.urlopen(url, context=tls, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, http.client.HTTPException, OSError):
        return 0


def http_ok(url: str, tls: ssl.SSLContext | None = None) -> bool:
    return http_status(url, tls) == 200
