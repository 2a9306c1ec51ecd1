"""A run's logs: every pod's training container, each line prefixed with the pod's role and index;
followed, the pods' streams are read side by side and their lines come as they arrive."""

import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from lightkube import Client

from trainerop_sdk.names import DEFAULT_CONTAINER_ANNOTATION

END = object()  # a pod's stream ended


def rank_of(trainer: str, pod: Mapping[str, Any]) -> str:
    """``worker-1`` of pod ``llama-worker-1``."""
    name = str(pod["metadata"]["name"])
    return name.removeprefix(f"{trainer}-")


def container_of(pod: Mapping[str, Any]) -> str:
    """The training container: the one the trainer names for `kubectl logs`, else the first."""
    named = (pod["metadata"].get("annotations") or {}).get(DEFAULT_CONTAINER_ANNOTATION)
    return str(named or pod["spec"]["containers"][0]["name"])


def prefixed(rank: str, lines: Iterator[str]) -> Iterator[str]:
    for text in lines:
        yield f"[{rank}] {text.rstrip(chr(10))}"


def follow_logs(
    api: Client, namespace: str, trainer: str, pods: Sequence[Mapping[str, Any]], follow: bool, tail: int | None
) -> Iterator[str]:
    def stream(pod: Mapping[str, Any]) -> Iterator[str]:
        name = str(pod["metadata"]["name"])
        lines = api.log(name, namespace=namespace, container=container_of(pod), follow=follow, tail_lines=tail)
        return prefixed(rank_of(trainer, pod), lines)

    if not follow:
        for pod in pods:
            yield from stream(pod)
        return
    arrived: queue.Queue[object] = queue.Queue()

    def pump(pod: Mapping[str, Any]) -> None:
        try:
            for text in stream(pod):
                arrived.put(text)
        except Exception as err:  # one pod's stream failing (it was deleted) ends only that one
            arrived.put(f"[{rank_of(trainer, pod)}] (log ended: {err})")
        finally:
            arrived.put(END)

    for pod in pods:
        threading.Thread(target=pump, args=(pod,), daemon=True).start()
    open_streams = len(pods)
    while open_streams:
        item = arrived.get()
        if item is END:
            open_streams -= 1
        else:
            yield str(item)
