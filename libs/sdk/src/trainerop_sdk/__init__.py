"""The package training code imports (docs/trainer.md, docs/checkpoints.md).

It reads the environment contract the trainer controller sets on every training pod; progress
heartbeats and checkpoint reporting build on it.
"""

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class RunContext:
    """What a training process learns from its environment."""

    epochs: int
    checkpoint_dir: str
    resume_from: str

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "RunContext":
        env = os.environ if environ is None else environ
        return cls(
            epochs=int(env.get("EPOCHS", "1")),
            checkpoint_dir=env.get("CHECKPOINT_DIR", ""),
            resume_from=env.get("RESUME_FROM", ""),
        )
