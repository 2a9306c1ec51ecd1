"""Self-signed webhook certificates (pure parts): the CA, serving certificates, renewal, files."""

import datetime as dt
import ipaddress
import stat
from pathlib import Path
from typing import cast

import pytest
from cryptography import x509

from trainerop_common.clock import FixedClock
from trainerop_common.kube import Kube, ca_bundle_patch
from trainerop_common.webhook_tls import (
    KeyPair,
    SelfSignedTLS,
    ca_secret_name,
    due_for_renewal,
    issue,
    make_ca,
    serving_names,
    stored_ca,
    write_pair,
)

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def ca() -> KeyPair:
    return make_ca(NOW)


def test_the_ca_signs_serving_certificates_only(ca: KeyPair) -> None:
    cert = x509.load_pem_x509_certificate(ca.cert)
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca
    assert constraints.path_length == 0
    assert cert.not_valid_after_utc - NOW == dt.timedelta(days=3650)


def test_a_serving_certificate_names_the_service_and_a_given_address(ca: KeyPair) -> None:
    names = serving_names("trainer-operator-profile-webhook", "trainer-operator-system", "127.0.0.1")
    assert names == [
        "trainer-operator-profile-webhook.trainer-operator-system.svc",
        "trainer-operator-profile-webhook.trainer-operator-system.svc.cluster.local",
        "127.0.0.1",
    ]
    assert serving_names("s", "ns", "0.0.0.0") == ["s.ns.svc", "s.ns.svc.cluster.local"]
    pair = issue(ca, names, NOW)
    cert = x509.load_pem_x509_certificate(pair.cert)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.cert))
    alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert alt.get_values_for_type(x509.DNSName) == names[:2]
    assert alt.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.not_valid_before_utc < NOW  # backdated a little for clock skew


def test_a_certificate_is_due_for_renewal_thirty_days_before_it_expires(ca: KeyPair) -> None:
    cert = issue(ca, ["s.ns.svc"], NOW, days=365).cert
    assert not due_for_renewal(cert, NOW + dt.timedelta(days=334))
    assert due_for_renewal(cert, NOW + dt.timedelta(days=335))


def test_issuing_needs_a_name(ca: KeyPair) -> None:
    with pytest.raises(ValueError, match="at least one"):
        issue(ca, [], NOW)


def test_the_pair_is_written_whole_and_the_key_readable_only_by_its_owner(ca: KeyPair, tmp_path: Path) -> None:
    pair = issue(ca, ["s.ns.svc"], NOW)
    cert, key = tmp_path / "dir" / "tls.crt", tmp_path / "dir" / "tls.key"
    write_pair(pair, cert, key)
    assert cert.read_bytes() == pair.cert
    assert key.read_bytes() == pair.key
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert sorted(p.name for p in cert.parent.iterdir()) == ["tls.crt", "tls.key"]  # no temporary left


def test_the_ca_bundle_patch_touches_only_webhooks_without_the_bundle() -> None:
    patch = ca_bundle_patch([("a.example", "QUJD"), ("b.example", None), ("c.example", "old")], "QUJD")
    assert patch == [
        {"op": "test", "path": "/webhooks/1/name", "value": "b.example"},
        {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": "QUJD"},
        {"op": "test", "path": "/webhooks/2/name", "value": "c.example"},
        {"op": "add", "path": "/webhooks/2/clientConfig/caBundle", "value": "QUJD"},
    ]
    assert ca_bundle_patch([("a.example", "QUJD")], "QUJD") == []  # nothing to write


def test_each_controller_has_its_own_ca_secret() -> None:
    assert ca_secret_name("profile") == "trainer-operator-profile-webhook-ca"
    assert len({ca_secret_name(c) for c in ("trainer", "profile", "quota", "audit")}) == 4


@pytest.mark.parametrize(
    ("data", "found"),
    [
        ({}, False),  # as the component creates it: the controller fills it
        ({"tls.crt": "C", "tls.key": "K"}, True),
    ],
)
def test_the_ca_is_read_from_its_secret_or_made_when_the_secret_is_empty(data: dict[str, str], found: bool) -> None:
    ca = stored_ca("ns/s", data)
    assert (ca is not None) is found
    if ca is not None:
        assert ca == KeyPair(b"C", b"K")


@pytest.mark.parametrize("data", [{"tls.crt": "C"}, {"tls.key": "K"}, {"tls.crt": "", "tls.key": "K"}])
def test_half_a_ca_is_an_error_that_says_how_to_empty_the_secret(data: dict[str, str]) -> None:
    with pytest.raises(RuntimeError, match=r"kubectl patch secret -n ns s --type=json"):
        stored_ca("ns/s", data)


class CaSecretKube:
    """The CA Secret as the API server keeps it: each read answers the next of ``reads``; a fill
    succeeds only while the Secret is at the version it read (another replica may fill it first)."""

    def __init__(self, reads: list[tuple[dict[str, str], str] | None], fills: list[bool]) -> None:
        self.reads, self.fills = reads, fills
        self.filled: list[tuple[str, bytes]] = []

    async def secret_with_version(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None:
        return self.reads.pop(0)

    async def fill_secret(self, namespace: str, name: str, data: dict[str, bytes], resource_version: str) -> bool:
        self.filled.append((resource_version, data["tls.crt"]))
        return self.fills.pop(0)


def tls_with(kube: CaSecretKube, tmp_path: Path) -> SelfSignedTLS:
    clock = FixedClock(NOW)
    files = (tmp_path / "tls.crt", tmp_path / "tls.key")
    return SelfSignedTLS(cast(Kube, kube), clock, "ns", "trainer-operator-profile-webhook-ca", ["s.ns.svc"], *files, [])


async def test_an_empty_ca_secret_is_filled_with_a_new_ca_under_the_version_read(tmp_path: Path) -> None:
    kube = CaSecretKube([({}, "7")], [True])
    ca = await tls_with(kube, tmp_path).load_ca()
    assert kube.filled == [("7", ca.cert)]
    subject = x509.load_pem_x509_certificate(ca.cert).subject.rfc4514_string()
    assert subject == "CN=trainer-operator-profile-webhook-ca"


async def test_a_replica_that_loses_the_race_takes_the_winners_ca(tmp_path: Path, ca: KeyPair) -> None:
    winner = {"tls.crt": ca.cert.decode(), "tls.key": ca.key.decode()}
    kube = CaSecretKube([({}, "7"), (winner, "8")], [False])
    assert await tls_with(kube, tmp_path).load_ca() == ca
    assert len(kube.filled) == 1


@pytest.mark.parametrize(
    ("reads", "fills", "says"),
    [
        ([None], [], "kubectl create secret generic trainer-operator-profile-webhook-ca -n ns"),
        ([({}, "1"), ({}, "2"), ({}, "3")], [False, False, False], "kept changing"),
    ],
)
async def test_a_ca_secret_that_cannot_be_used_stops_the_start_with_what_to_do(
    tmp_path: Path, reads: list[tuple[dict[str, str], str] | None], fills: list[bool], says: str
) -> None:
    with pytest.raises(RuntimeError, match=says):
        await tls_with(CaSecretKube(reads, fills), tmp_path).load_ca()
