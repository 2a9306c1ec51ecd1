"""The verify controller's own flags (docs/controllers.md, docs/image-verification.md)."""

from dataclasses import dataclass
from pathlib import Path

from trainerop_common.config import flag

from .references import parse_mirrors


@dataclass(frozen=True)
class VerifyConfig:
    registry_mirrors: str = flag(
        "",
        "registries whose images the cluster pulls through a mirror, and where: <registry>=<host[:port][/path]>, "
        "comma-separated (docker.io=10.0.0.5:5000/docker.io); the controller reads digests and signatures there",
    )
    registry_ca_file: str = flag("", "a PEM bundle of CAs trusted for registries besides the system's")
    registry_timeout_seconds: float = flag(10.0, "how long one registry request may take")
    recheck_refused_seconds: float = flag(
        60.0, "how long before a refused run's images are checked again (they may have been signed since)"
    )

    def problems(self) -> list[str]:
        found = []
        try:
            parse_mirrors(self.registry_mirrors)
        except ValueError as err:
            found.append(f"--registry-mirrors: {err}")
        if self.registry_ca_file and not Path(self.registry_ca_file).is_file():
            found.append(f"--registry-ca-file: no file {self.registry_ca_file}")
        return found
