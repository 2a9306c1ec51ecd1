"""Serving certificates of the admission webhooks without cert-manager (``--webhook-tls self-signed``).

Each controller that serves webhooks has a CA of its own, kept in the Secret
``trainer-operator-<controller>-webhook-ca`` of the operator's namespace, which no other controller
may read: a controller that is taken over can forge certificates only for the webhooks it serves
anyway. deploy/components/self-signed-tls creates the Secret empty (so that the controller needs no
right to create Secrets, which cannot be bounded by name) and the first replica to start fills it
(a write that loses the race to another replica reads the winner's). The controller then issues
its serving certificate from it for its Service's DNS names, writes it where
``--webhook-cert-file``/``--webhook-key-file`` say (an emptyDir in the Deployment) and puts the CA
into the ``caBundle`` of the webhook configurations it serves. The serving certificate is re-issued
before it expires; the CA lasts ten years.

The certificate logic is pure (``make_ca``, ``issue``, ``due_for_renewal``); ``SelfSignedTLS``
does the I/O.

Only a controller run with --webhook-tls self-signed imports this module (``process``): the
``cryptography`` package it needs holds 10 MiB of every process that loads it.
"""

import datetime as dt
import ipaddress
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .clock import Clock
from .config import ControllerConfig
from .kube import Kube
from .names import component

log = logging.getLogger("trainerop.webhook_tls")

CA_DAYS = 3650
SERVING_DAYS = 365
RENEW_BEFORE = dt.timedelta(days=30)
CHECK_SECONDS = 60.0  # the CA is put back into a configuration re-applied without it within a minute
BACKDATE = dt.timedelta(minutes=5)  # clocks of the API server and this process may differ a little


@dataclass(frozen=True)
class KeyPair:
    cert: bytes  # PEM
    key: bytes  # PEM


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


KEY_USAGES = (
    "digital_signature",
    "content_commitment",
    "key_encipherment",
    "data_encipherment",
    "key_agreement",
    "key_cert_sign",
    "crl_sign",
    "encipher_only",
    "decipher_only",
)


def key_usage(*allowed: str) -> x509.KeyUsage:
    """A KeyUsage extension that allows only the usages named."""
    return x509.KeyUsage(**{usage: usage in allowed for usage in KEY_USAGES})


def ca_secret_name(controller: str) -> str:
    """The Secret holding one controller's webhook CA (its certificate and private key)."""
    return f"{component(controller)}-webhook-ca"


def make_ca(now: dt.datetime, common_name: str = "trainer-operator-webhook-ca") -> KeyPair:
    """A CA certificate that signs serving certificates only (path length 0)."""
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(key_usage("digital_signature", "key_cert_sign", "crl_sign"), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def issue(ca: KeyPair, names: Sequence[str], now: dt.datetime, days: int = SERVING_DAYS) -> KeyPair:
    """A serving certificate for ``names`` (DNS names or IP addresses) signed by ``ca``."""
    if not names:
        raise ValueError("a serving certificate needs at least one DNS name or address")
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"the private key of the webhook CA {ca_cert.subject.rfc4514_string()} is not an EC key")
    alt: list[x509.GeneralName] = []
    for host in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt.append(x509.DNSName(host))
    key = _key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def due_for_renewal(cert_pem: bytes, now: dt.datetime, before: dt.timedelta = RENEW_BEFORE) -> bool:
    cert = x509.load_pem_x509_certificate(cert_pem)
    return cert.not_valid_after_utc - before <= now


def serving_names(service: str, namespace: str, address: str) -> list[str]:
    """The names the API server may call a webhook by: its Service's, and the listening address
    when it is a specific one (a controller run as a local process, called by URL)."""
    names = [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]
    if address not in ("", "0.0.0.0", "::"):
        names.append(address)
    return names


def stored_ca(where: str, data: dict[str, str]) -> KeyPair | None:
    """The CA held in a Secret's values (None: the Secret is still empty). Half a pair is an error
    a person must clear: the key without its certificate (or the reverse) cannot be mended here."""
    cert, key = data.get("tls.crt"), data.get("tls.key")
    if cert and key:
        return KeyPair(cert.encode(), key.encode())
    if cert or key:
        raise RuntimeError(
            f"Secret {where} holds only one of tls.crt and tls.key; empty it "
            f"(kubectl patch secret -n {where.replace('/', ' ')} --type=json -p "
            """'[{"op":"remove","path":"/data"}]') and restart the controller"""
        )
    return None


