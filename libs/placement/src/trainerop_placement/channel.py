"""Both ends of the placement plugin's connection: the quota controller's client (a deadline on
every call) and a plugin's server, plaintext or mutual TLS (docs/placement-plugins.md).

Mutual TLS reads a directory in Kubernetes' TLS Secret layout: ``ca.crt`` (the CA that signed the
other end), ``tls.crt`` and ``tls.key`` (this end's certificate and key)."""

from pathlib import Path

import grpc
from grpc import aio

from .v1 import placement_pb2, placement_pb2_grpc

CA_FILE, CERT_FILE, KEY_FILE = "ca.crt", "tls.crt", "tls.key"
# The name the plugin's certificate is checked for: the sidecar listens on localhost.
DEFAULT_SERVER_NAME = "localhost"


def read_tls(directory: str) -> tuple[bytes, bytes, bytes]:
    """(CA, certificate, key) from ``directory``; says which file is missing."""
    folder = Path(directory)
    out = []
    for name in (CA_FILE, CERT_FILE, KEY_FILE):
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: mutual TLS needs {CA_FILE}, {CERT_FILE} and {KEY_FILE}")
        out.append(path.read_bytes())
    return out[0], out[1], out[2]


class PlacementClient:
    """One channel to the plugin, opened on first use; each call has a deadline."""

    def __init__(self, target: str, tls_dir: str = "", server_name: str = DEFAULT_SERVER_NAME) -> None:
        self.target = target
        self.tls_dir = tls_dir
        self.server_name = server_name
        self._channel: aio.Channel | None = None

    def _open(self) -> aio.Channel:
        if not self.tls_dir:
            return aio.insecure_channel(self.target)
        ca, cert, key = read_tls(self.tls_dir)
        credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
        options = (("grpc.ssl_target_name_override", self.server_name),)
        return aio.secure_channel(self.target, credentials, options=options)

    async def suggest(
        self, context: placement_pb2.WorkerContext, deadline_seconds: float
    ) -> placement_pb2.PlacementHint:
        """The plugin's hint, within the deadline (sent to the plugin, which sees it); raises
        ``grpc.aio.AioRpcError`` (DEADLINE_EXCEEDED on a timeout, UNAVAILABLE when it is down) or
        ``FileNotFoundError`` (TLS files)."""
        if self._channel is None:
            self._channel = self._open()
        stub = placement_pb2_grpc.PlacementSchedulerStub(self._channel)
        hint: placement_pb2.PlacementHint = await stub.SuggestPlacement(context, timeout=deadline_seconds)
        return hint

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


async def serve(
    servicer: placement_pb2_grpc.PlacementSchedulerServicer, address: str, tls_dir: str = ""
) -> tuple[aio.Server, int]:
    """Start a plugin's server on ``address`` (``host:port``; port 0 picks one), requiring a client
    certificate signed by the CA in ``tls_dir`` when one is given; returns it and its port."""
    server = aio.server()
    placement_pb2_grpc.add_PlacementSchedulerServicer_to_server(servicer, server)
    if tls_dir:
        ca, cert, key = read_tls(tls_dir)
        credentials = grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)
        port = server.add_secure_port(address, credentials)
    else:
        port = server.add_insecure_port(address)
    await server.start()
    return server, port
