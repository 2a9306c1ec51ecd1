"""The trainer controller's own flags (docs/controllers.md, docs/trainer.md)."""

from collections.abc import Mapping
from dataclasses import dataclass

from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.config import flag
from trainerop_common.contracts import CONCERNS, GATE_CONDITIONS, asks
from trainerop_common.nodes import NODE_LOST_SECONDS

from .model import ModelSettings
from .pods import PodSettings
from .views import RestartBackoff


def env_gates(environ: Mapping[str, str]) -> str:
    """Gates announced by Kustomize components: TRAINEROP_GATE_<CONCERN>=true, one per concern,
    so that components can be combined freely; TRAINEROP_GATES (comma-separated) adds to them."""
    named = [c for c in CONCERNS if environ.get(f"TRAINEROP_GATE_{c.upper()}", "").lower() == "true"]
    return ",".join([*named, environ.get("TRAINEROP_GATES", "")])


@dataclass(frozen=True)
class TrainerConfig:
    gates: tuple[str, ...] = flag(
        (),
        f"deployed concerns whose condition gates pod creation, comma-separated: {','.join(CONCERNS)}",
        env_default=env_gates,
    )
    init_image: str = flag(
        PodSettings.init_image, "image of the init container that waits for the rendezvous address (sh, nslookup)"
    )
    model_init_image: str = flag(
        ModelSettings.image,
        "image of the init container that fetches and checks spec.model (the operator's image: trainerop-model-init)",
    )
    hf_endpoint: str = flag(
        ModelSettings.endpoint,
        "the Hugging Face Hub (or mirror) that model initializers fetch from unless spec.model.endpoint says "
        "(empty: https://huggingface.co)",
    )
    restart_backoff_seconds: float = flag(
        RestartBackoff.base, "wait before a role's 2nd replacement in a row, doubling after"
    )
    restart_backoff_cap_seconds: float = flag(RestartBackoff.cap, "the longest wait before a replacement")
    node_lost_seconds: float = flag(
        NODE_LOST_SECONDS, "replace pods of a node not Ready this long (a deleted node: at once)"
    )
    force_delete_unreachable: bool = flag(
        False,
        "force-delete the pods of a node not Ready for --node-lost-seconds and replace them at once; only where "
        "such a node is known to be stopped (fenced): off, each is deleted and replaced once its node confirms "
        "it stopped or the node is deleted, so no rank runs twice",
    )
    progress_coalesce_seconds: float = flag(
        0.5,
        "wait this long before writing counts after a pod only progressed (scheduled, started, ready), "
        "so one status write carries its siblings' progress too; failures and deletions act at once",
    )
    status_counts_seconds: float = flag(
        2.0,
        "write a status that only moves pod counts (workers, ready) at most this often per Trainer, so pods "
        "starting one by one make one write; phase, conditions, restarts and progress are written at once "
        "(0: every change)",
    )
    gates_grace_seconds: float = flag(
        5.0,
        "a new Trainer whose gates have not answered yet gets its first status after this long at most, so that "
        "it usually says its pods were created rather than first that it waits for the gates (0: at once)",
    )
    admission_node_fit: bool = flag(
        True,
        "refuse a Trainer whose pods fit no node of the cluster (turn off where an autoscaler adds nodes on demand)",
    )

    def gates_for(self, spec: TrainerSpec) -> tuple[str, ...]:
        """The condition types a Trainer of this spec waits for: of the deployed concerns that
        gate (audit never does), those its spec gives something to decide."""
        return tuple(GATE_CONDITIONS[g] for g in self.gates if g in GATE_CONDITIONS and asks(spec, g))

    def problems(self) -> list[str]:
        unknown = sorted(set(self.gates) - set(CONCERNS))
        return [f"unknown gate(s) {unknown}; choose from {', '.join(CONCERNS)}"] if unknown else []
