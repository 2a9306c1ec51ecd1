"""A cell on every rank of an interactive Trainer: in each pod, `python3 -m
trainerop_sdk.interactive run` through the API server's exec (RBAC ``pods/exec``: nothing else
reaches the ranks), the ranks side by side, each line handed over as it arrives."""

import codecs
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lightkube import Client

from .logs import container_of, rank_of

SERVE = ["python3", "-m", "trainerop_sdk.interactive", "serve"]  # an interactive rank's command
RUN = ["python3", "-m", "trainerop_sdk.interactive", "run"]  # one cell, on stdin
Sink = Callable[[str, str], None]  # (rank, line)


class Lines:
    """A binary stream (the exec's stdout) cut into lines for ``sink``; the rest on ``close``."""

    def __init__(self, rank: str, sink: Sink) -> None:
        self.rank, self.sink = rank, sink
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._rest = ""

    def write(self, data: bytes) -> int:
        *lines, self._rest = (self._rest + self._decoder.decode(data)).split("\n")
        for text in lines:
            self.sink(self.rank, text)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if self._rest:
            self.sink(self.rank, self._rest)
            self._rest = ""


def run_everywhere(
    api: Client, namespace: str, trainer: str, pods: Sequence[Mapping[str, Any]], source: str, sink: Sink
) -> dict[str, int]:
    """Run ``source`` on each pod's rank at once; each rank's exit code (0: the cell ran; 1: it
    raised; 2: the pod is not interactive; -1: the exec itself failed, said in a line)."""
    results: dict[str, int] = {}

    def one(pod: Mapping[str, Any]) -> None:
        rank = rank_of(trainer, pod)
        out = Lines(rank, sink)
        try:
            response = api.exec(
                str(pod["metadata"]["name"]),
                namespace=namespace,
                container=container_of(pod),
                command=RUN,
                stdin=source,
                stdout=out,
                stderr=out,
            )
            results[rank] = response.exit_code
        except Exception as err:  # one rank's failure is that rank's: the others' output stands
            sink(rank, f"(the cell could not be run here: {err})")
            results[rank] = -1
        finally:
            out.close()

    threads = [threading.Thread(target=one, args=(pod,), daemon=True) for pod in pods]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return dict(sorted(results.items()))
