"""The data scientists' client, its pure parts: Trainers it builds (a function shipped as source
runs as written), the progress line, failures said with what to do, `describe` from the API
server's record of field owners, the tables (issue 21)."""

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trainerop_client.describe import describe, owners
from trainerop_client.errors import TrainerClientError, refused
from trainerop_client.manifest import function_program, trainer_manifest
from trainerop_client.progress import Snapshot, line, time_left
from trainerop_client.tables import trainers_table

NOW = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)


def fit(rows: int, rate: float = 0.1) -> None:
    import json  # a shipped function does its own imports

    print(json.dumps({"rows": rows, "rate": rate}))


def test_a_function_runs_in_the_pod_as_written_with_its_arguments() -> None:
    command, env = function_program(fit, {"rows": 3})
    assert command[:2] == ["python3", "-c"]
    ran = subprocess.run([sys.executable, "-c", command[2]], env=env, capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == '{"rows": 3, "rate": 0.1}'


@pytest.mark.parametrize(
    ("func", "kwargs", "complaint"),
    [
        (lambda: None, {}, "a lambda has no source"),
        (print, {}, "pass a function defined with def"),
        (fit, {"rows": object()}, "the arguments must be JSON"),
    ],
)
def test_what_cannot_be_shipped_is_said(func: Any, kwargs: dict[str, Any], complaint: str) -> None:
    with pytest.raises(TrainerClientError, match=complaint):
        function_program(func, kwargs)


def test_a_trainer_without_a_name_gets_one_from_the_api_server() -> None:
    m = trainer_manifest("img", workers=3, epochs=2, env={"A": "1"}, extra={"profile": "gpu"})
    assert m["metadata"] == {"generateName": "train-"}
    assert m["spec"] == {
        "epochs": 2,
        "image": "img",
        "framework": "generic",
        "topology": {"workers": 3},
        "env": [{"name": "A", "value": "1"}],
        "profile": "gpu",
    }


def trainer(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "llama", "namespace": "team"}, "spec": {"epochs": 10}, "status": status}


RUNNING = trainer(
    phase="Running",
    reason="Running",
    message="5 pods running",
    progress={
        "percent": 30,
        "epoch": 3,
        "step": 1200,
        "totalSteps": 4000,
        "estimatedCompletionTime": "2026-01-01T00:22:30Z",
        "metrics": {"loss": "0.12"},
    },
    topology={"replicas": {"worker": {"restarts": 1}, "ps": {"restarts": 1}}},
    checkpoint={"latest": "llama-step-1200"},
)
LINES = [
    (
        "running",
        RUNNING,
        "Running · epoch 3/10 · step 1200/4000 · ETA 12m30s · restarts 2 · checkpoint llama-step-1200 · loss 0.12",
    ),
    ("new", trainer(), "Pending · epoch 0/10 · step 0 · ETA - · restarts 0"),
    (
        "waiting for capacity",
        trainer(phase="Pending", reason="Unschedulable"),
        "Pending (Unschedulable) · epoch 0/10 · step 0 · ETA - · restarts 0",
    ),
    (
        "finished: no ETA",
        trainer(phase="Succeeded", reason="Succeeded"),
        "Succeeded · epoch 0/10 · step 0 · restarts 0",
    ),
]


@pytest.mark.parametrize(("obj", "expected"), [r[1:] for r in LINES], ids=[r[0] for r in LINES])
def test_the_progress_line(obj: dict[str, Any], expected: str) -> None:
    assert line(Snapshot.of(obj), NOW) == expected


@pytest.mark.parametrize(
    ("seconds", "shown"), [(None, "-"), (-5, "0s"), (42, "42s"), (750, "12m30s"), (3 * 3600 + 300, "3h05m")]
)
def test_time_left(seconds: int | None, shown: str) -> None:
    assert time_left(None if seconds is None else NOW + timedelta(seconds=seconds), NOW) == shown


