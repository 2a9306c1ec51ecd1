#!/usr/bin/env python3
"""A local Kubernetes cluster from real upstream components (docs/design/local-cluster.md).

    python -m testbed.cluster up       # build binaries if needed, start everything, print KUBECONFIG
    python -m testbed.cluster status   # what runs, and whether it is healthy
    python -m testbed.cluster down     # stop only what `up` started, remove its state

`up` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok as local
processes and registers fake GPU nodes that kwok keeps alive. Each component logs to
<run-dir>/logs/<component>.log. Settings come from the environment:

    TRAINER_OPERATOR_RUN_DIR   state directory (default ~/.cache/trainer-operator/cluster)
    TRAINER_OPERATOR_PORT_BASE first of the local ports used (default 16440)
    TRAINER_OPERATOR_FAKE_NODES number of kwok GPU nodes (default 16)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fcntl
import ipaddress
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

TESTBED = Path(__file__).resolve().parent
REPO = TESTBED.parent
BUILD_SCRIPT = REPO / "hack" / "build-k8s.sh"
KWOK_STAGES = TESTBED / "kwok-stages.yaml"
KWOK_DELETES = TESTBED / "kwok-deletes.yaml"  # kwok deletes pods as a kubelet does (see the file)
# The same locations as hack/lib/common.sh.
CACHE_ROOT = (
    Path(os.environ["TRAINER_OPERATOR_CACHE"])
    if os.environ.get("TRAINER_OPERATOR_CACHE")
    else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trainer-operator"
)
# A pytest-xdist worker (gw0, gw1, ...: `pytest -n 2`) runs a cluster of its own, so the tests run
# concurrently and each still has a whole cluster: worker N's ports are 100 above worker 0's, and its
# run directory is RUN_DIR-gwN.
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
RUN_DIR = Path(os.environ.get("TRAINER_OPERATOR_RUN_DIR", CACHE_ROOT / "cluster"))
RUN_DIR = RUN_DIR.with_name(f"{RUN_DIR.name}-gw{WORKER}") if WORKER else RUN_DIR
PORT_BASE = int(os.environ.get("TRAINER_OPERATOR_PORT_BASE", "16440")) + 100 * WORKER
FAKE_NODES = int(os.environ.get("TRAINER_OPERATOR_FAKE_NODES", "16"))
FAKE_NODE_PODS = 110  # pods a fake node holds (a kubelet's default --max-pods)

SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.244.0.1/16"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# Pods in a namespace with this annotation tolerate the fake nodes' taint (PodTolerationRestriction
# admission), so unmodified manifests such as the seed Trainer run on kwok nodes.
DEFAULT_TOLERATIONS = {
    "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps(
        [{"key": KWOK_NODE_ANNOTATION, "operator": "Exists", "effect": "NoSchedule"}]
    )
}
LABEL_PREFIX = "trainer.operator.kubeflow.org"


@dataclass(frozen=True)
class Ports:
    apiserver: int = PORT_BASE
    etcd_client: int = PORT_BASE + 1
    etcd_peer: int = PORT_BASE + 2
    controller_manager: int = PORT_BASE + 3
    scheduler: int = PORT_BASE + 4
    kwok: int = PORT_BASE + 5
    s3: int = PORT_BASE + 10  # SeaweedFS: S3, then its master, volume, filer, admin and metrics ports


PORTS = Ports()


def host_ip() -> str | None:
    """The machine's first global IPv4 address (not lo, which also holds the cluster DNS address)."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields and fields[1] != "lo":
            return fields[fields.index("inet") + 1].split("/")[0]
    return None


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class ClusterError(Exception):
    pass