def write_pair(pair: KeyPair, cert_file: Path, key_file: Path) -> None:
    """Write key then certificate, each atomically (a reader never sees half a file; the key is
    never readable by others)."""
    for path, data, mode in ((key_file, pair.key, 0o600), (cert_file, pair.cert, 0o644)):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        tmp.replace(path)


class SelfSignedTLS:
    """Keeps this controller's serving certificate issued from its CA (Secret ``ca_secret``) and
    the CA in the caBundle of ``configurations`` (webhook configuration kind -> names)."""

    def __init__(
        self,
        kube: Kube,
        clock: Clock,
        namespace: str,
        ca_secret: str,
        names: Sequence[str],
        cert_file: Path,
        key_file: Path,
        configurations: Sequence[tuple[str, str]],
    ) -> None:
        self._kube = kube
        self._clock = clock
        self._namespace = namespace
        self._ca_secret = ca_secret
        self._names = list(names)
        self._cert_file = cert_file
        self._key_file = key_file
        self._configurations = list(configurations)
        self.ca: KeyPair | None = None
        self._none_found = False  # none of the configurations existed at the last look

    async def load_ca(self) -> KeyPair:
        """The CA in the Secret, made and written there first if the Secret is still empty."""
        where = f"{self._namespace}/{self._ca_secret}"
        for _ in range(3):  # a write that lost the race to another replica: read the winner's
            found = await self._kube.secret_with_version(self._namespace, self._ca_secret)
            if found is None:
                raise RuntimeError(
                    f"Secret {where} does not exist: deploy/components/self-signed-tls creates it empty "
                    f"(or: kubectl create secret generic {self._ca_secret} -n {self._namespace})"
                )
            data, version = found
            ca = stored_ca(where, data)
            if ca is not None:
                return ca
            fresh = make_ca(self._clock.now(), self._ca_secret)
            if await self._kube.fill_secret(
                self._namespace, self._ca_secret, {"tls.crt": fresh.cert, "tls.key": fresh.key}, version
            ):
                log.info("made the webhook CA", extra={"secret": where})
                return fresh
        raise RuntimeError(f"Secret {where} kept changing while this controller filled it; restart the controller")

    async def start(self) -> None:
        """Before serving: the CA, a serving certificate on disk, the CA in the configurations."""
        self.ca = await self.load_ca()
        self._issue()
        await self.inject()

    async def inject(self) -> None:
        """Put the CA into this controller's webhook configurations that lack it (re-applied ones
        come without a caBundle); say when one is missing altogether."""
        assert self.ca is not None
        found = False
        for kind, name in self._configurations:
            outcome = await self._kube.inject_ca_bundle(kind, name, self.ca.cert)
            if outcome == "written":
                log.info("put the webhook CA into %s %s", kind, name)
            found = found or outcome != "missing"
        if not found and not self._none_found:
            names = sorted({name for _, name in self._configurations})
            log.warning("no webhook configuration %s exists: this controller's webhooks are not called", names)
        self._none_found = not found

    def _issue(self) -> None:
        assert self.ca is not None
        write_pair(issue(self.ca, self._names, self._clock.now()), self._cert_file, self._key_file)
        log.info("issued the webhook's serving certificate", extra={"names": self._names})

    async def maintain(self) -> None:
        """Keep the CA in the configurations, and re-issue the serving certificate before it
        expires (the servers reload changed files). Run every CHECK_SECONDS by the runtime."""
        await self.inject()
        if due_for_renewal(self._cert_file.read_bytes(), self._clock.now()):
            self._issue()


def self_signed(config: ControllerConfig, kube: Kube, clock: Clock) -> SelfSignedTLS:
    """--webhook-tls self-signed: this controller's certificate from its own CA, and that CA in its
    own webhook configurations (named trainer-operator-<controller>, of either kind)."""
    webhook = config.webhook
    name = component(config.controller)
    service = webhook.webhook_service or f"{name}-webhook"
    return SelfSignedTLS(
        kube,
        clock,
        webhook.operator_namespace,
        ca_secret_name(config.controller),
        serving_names(service, webhook.operator_namespace, webhook.webhook_address),
        Path(webhook.webhook_cert_file),
        Path(webhook.webhook_key_file),
        [("ValidatingWebhookConfiguration", name), ("MutatingWebhookConfiguration", name)],
    )