REFUSALS = [
    (404, "NotFound", "the server could not find the requested resource", "no Trainer API"),
    (404, "NotFound", 'trainers "x" not found', 'trainers "x" not found in namespace team'),
    (403, "Forbidden", "cannot create", "ask your platform team for the edit role in namespace team"),
    (409, "AlreadyExists", 'trainers "x" already exists', "pick another name, or delete it first"),
    (422, "Invalid", "spec.epochs: Invalid value: 0", "the API server refused it: spec.epochs: Invalid value: 0"),
    (500, "InternalError", "boom", "the API server answered 500: boom"),
    (
        500,
        "InternalError",
        'failed calling webhook "validate-trainer": connection refused',
        "admission webhook did not answer",
    ),
]


@pytest.mark.parametrize(("code", "reason", "message", "said"), REFUSALS, ids=[r[1] + str(r[0]) for r in REFUSALS])
def test_refusals_say_what_to_do(code: int, reason: str, message: str, said: str) -> None:
    assert said in str(refused(code, reason, message, "create Trainer x", "team"))


def managed(manager: str, status: dict[str, Any]) -> dict[str, Any]:
    return {"manager": manager, "operation": "Apply", "subresource": "status", "fieldsV1": {"f:status": status}}


def test_describe_groups_the_status_by_the_controller_that_wrote_it() -> None:
    obj = {
        "metadata": {
            "name": "llama",
            "namespace": "team",
            "managedFields": [
                {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}},
                managed(
                    "trainer-operator/trainer",
                    {"f:phase": {}, "f:progress": {}, "f:conditions": {'k:{"type":"Running"}': {}}},
                ),
                managed("trainer-operator/quota", {"f:quota": {}, "f:conditions": {'k:{"type":"QuotaAdmitted"}': {}}}),
            ],
        },
        "status": {
            "phase": "Running",
            "reason": "Running",
            "message": "2 pods running",
            "progress": {"percent": 40, "epoch": 4},
            "quota": {"capacityType": "spot", "cost": {"perHour": "$3"}},
            "conditions": [
                {"type": "Running", "status": "True", "reason": "AllPodsRunning", "message": "2 pods running"},
                {"type": "QuotaAdmitted", "status": "True", "reason": "Admitted", "message": "on spot"},
            ],
        },
    }
    assert owners(obj) == (
        {"phase": "trainer", "progress": "trainer", "quota": "quota"},
        {"Running": "trainer", "QuotaAdmitted": "quota"},
    )
    events = [{"lastTimestamp": "t1", "type": "Normal", "reason": "CreatedPods", "message": "created 2 pods"}]
    assert describe(obj, events) == "\n".join(
        [
            "Trainer team/llama: Running (Running: 2 pods running)",
            "├─ trainer",
            "│  phase=Running",
            "│  progress.percent=40",
            "│  progress.epoch=4",
            "│  Running=True AllPodsRunning: 2 pods running",
            "├─ quota",
            "│  quota.capacityType=spot",
            "│  quota.cost.perHour=$3",
            "│  QuotaAdmitted=True Admitted: on spot",
            "├─ (no controller)",
            "│  reason=Running",
            "│  message=2 pods running",
            "└─ events",
            "   t1 Normal CreatedPods: created 2 pods",
        ]
    )


def test_the_table_of_trainers() -> None:
    assert trainers_table([RUNNING, trainer(phase="Succeeded")], NOW).splitlines() == [
        "NAME    PHASE       PROGRESS   TIME LEFT   EPOCH   RESTARTS   CHECKPOINT        REASON",
        "llama   Running     30%        12m30s      3/10    2          llama-step-1200   Running",
        "llama   Succeeded   0%                     0/10    0",
    ]


def test_the_notebook_extension_registers_its_cell_magic(capsys: pytest.CaptureFixture[str]) -> None:
    """In a real IPython shell: `%load_ext` gives `%%trainer`; a line it cannot parse, and a
    cluster it cannot reach, are said in the cell's output, not as a traceback."""
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()  # type: ignore[no-untyped-call]
    assert shell is not None
    shell.run_line_magic("load_ext", "trainerop_client.notebook")
    assert "trainer" in shell.magics_manager.magics["cell"]
    shell.run_cell_magic("trainer", "", "print(1)")
    assert "the following arguments are required: name" in capsys.readouterr().err
    shell.run_cell_magic("trainer", "ranks --kubeconfig /nonexistent/kubeconfig", "print(1)")
    assert "error: no cluster to talk to" in capsys.readouterr().err
