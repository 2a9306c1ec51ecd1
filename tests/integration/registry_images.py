"""Small images pushed to the local cluster's registry, and its API read and written as a client
of the distribution spec does (tests/integration/conftest.py's ``local_registry`` runs it)."""

import ssl
import urllib.request
from pathlib import Path

from testbed import cluster as cluster_tool
from testbed import images, registry

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def push_small_image(tmp_path: Path, ref: str) -> str:
    """A small FROM-scratch image, different for every ``ref``, built and pushed; its digest."""
    context = tmp_path / ref.rsplit("/", 1)[-1].replace(":", "-")
    (context / "rootfs").mkdir(parents=True)
    (context / "rootfs" / "ref").write_text(ref)
    images.build_image(ref, context, "FROM scratch\nCOPY rootfs/ /\n")
    return images.push(cluster_tool.RUN_DIR, ref)


def registry_request(path: str, accept: str = OCI_MANIFEST, put: bytes | None = None) -> bytes:
    """``GET`` (or ``PUT`` of a manifest) ``/v2/<path>`` of the local registry, over its TLS."""
    context = ssl.create_default_context(cafile=str(cluster_tool.RUN_DIR / "pki" / "ca.crt"))
    headers = {"Accept": accept} if put is None else {"Content-Type": accept}
    url = f"https://{registry.address()}/v2/{path}"
    request = urllib.request.Request(url, data=put, headers=headers, method="GET" if put is None else "PUT")
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        body: bytes = response.read()
    return body
