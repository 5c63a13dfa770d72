"""Serve kube-queue's webhook to the local apiserver: a throwaway CA and serving cert for
127.0.0.1, and the chart's MutatingWebhookConfiguration pointed at the controller's host port."""

from __future__ import annotations

import base64
import datetime
import ipaddress
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def write_serving_cert(directory: Path) -> bytes:
    """tls.crt/tls.key for 127.0.0.1 in ``directory``; returns the CA cert (PEM) to trust."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-queue-webhook-e2e-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    (directory / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "tls.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca.public_bytes(serialization.Encoding.PEM)


def local_webhook_configuration(
    rendered: dict[str, Any], name: str, port: int, ca_pem: bytes
) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration, served at https://127.0.0.1:<port>."""
    config = {**rendered, "metadata": {"name": name}}
    webhooks = []
    for hook in rendered["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        webhooks.append(
            {
                **hook,
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}{path}",
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
            }
        )
    config["webhooks"] = webhooks
    return config


def pod_gate_configuration(
    rendered: list[dict[str, Any]], name: str, port: int, ca_pem: bytes, namespace: str | None
) -> dict[str, Any]:
    """The chart's pod-gate webhooks (pinning), served at https://127.0.0.1:<port>, for pods of
    ``namespace`` only (other tests' pods must not depend on this test's controller), or as
    the chart scopes them (None)."""
    [config] = [m for m in rendered if m["kind"] == "MutatingWebhookConfiguration"]
    local = local_webhook_configuration(config, name, port, ca_pem)
    hooks = [h for h in local["webhooks"] if h["clientConfig"]["url"].endswith("/mutate/pod-gate")]
    if namespace is not None:
        only = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        hooks = [{**hook, "namespaceSelector": only} for hook in hooks]
    local["webhooks"] = hooks
    return local