@contextlib.contextmanager
def build_lock(target: Path) -> Iterator[None]:
    """Held while ``target`` (a cache entry) is built, so that a second process needing it (CI's
    background preparation, a test, another test worker) waits for the first build instead of
    building it again. Builders look for ``target`` again once they hold the lock."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another process that is building {target}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def built_once(target: Path, build: Callable[[], None]) -> Path:
    """``target``, made by ``build`` unless it exists, under ``build_lock``: a build another
    process finished meanwhile is not made again. ``build`` must make ``target`` whole or not at all."""
    if not target.exists():
        with build_lock(target):
            if not target.exists():
                build()
    return target


# --- binaries ------------------------------------------------------------------------------------


def bin_dir(which: str = "--print-bin-dir") -> Path:
    override = os.environ.get("TRAINER_OPERATOR_BIN" if which == "--print-bin-dir" else "TRAINER_OPERATOR_S3_BIN")
    if override:
        return Path(override)
    out = subprocess.run([str(BUILD_SCRIPT), which], check=True, capture_output=True, text=True).stdout
    return Path(out.strip())


S3_ACCESS_KEY = "trainer-operator"


# Where SeaweedFS listens when the cluster runs as root: an address on lo that this machine's
# processes and the real node's pods (through the bridge's gateway) reach, and other hosts do
# not route to (link-local, as NodeLocal DNSCache's 169.254.20.10). Without root: 127.0.0.1.
SERVICES_ADDRESS = "169.254.20.11"


def services_address(create: bool = False) -> str:
    """SERVICES_ADDRESS if it is on lo (``create``: add it, as root), else 127.0.0.1."""
    on_lo = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True).stdout
    if f" {SERVICES_ADDRESS}/" in on_lo:
        return SERVICES_ADDRESS
    if create and os.geteuid() == 0:
        # Another cluster coming up at the same time (a second test worker) may add it first.
        added = subprocess.run(["ip", "addr", "add", f"{SERVICES_ADDRESS}/32", "dev", "lo"], capture_output=True)
        if added.returncode == 0 or services_address() == SERVICES_ADDRESS:
            return SERVICES_ADDRESS
        raise ClusterError(f"could not add {SERVICES_ADDRESS} to lo: {added.stderr.decode().strip()}")
    return "127.0.0.1"


def s3_endpoint() -> str:
    """The local S3 server: the same URL works from this machine and from pods on the real node."""
    return f"http://{services_address()}:{PORTS.s3}"


def s3_credentials(run: Path | None = None) -> dict[str, str]:
    """The local S3 server's credentials, as the variables a checkpoint credentials Secret holds."""
    secret = ((run or RUN_DIR) / "s3-secret-key").read_text().strip()
    return s3_variables(S3_ACCESS_KEY, secret, s3_endpoint())


def s3_variables(access_key: str, secret_key: str, endpoint: str) -> dict[str, str]:
    """A SeaweedFS server's credentials as the variables a checkpoint credentials Secret holds."""
    return {
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": "us-east-1",
    }


def s3_identities(access_key: str, secret_key: str, actions: list[str]) -> dict[str, Any]:
    """SeaweedFS's -s3.config: one access key allowed ``actions``."""
    identity = {
        "name": access_key,
        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
        "actions": actions,
    }
    return {"identities": [identity]}


def s3_config(run: Path) -> Path:
    """SeaweedFS's identities: one access key with a secret made for this cluster."""
    key_file = run / "s3-secret-key"
    if not key_file.is_file():
        key_file.write_text(secrets.token_hex(20) + "\n")
        key_file.chmod(0o600)
    config = run / "s3-identities.json"
    actions = ["Admin", "Read", "Write", "List", "Tagging"]  # Admin: the tests make buckets
    config.write_text(json.dumps(s3_identities(S3_ACCESS_KEY, key_file.read_text().strip(), actions)))
    config.chmod(0o600)
    return config


def ensure_binaries() -> Path:
    """Build the binaries if the cache lacks them (hack/build-k8s.sh prints its progress)."""
    subprocess.run([str(BUILD_SCRIPT)], check=True)
    return bin_dir()


# --- certificates --------------------------------------------------------------------------------


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(path: Path, key: rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


SERVER_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "127.0.0.1",
    "10.0.0.1",
)


