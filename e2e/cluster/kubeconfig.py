"""Write kubeconfig files that embed their certificates, so one file is all a client needs."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from e2e.cluster.certs import KeyPair

CONTEXT = "kube-queue-e2e"


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, server: str, ca_cert: Path, client: KeyPair, user: str) -> Path:
    """Write a single-context kubeconfig for ``client`` talking to ``server``.

    JSON is valid YAML, so kubectl, client-go and kubernetes_asyncio all read it.
    """
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(client.cert),
                    "client-key-data": _b64(client.key),
                },
            }
        ],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user}}],
        "current-context": CONTEXT,
        "preferences": {},
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path
