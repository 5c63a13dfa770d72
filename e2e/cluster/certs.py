"""Throw-away PKI for one local cluster: CA, apiserver serving cert, client certs, SA keys.

Every component authenticates with its own client certificate whose subject is the identity the
apiserver's bootstrap RBAC expects (system:kube-controller-manager, system:kube-scheduler), so RBAC
behaves as in a kubeadm cluster; only the admin (tests, kubectl, KWOK) is in system:masters.
ECDSA P-256 keys keep generation instant; Kubernetes accepts them everywhere, including ES256
service-account tokens.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
# Backdating tolerates small clock differences between the test process and the components.
BACKDATE = datetime.timedelta(hours=1)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    """Paths of all generated credentials (PEM files in one directory)."""

    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    controller_manager: KeyPair
    scheduler: KeyPair
    service_account_key: Path
    service_account_pub: Path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
    )


def _issue(
    directory: Path,
    stem: str,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName] | None = None,
) -> KeyPair:
    key = _new_key()
    builder = (
        _builder(subject, ca_name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(pair.key, key)
    return pair


def generate_pki(directory: Path, service_ip: str) -> Pki:
    """Write a complete PKI into ``directory``.

    ``service_ip`` is the first IP of the service CIDR (the ``kubernetes`` Service), which
    in-cluster clients would dial; it is in the serving cert so such clients could verify it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _new_key()
    ca_name = _name("kube-queue-e2e-ca")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca = KeyPair(directory / "ca.crt", directory / "ca.key")
    ca.cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(ca.key, ca_key)

    server_sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address(service_ip)),
        *(
            x509.DNSName(name)
            for name in (
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            )
        ),
    ]
    server, client = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
    sa_key = _new_key()
    sa_key_path, sa_pub_path = directory / "sa.key", directory / "sa.pub"
    _write_key(sa_key_path, sa_key)
    sa_pub_path.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return Pki(
        ca=ca,
        apiserver=_issue(
            directory, "apiserver", ca_key, ca_name, _name("kube-apiserver"), server, server_sans
        ),
        admin=_issue(
            directory,
            "admin",
            ca_key,
            ca_name,
            _name("kube-queue-e2e-admin", "system:masters"),
            client,
        ),
        controller_manager=_issue(
            directory,
            "controller-manager",
            ca_key,
            ca_name,
            _name("system:kube-controller-manager"),
            client,
        ),
        scheduler=_issue(
            directory, "scheduler", ca_key, ca_name, _name("system:kube-scheduler"), client
        ),
        service_account_key=sa_key_path,
        service_account_pub=sa_pub_path,
    )
