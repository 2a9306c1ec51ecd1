"""The profile controller's own flags (docs/controllers.md)."""

from dataclasses import dataclass

from trainerop_common.config import flag


@dataclass(frozen=True)
class ProfileConfig:
    secret_recheck_seconds: float = flag(
        10.0, "how long a Secret's existence is trusted; a missing one is looked for again after this long"
    )
