"""Trainers as the client builds them (pure): from an image and a command, or from a Python
function whose source is shipped to the pods in the command (as Kubeflow's CustomTrainer does)."""

import inspect
import json
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trainerop_sdk.names import API_VERSION

from .errors import TrainerClientError

FUNCTION_ARGS_ENV = "TRAINER_FUNCTION_ARGS"  # the function's keyword arguments, as JSON
GENERATED_PREFIX = "train-"  # metadata.generateName of a Trainer the caller does not name


def trainer_manifest(
    image: str,
    *,
    name: str | None = None,
    epochs: int = 1,
    workers: int = 1,
    framework: str = "generic",
    command: Sequence[str] | None = None,
    args: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    resources: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A Trainer of ``workers`` pods of ``image``; ``extra``: more of its spec as the API has it
    (``{"checkpoint": {...}, "profile": "gpu"}``)."""
    spec: dict[str, Any] = {"epochs": epochs, "image": image, "framework": framework, "topology": {"workers": workers}}
    if command:
        spec["command"] = list(command)
    if args:
        spec["args"] = list(args)
    if env:
        spec["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if resources:
        spec["resources"] = dict(resources)
    spec.update(extra or {})
    metadata = {"name": name} if name else {"generateName": GENERATED_PREFIX}
    return {"apiVersion": API_VERSION, "kind": "Trainer", "metadata": metadata, "spec": spec}


def function_program(func: Callable[..., Any], kwargs: Mapping[str, Any] | None) -> tuple[list[str], dict[str, str]]:
    """The command that runs ``func(**kwargs)`` in each pod, and its env. The function travels as
    source: it must be defined with ``def`` at any level and do its own imports (its closure and
    the notebook's globals do not travel); its arguments must be JSON."""
    if func.__name__ == "<lambda>" or not inspect.isfunction(func):
        raise TrainerClientError("train(func=...): pass a function defined with def (a lambda has no source to ship)")
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError) as err:
        raise TrainerClientError(f"train(func={func.__name__}): its source cannot be read ({err})") from err
    try:
        arguments = json.dumps(dict(kwargs or {}))
    except TypeError as err:
        raise TrainerClientError(f"train(func_args=...): the arguments must be JSON ({err})") from err
    program = "\n".join(
        [
            "import json, os",
            source,
            f"{func.__name__}(**json.loads(os.environ[{FUNCTION_ARGS_ENV!r}]))",
        ]
    )
    return ["python3", "-c", program], {FUNCTION_ARGS_ENV: arguments}