def make_ca(pki: Path, name: str, cn: str) -> None:
    """A self-signed CA: ``<name>.crt`` and ``<name>.key``."""
    pki.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    ca_key = _key()
    ca_name = _name(cn)
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    (pki / f"{name}.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(pki / f"{name}.key", ca_key)


# The API server authenticates itself to the admission webhooks with a client certificate of a CA
# of its own (not the cluster's, which signs every component's and user's certificate): the
# controllers believe an observed review only from its holder (--webhook-client-ca-file).
WEBHOOK_CLIENT_CA = "webhook-client-ca"


def make_webhook_client_pki(pki: Path) -> None:
    make_ca(pki, WEBHOOK_CLIENT_CA, "trainer-operator-local-webhook-client-ca")
    issue_certificate(pki, "apiserver-webhook-client", "kube-apiserver-webhook-client", None, ca=WEBHOOK_CLIENT_CA)


def admission_config(run: Path) -> Path:
    """The API server's AdmissionConfiguration: its client certificate for every webhook ('*')."""
    pki = run / "pki"
    kubeconfig = pki / "webhook-client.kubeconfig"
    user = {
        "client-certificate": str(pki / "apiserver-webhook-client.crt"),
        "client-key": str(pki / "apiserver-webhook-client.key"),
    }
    kubeconfig.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "users": [{"name": "*", "user": user}]})
    )
    webhook = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "WebhookAdmissionConfiguration",
        "kubeConfigFile": str(kubeconfig),
    }
    plugins = [
        {"name": name, "configuration": webhook} for name in ("ValidatingAdmissionWebhook", "MutatingAdmissionWebhook")
    ]
    path = run / "admission.yaml"
    path.write_text(
        yaml.safe_dump(
            {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration", "plugins": plugins}
        )
    )
    return path


def make_pki(pki: Path) -> None:
    """One CA that signs the API server's serving cert and every client cert, plus the SA key, and
    the webhook client CA (:data:`WEBHOOK_CLIENT_CA`)."""
    make_ca(pki, "ca", "trainer-operator-local-ca")
    make_webhook_client_pki(pki)
    issue_certificate(pki, "apiserver", "kube-apiserver", None, SERVER_NAMES)
    issue_certificate(pki, "admin", "trainer-operator-admin", "system:masters")
    issue_certificate(pki, "controller-manager", "system:kube-controller-manager", None)
    issue_certificate(pki, "scheduler", "system:kube-scheduler", None)
    issue_certificate(pki, "kwok", "kwok-controller", "system:masters")
    issue_certificate(pki, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")
    _write_key(pki / "sa.key", _key())


def issue_certificate(
    pki: Path, name: str, cn: str, org: str | None, server_names: Sequence[str] = (), ca: str = "ca"
) -> Path:
    """``<name>.crt``/``.key`` signed by the CA ``ca`` in ``pki``: a serving certificate for
    ``server_names`` (DNS names or IP addresses), else a client certificate; returns the .crt."""
    ca_key = serialization.load_pem_private_key((pki / f"{ca}.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate((pki / f"{ca}.crt").read_bytes())
    assert isinstance(ca_key, rsa.RSAPrivateKey)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    key = _key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server_names else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, org))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if server_names:
        alt: list[x509.GeneralName] = []
        for host in server_names:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                alt.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    (pki / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(pki / f"{name}.key", key)
    return pki / f"{name}.crt"


def kubeconfig(run: Path, user: str) -> Path:
    pki = run / "pki"
    path = run / f"{user}.kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {
                    "server": f"https://127.0.0.1:{PORTS.apiserver}",
                    "certificate-authority": str(pki / "ca.crt"),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(pki / f"{user}.crt"),
                    "client-key": str(pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": f"{user}@local", "context": {"cluster": "local", "user": user}}],
        "current-context": f"{user}@local",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


# --- processes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Component:
    name: str
    argv: list[str]
    health: Callable[[], bool]
    timeout: float = 60.0


def http_ok(url: str, client: tuple[Path, Path] | None = None, ca: Path | None = None) -> bool:
    ctx = None
    if url.startswith("https"):
        ctx = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()
        if client:
            ctx.load_cert_chain(str(client[0]), str(client[1]))
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def s3_ready() -> bool:
    """SeaweedFS answers S3 (an unsigned request is refused with 403 once it is up)."""
    try:
        with urllib.request.urlopen(f"{s3_endpoint()}/", timeout=2):
            return True
    except urllib.error.HTTPError as err:
        return err.code in (403, 401)
    except (urllib.error.URLError, OSError):
        return False


def pid_file(run: Path, name: str) -> Path:
    return run / "pids" / f"{name}.pid"


def running_pid(run: Path, name: str) -> int | None:
    """The pid `up` recorded for ``name`` if that process still runs the binary we started."""
    path = pid_file(run, name)
    if not path.is_file():
        return None
    pid_text, _, exe = path.read_text().partition("\n")
    try:
        pid = int(pid_text)
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except (ValueError, OSError):
        return None
    # argv[0] of a Python console script is the interpreter; the script is argv[1].
    return pid if exe.strip() in argv[:2] else None


def tail(path: Path, lines: int = 25) -> str:
    if not path.is_file():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def start(run: Path, comp: Component, env: dict[str, str] | None = None) -> None:
    """Start ``comp`` unless it already runs healthy; wait until healthy or explain why not."""
    if running_pid(run, comp.name) and comp.health():
        say(f"{comp.name} already running")
        return
    log_path = run / "logs" / f"{comp.name}.log"
    t0 = time.monotonic()
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            comp.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env
        )
    pid_file(run, comp.name).write_text(f"{proc.pid}\n{comp.argv[0]}\n")
    while time.monotonic() - t0 < comp.timeout:
        if proc.poll() is not None:
            raise ClusterError(
                f"{comp.name} exited with code {proc.returncode}; last lines of {log_path}:\n{tail(log_path)}\n"
                f"Fix the cause (a port in use? try TRAINER_OPERATOR_PORT_BASE=<other>), then run "
                f"`python -m testbed.cluster down` and `up` again."
            )
        if comp.health():
            say(f"{comp.name} is up ({time.monotonic() - t0:.1f}s)")
            return
        time.sleep(0.2)
    raise ClusterError(
        f"{comp.name} did not become healthy in {comp.timeout:.0f}s; last lines of {log_path}:\n{tail(log_path)}\n"
        "Run `python -m testbed.cluster down` and `up` again; if it repeats, read the whole log."
    )


def kubectl(run: Path, bins: Path, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [str(bins / "kubectl"), f"--kubeconfig={run / 'admin.kubeconfig'}", *args],
        input=stdin,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise ClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def components(run: Path, bins: Path) -> list[Component]:
    pki = run / "pki"
    admin = (pki / "admin.crt", pki / "admin.key")
    api = f"https://127.0.0.1:{PORTS.apiserver}"
    scheduler_config = run / "scheduler.yaml"
    scheduler_config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(run / "scheduler.kubeconfig")},
                "leaderElection": {"leaderElect": False},
            }
        )
    )
    return [
        Component(
            "etcd",
            [
                str(bins / "etcd"),
                f"--data-dir={run / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{PORTS.etcd_client}",
                f"--advertise-client-urls=http://127.0.0.1:{PORTS.etcd_client}",
                f"--listen-peer-urls=http://127.0.0.1:{PORTS.etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{PORTS.etcd_peer}",
                f"--initial-cluster=default=http://127.0.0.1:{PORTS.etcd_peer}",
                "--unsafe-no-fsync=true",
                "--listen-metrics-urls=",
                "--log-level=warn",
            ],
            lambda: http_ok(f"http://127.0.0.1:{PORTS.etcd_client}/health"),
        ),
        Component(
            "kube-apiserver",
            [
                str(bins / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{PORTS.etcd_client}",
                # Pods on the real node reach the API server through the kubernetes Service
                # (kube-proxy's rules lead 10.0.0.1:443 to the advertised address).
                "--bind-address=0.0.0.0",
                f"--advertise-address={host_ip() or '127.0.0.1'}",
                f"--secure-port={PORTS.apiserver}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--authorization-mode=Node,RBAC",
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",  # a real node: testbed/node.py
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.key'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                "--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,"
                "DefaultTolerationSeconds,Priority,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,"
                "ResourceQuota,NodeRestriction,PodTolerationRestriction",
                f"--admission-control-config-file={admission_config(run)}",
                "--storage-media-type=application/vnd.kubernetes.protobuf",
                "--profiling=true",  # /debug/pprof for cluster-admin only: the benchmark profiles the API server
                "--v=1",
            ],
            lambda: http_ok(f"{api}/readyz", admin, pki / "ca.crt"),
            timeout=120,
        ),
        Component(
            "kube-controller-manager",
            [
                str(bins / "kube-controller-manager"),
                f"--kubeconfig={run / 'controller-manager.kubeconfig'}",
                f"--authentication-kubeconfig={run / 'controller-manager.kubeconfig'}",
                f"--authorization-kubeconfig={run / 'controller-manager.kubeconfig'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                "--use-service-account-credentials=true",
                "--controllers=*",
                "--leader-elect=false",
                # Garbage collection and namespace deletion at the default 20 requests/s took about
                # 15 minutes to remove one benchmark's 1000 Trainers and their 4000 pods.
                "--kube-api-qps=100",
                "--kube-api-burst=200",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--bind-address=127.0.0.1",
                f"--secure-port={PORTS.controller_manager}",
                "--v=1",
            ],
            lambda: http_ok(f"https://127.0.0.1:{PORTS.controller_manager}/healthz"),
        ),
        Component(
            "kube-scheduler",
            [
                str(bins / "kube-scheduler"),
                f"--config={scheduler_config}",
                f"--authentication-kubeconfig={run / 'scheduler.kubeconfig'}",
                f"--authorization-kubeconfig={run / 'scheduler.kubeconfig'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={PORTS.scheduler}",
                "--v=1",
            ],
            lambda: http_ok(f"https://127.0.0.1:{PORTS.scheduler}/healthz"),
        ),
        Component(
            "kwok",
            [
                str(bins / "kwok"),
                f"--kubeconfig={run / 'kwok.kubeconfig'}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                f"--cidr={POD_CIDR}",
                "--node-ip=10.244.0.1",
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{PORTS.kwok}",
                f"--config={KWOK_STAGES}",
            ],
            lambda: http_ok(f"http://127.0.0.1:{PORTS.kwok}/healthz"),
        ),
        Component(
            "seaweedfs",
            [
                str(bin_dir("--print-s3-bin-dir") / "weed"),
                "mini",
                f"-dir={run / 'seaweedfs'}",
                # Not every address: only S3 checks a key, the master, volume and filer ports
                # take anyone.
                f"-ip={services_address(create=True)}",
                f"-ip.bind={services_address()}",
                f"-s3.port={PORTS.s3}",
                f"-master.port={PORTS.s3 + 1}",
                f"-volume.port={PORTS.s3 + 2}",
                f"-filer.port={PORTS.s3 + 3}",
                f"-admin.port={PORTS.s3 + 4}",
                f"-metricsPort={PORTS.s3 + 5}",
                "-admin.port.legacy=0",
                "-admin.ui=false",
                "-webdav=false",
                "-s3.port.iceberg=0",
                f"-s3.config={s3_config(run)}",
            ],
            lambda: s3_ready(),
            timeout=120,
        ),
    ]


def fake_nodes(count: int) -> list[dict[str, Any]]:
    """GPU nodes kwok keeps alive: half on-demand, half spot, two NVLink domains."""
    nodes: list[dict[str, object]] = []
    for i in range(count):
        name = f"kwok-gpu-{i}"
        capacity = {
            "cpu": "96",
            "memory": "1Ti",
            "pods": str(FAKE_NODE_PODS),
            "nvidia.com/gpu": "8",
            "ephemeral-storage": "2Ti",
        }
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {
                        "type": "kwok",
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "gpu-type": "nvidia-tesla-a100",
                        f"{LABEL_PREFIX}/capacity-type": "spot" if i % 2 else "on-demand",
                        f"{LABEL_PREFIX}/nvlink-domain": f"nvl-{i // 2}",
                        "nvidia.com/gpu.clique": f"clique-{i // 4}",  # NVIDIA GPU feature discovery's
                    },
                },
                "spec": {
                    "providerID": f"kwok://{name}",
                    "taints": [{"key": KWOK_NODE_ANNOTATION, "value": "fake", "effect": "NoSchedule"}],
                },
                "status": {"capacity": capacity, "allocatable": capacity},
            }
        )
    return nodes


