"""Trainers from Python and from the terminal (docs/data-scientists.md): ``TrainerClient`` and
the kubectl plugin ``kubectl trainer``."""

from .client import TrainerClient
from .errors import TrainerClientError
from .progress import Snapshot

__all__ = ["Snapshot", "TrainerClient", "TrainerClientError"]
