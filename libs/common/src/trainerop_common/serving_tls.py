"""TLS for a controller's ``/metrics``, ``/healthz`` and ``/readyz`` (``--metrics-cert-file``,
``--metrics-key-file``, ``--metrics-client-ca-file``; docs/metrics.md#tls).

The files are those a cert-manager Secret mounts (deploy/components/metrics-tls). cert-manager
renews them in place, so the server's context loads them again when they change: handshakes from
then on present the new certificate. With a client CA, the handshake asks for a client certificate
and verifies one that is presented; ``/metrics`` then answers only a client that presented one
(Prometheus's), while the kubelet's probes, which present none, still reach ``/healthz`` and
``/readyz``. A CA loaded again is added to those trusted (the ssl module cannot remove one): a
replaced client CA stops being trusted at the controller's next restart.

Only the standard library's ``ssl``: nothing is imported that a plain-HTTP controller does not use.
"""

import logging
import os
import ssl
from collections.abc import Sequence

from .config import ControllerConfig
from .runtime import StartupError

log = logging.getLogger("trainerop.serving_tls")

CHECK_SECONDS = 60.0  # cert-manager renews a month before expiry: a minute's delay is nothing

Stamp = tuple[tuple[int, int], ...]  # each file's (modification time in ns, size)


def stamp(paths: Sequence[str]) -> Stamp | None:
    """What the files look like now; None when one is missing (a Secret's files swap at once)."""
    try:
        return tuple((st.st_mtime_ns, st.st_size) for st in (os.stat(p) for p in paths))
    except OSError:
        return None


def server_context(cert: str, key: str, client_ca: str) -> ssl.SSLContext:
    """A TLS 1.2+ server context with the certificate, asking for a client certificate of
    ``client_ca`` when one is given (optional at the handshake: see the module's docstring)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    if client_ca:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


class ServingTLS:
    """The server's context and the files it was loaded from."""

    def __init__(self, cert: str, key: str, client_ca: str = "") -> None:
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self.files = (cert, key, client_ca) if client_ca else (cert, key)
        self.context = server_context(cert, key, client_ca)
        self.loaded = stamp(self.files)

    @property
    def asks_clients(self) -> bool:
        return bool(self.client_ca)

    def refresh(self) -> bool:
        """Load the files again if they changed since last loaded; whether they were. Files that
        cannot be loaded (half written) leave the context as it was, to be tried again."""
        now = stamp(self.files)
        if now is None or now == self.loaded:
            return False
        try:
            self.context.load_cert_chain(self.cert, self.key)
            if self.client_ca:
                self.context.load_verify_locations(self.client_ca)
        except (OSError, ssl.SSLError) as err:
            log.warning("the metrics certificate files changed but cannot be loaded yet", extra={"error": str(err)})
            return False
        self.loaded = now
        log.info("the metrics certificate was loaded again", extra={"file": self.cert})
        return True

    async def maintain(self) -> None:
        self.refresh()


def from_config(config: ControllerConfig) -> ServingTLS | None:
    """The metrics server's TLS as configured; None for plain HTTP. Raises StartupError, saying
    what to do, when the files are missing or cannot be loaded."""
    if not config.metrics_cert_file:
        return None
    files = [config.metrics_cert_file, config.metrics_key_file, config.metrics_client_ca_file]
    missing = [f for f in files if f and not os.path.isfile(f)]
    if missing:
        raise StartupError(
            f"the metrics certificate is missing ({', '.join(missing)}): mount its Secret there "
            "(deploy/components/metrics-tls), or leave --metrics-cert-file empty to serve plain HTTP"
        )
    try:
        return ServingTLS(config.metrics_cert_file, config.metrics_key_file, config.metrics_client_ca_file)
    except (OSError, ssl.SSLError) as err:
        raise StartupError(
            f"cannot load the metrics certificate ({config.metrics_cert_file}, {config.metrics_key_file}): {err}; "
            "they must be a PEM certificate and its private key"
        ) from None
