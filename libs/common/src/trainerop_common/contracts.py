"""Environment variables the trainer controller itself sets in training containers (DESIGN §5).

Another concern's contribution cannot set them: the operator's value wins. The profile
controller reports such a clash; a trainer unit test keeps this list complete.
"""

OPERATOR_ENV = frozenset(
    {
        # The operator's own contract, every framework.
        "TRAINER_NAME",
        "REPLICA_TYPE",
        "REPLICA_INDEX",
        "EPOCHS",
        "CHECKPOINT_DIR",
        "RESUME_FROM",
        "POD_NAME",
        # Kubeflow-compatible rendezvous variables.
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "TF_CONFIG",
        "COORDINATOR_ADDRESS",
        "COORDINATOR_PORT",
        "NUM_PROCESSES",
        "PROCESS_ID",
        "WORKER_PORT",
        "WORKER_ADDRS",
        "PYTHONUNBUFFERED",
    }
)
OPERATOR_ENV_PREFIXES = ("PET_",)  # torch elastic (torchrun) settings


def set_by_operator(name: str) -> bool:
    return name in OPERATOR_ENV or name.startswith(OPERATOR_ENV_PREFIXES)
