"""TLS of a controller's /metrics, /healthz and /readyz: served with the files' certificate, loaded
again when they change, /metrics only to a client holding a certificate of the client CA."""

import asyncio
import datetime as dt
import ssl
from pathlib import Path
from typing import cast

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from trainerop_common import serving_tls
from trainerop_common.config import ControllerConfig
from trainerop_common.health import Health
from trainerop_common.kube import Kube
from trainerop_common.runtime import Runtime, StartupError
from trainerop_common.webhook_tls import KeyPair, issue, make_ca

NOW = dt.datetime.now(dt.UTC)
SERVER = "trainer-operator-trainer-metrics.trainer-operator-system.svc"


def client_pair(ca: KeyPair, name: str = "prometheus") -> KeyPair:
    """A client certificate (clientAuth) signed by ``ca``."""
    key = ec.generate_private_key(ec.SECP256R1())
    ca_key = serialization.load_pem_private_key(ca.key, None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(x509.load_pem_x509_certificate(ca.cert).subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(minutes=5))
        .not_valid_after(NOW + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), pem_key)


def write(directory: Path, name: str, pair: KeyPair) -> tuple[str, str]:
    (directory / f"{name}.crt").write_bytes(pair.cert)
    (directory / f"{name}.key").write_bytes(pair.key)
    return str(directory / f"{name}.crt"), str(directory / f"{name}.key")


def client(ca: KeyPair, directory: Path, pair: KeyPair | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca.cert.decode())
    if pair is not None:
        context.load_cert_chain(*write(directory, "client", pair))
    return context


async def get(port: int, path: str, context: ssl.SSLContext | None) -> tuple[int, str]:
    """GET over TLS with ``context`` (verifying the server as SERVER), else plain HTTP."""
    scheme = "https" if context else "http"
    resolver = aiohttp.ThreadedResolver()
    connector = aiohttp.TCPConnector(ssl=context if context else False, resolver=resolver, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        kwargs = {"server_hostname": SERVER} if context else {}
        async with session.get(f"{scheme}://127.0.0.1:{port}{path}", **kwargs) as response:  # type: ignore[arg-type]
            return response.status, await response.text()


def served_name(port: int, ca: KeyPair) -> str:
    """The common name of the certificate the server presents now."""
    pem = ssl.get_server_certificate(("127.0.0.1", port))
    cert = x509.load_pem_x509_certificate(pem.encode())
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def health() -> Health:
    """A controller's health server, ready."""
    runtime = Runtime(ControllerConfig(controller="trainer"), cast(Kube, None))
    runtime.ready.set()
    return Health(runtime)


def test_metrics_are_served_over_tls_and_only_to_a_client_of_the_client_ca(tmp_path: Path) -> None:
    ca, other = make_ca(NOW), make_ca(NOW, "someone-else")
    cert, key = write(tmp_path, "server", issue(ca, [SERVER], NOW))
    (tmp_path / "client-ca.crt").write_bytes(ca.cert)
    tls = serving_tls.ServingTLS(cert, key, str(tmp_path / "client-ca.crt"))

    async def scenario() -> None:
        served = health()
        await served.start("127.0.0.1", 0, tls.context, tls.asks_clients)
        try:
            anonymous = client(ca, tmp_path)
            assert await get(served.port, "/healthz", anonymous) == (200, "ok\n")
            assert (await get(served.port, "/readyz", anonymous))[0] == 200
            status, text = await get(served.port, "/metrics", anonymous)
            assert (status, "client certificate" in text) == (403, True)
            assert (await get(served.port, "/debug/memory", anonymous))[0] == 403
            status, text = await get(served.port, "/metrics", client(ca, tmp_path, client_pair(ca)))
            assert status == 200
            assert "# TYPE" in text
            with pytest.raises(aiohttp.ClientError):  # a certificate of another CA: the handshake fails
                await get(served.port, "/metrics", client(ca, tmp_path, client_pair(other)))
            with pytest.raises(aiohttp.ClientError):  # plain HTTP on the TLS port
                await get(served.port, "/healthz", None)
        finally:
            await served.stop()

    asyncio.run(scenario())


def test_without_a_client_ca_any_tls_client_reads_the_metrics(tmp_path: Path) -> None:
    ca = make_ca(NOW)
    tls = serving_tls.ServingTLS(*write(tmp_path, "server", issue(ca, [SERVER], NOW)))

    async def scenario() -> None:
        served = health()
        await served.start("127.0.0.1", 0, tls.context, tls.asks_clients)
        try:
            assert (await get(served.port, "/metrics", client(ca, tmp_path)))[0] == 200
        finally:
            await served.stop()

    asyncio.run(scenario())


def test_a_renewed_certificate_is_served_once_its_files_change(tmp_path: Path) -> None:
    ca = make_ca(NOW)
    cert, key = write(tmp_path, "server", issue(ca, [SERVER], NOW))
    tls = serving_tls.ServingTLS(cert, key)
    assert not tls.refresh()  # nothing changed

    async def scenario() -> None:
        served = health()
        await served.start("127.0.0.1", 0, tls.context)
        try:
            assert await asyncio.to_thread(served_name, served.port, ca) == SERVER
            await asyncio.to_thread(Path(cert).write_bytes, b"-----BEGIN CERTIFICATE-----\nhalf")  # mid-write
            assert not tls.refresh()
            assert await asyncio.to_thread(served_name, served.port, ca) == SERVER  # the old one still
            write(tmp_path, "server", issue(ca, ["renewed.example", SERVER], NOW))
            assert tls.refresh()
            assert await asyncio.to_thread(served_name, served.port, ca) == "renewed.example"
            assert not tls.refresh()
        finally:
            await served.stop()

    asyncio.run(scenario())


# --metrics-cert-file, --metrics-key-file, --metrics-client-ca-file -> the problem named (None: none)
FLAG_PROBLEMS = [
    ("", "", "", None),
    ("c", "k", "", None),
    ("c", "k", "ca", None),
    ("c", "", "", "--metrics-cert-file and --metrics-key-file go together"),
    ("", "k", "", "--metrics-cert-file and --metrics-key-file go together"),
    ("", "", "ca", "--metrics-client-ca-file needs --metrics-cert-file"),
]


@pytest.mark.parametrize(("cert", "key", "client_ca", "problem"), FLAG_PROBLEMS)
def test_the_metrics_tls_flags_go_together(cert: str, key: str, client_ca: str, problem: str | None) -> None:
    config = ControllerConfig(
        controller="trainer", metrics_cert_file=cert, metrics_key_file=key, metrics_client_ca_file=client_ca
    )
    problems = config.problems()
    if problem is None:
        assert problems == []
    else:
        (only,) = problems
        assert only.startswith(problem)


def test_missing_or_broken_files_stop_the_controller_saying_what_to_do(tmp_path: Path) -> None:
    assert serving_tls.from_config(ControllerConfig(controller="trainer")) is None
    missing = ControllerConfig(controller="trainer", metrics_cert_file=str(tmp_path / "tls.crt"), metrics_key_file="k")
    with pytest.raises(StartupError, match="mount its Secret there"):
        serving_tls.from_config(missing)
    (tmp_path / "tls.crt").write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    broken = ControllerConfig(
        controller="trainer", metrics_cert_file=str(tmp_path / "tls.crt"), metrics_key_file=str(tmp_path / "tls.key")
    )
    with pytest.raises(StartupError, match="must be a PEM certificate and its private key"):
        serving_tls.from_config(broken)