def checkpoint_volume(namespace: str, claim: str = "pvc-backups") -> list[dict[str, Any]]:
    """A PersistentVolumeClaim for checkpoints (the seed Trainer's checkpoint.bucket is pvc-backups)
    and a static volume pre-bound to it: the local cluster has no provisioner."""
    volume = f"{namespace}-{claim}"
    modes = ["ReadWriteMany"]
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume, "labels": {f"{LABEL_PREFIX}/for-namespace": namespace}},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": modes,
                "storageClassName": "",
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": f"/tmp/trainer-operator-volumes/{volume}"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": modes,
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "10Gi"}},
            },
        },
    ]


def node_volume(namespace: str, claim: str) -> tuple[list[dict[str, Any]], Path]:
    """:func:`checkpoint_volume`'s manifests and their directory on the node, made and writable by
    every user (the examples run as user 1000, as a volume with an fsGroup would let them)."""
    manifests = checkpoint_volume(namespace, claim)
    root = Path(manifests[0]["spec"]["hostPath"]["path"])
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o777)
    return manifests, root


def team_namespace(name: str, labels: dict[str, str]) -> dict[str, Any]:
    """A namespace whose pods tolerate the fake nodes (as the default namespace's do)."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels, "annotations": DEFAULT_TOLERATIONS},
    }


def print_namespace(args: argparse.Namespace) -> int:
    labels = dict(item.split("=", 1) for item in args.label)
    print(yaml.safe_dump(team_namespace(args.name, labels)), end="")
    return 0


def print_checkpoint_volume(args: argparse.Namespace) -> int:
    print(yaml.safe_dump_all(checkpoint_volume(args.namespace, args.claim)), end="")
    return 0


def up(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    bins = ensure_binaries()
    run = RUN_DIR
    for sub in ("logs", "pids"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    if not (run / "pki" / "ca.crt").is_file():
        say("creating certificates and service-account keys")
        make_pki(run / "pki")
    if not (run / "pki" / f"{WEBHOOK_CLIENT_CA}.crt").is_file():  # a cluster made by an earlier version
        make_webhook_client_pki(run / "pki")
    for user in ("admin", "controller-manager", "scheduler", "kwok"):
        kubeconfig(run, user)
    for comp in components(run, bins):
        start(run, comp)
    kubectl(run, bins, "apply", "-f", str(KWOK_DELETES))
    if FAKE_NODES:
        say(f"registering {FAKE_NODES} fake GPU nodes")
        nodes = json.dumps({"apiVersion": "v1", "kind": "List", "items": fake_nodes(FAKE_NODES)})
        kubectl(run, bins, "apply", "-f", "-", stdin=nodes)
        kubectl(run, bins, "wait", "--for=condition=Ready", "node", "--all", "--timeout=60s")
    say("waiting for the default ServiceAccount (the controller-manager creates it)")
    deadline = time.monotonic() + 60
    while True:
        try:
            kubectl(run, bins, "get", "serviceaccount", "default", "-n", "default")
            break
        except ClusterError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    annotations = [f"{k}={v}" for k, v in DEFAULT_TOLERATIONS.items()]
    kubectl(run, bins, "annotate", "--overwrite", "namespace", "default", *annotations)
    say(f"cluster is up in {time.monotonic() - t0:.1f}s")
    print(f"export KUBECONFIG={run / 'admin.kubeconfig'}")
    print(f"export PATH={bins}:$PATH")
    return 0


def status(args: argparse.Namespace) -> int:
    run = RUN_DIR
    if not run.is_dir():
        print(f"no cluster state in {run}; start one with `python -m testbed.cluster up`")
        return 1
    bins = bin_dir()
    healthy = True
    for comp in components(run, bins):
        pid = running_pid(run, comp.name)
        ok = pid is not None and comp.health()
        healthy &= ok
        print(
            f"{comp.name:24} {'running' if pid else 'stopped':8} pid={pid or '-':<8} {'healthy' if ok else 'UNHEALTHY'}"
        )
    if healthy:
        print(kubectl(run, bins, "get", "nodes", "-L", f"{LABEL_PREFIX}/capacity-type").rstrip())
        print(f"KUBECONFIG={run / 'admin.kubeconfig'}")
    else:
        print(
            f"not healthy: see {run / 'logs'}; "
            "restart with `python -m testbed.cluster down && python -m testbed.cluster up`"
        )
    return 0 if healthy else 1


def stop_processes(run: Path, names: list[str]) -> list[str]:
    """Stop processes `start` recorded under ``run``: SIGTERM to all, SIGKILL after 15 s.

    Returns the names that were running."""
    pids = {name: pid for name in names if (pid := running_pid(run, name)) is not None}
    for pid in pids.values():
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while any(running_pid(run, n) for n in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for name, pid in pids.items():
        if running_pid(run, name):
            os.kill(pid, signal.SIGKILL)
    for name in names:
        pid_file(run, name).unlink(missing_ok=True)
    return list(pids)


def restart(name: str) -> None:
    """Stop one component of the running local cluster and start it again (fault tests: an API
    server restart drops every watch)."""
    known = components(RUN_DIR, bin_dir())
    comp = next((c for c in known if c.name == name), None)
    if comp is None:
        raise ClusterError(f"no component {name!r}; the cluster has {[c.name for c in known]}")
    stop_processes(RUN_DIR, [name])
    start(RUN_DIR, comp)


def compact_etcd() -> int:
    """Compact etcd's history up to now (what its periodic compaction does): a watch resuming from
    an older version gets 410 Gone and must list again. Returns the revision compacted to."""

    def call(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{PORTS.etcd_client}{path}", json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    revision = int(call("/v3/kv/range", {"key": "AA=="})["header"]["revision"])  # any key: the header says
    call("/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


def down(args: argparse.Namespace) -> int:
    run = RUN_DIR
    if not run.is_dir():
        say("nothing to stop")
        return 0
    # Controllers started by testbed/localdev.py first, then the cluster in reverse start order.
    controllers = run / "controllers"
    if controllers.is_dir():
        for name in stop_processes(controllers, [p.stem for p in (controllers / "pids").glob("*.pid")]):
            say(f"stopped {name}")
    # The registry is the real node's (testbed/registry.py): there if the node's down was skipped.
    in_reverse = ["seaweedfs", "kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"]
    for name in ["registry", *in_reverse]:
        for stopped in stop_processes(run, [name]):
            say(f"stopped {stopped}")
    shutil.rmtree(run)
    release_services_address()
    say(f"removed {run}")
    return 0


def release_services_address() -> None:
    """Take SERVICES_ADDRESS off lo unless another cluster of this machine (another
    TRAINER_OPERATOR_RUN_DIR) still listens on it: its S3 server would answer no more."""
    listening = subprocess.run(["ss", "-Hltn", "src", SERVICES_ADDRESS], capture_output=True, text=True).stdout
    if listening.strip():
        say(f"{SERVICES_ADDRESS} stays on lo: another cluster listens on it")
        return
    subprocess.run(["ip", "addr", "del", f"{SERVICES_ADDRESS}/32", "dev", "lo"], capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="local Kubernetes cluster from real upstream components")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start the cluster (builds binaries on first use)")
    sub.add_parser("status", help="show what runs and whether it is healthy")
    sub.add_parser("down", help="stop what `up` started and remove its state")
    sub.add_parser("kubeconfig", help="print the admin kubeconfig path")
    volume = sub.add_parser(
        "checkpoint-volume", help="print a checkpoint PVC and its static volume (for kubectl apply)"
    )
    volume.add_argument("--namespace", default="default")
    volume.add_argument("--claim", default="pvc-backups")
    namespace = sub.add_parser(
        "namespace", help="print a namespace whose pods tolerate the kwok nodes (for kubectl apply)"
    )
    namespace.add_argument("name")
    namespace.add_argument("--label", action="append", default=[], help="key=value (repeatable)")
    args = parser.parse_args(argv)
    try:
        if args.command == "kubeconfig":
            print(RUN_DIR / "admin.kubeconfig")
            return 0
        commands = {
            "up": up,
            "status": status,
            "down": down,
            "checkpoint-volume": print_checkpoint_volume,
            "namespace": print_namespace,
        }
        return commands[args.command](args)
    except ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as err:
        print(f"error: {' '.join(map(str, err.cmd))} failed with exit code {err.returncode}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
