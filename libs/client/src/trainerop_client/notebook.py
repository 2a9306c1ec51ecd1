"""The notebook bridge: ``%load_ext trainerop_client.notebook``, then a ``%%trainer NAME`` cell
runs on every rank of the interactive Trainer NAME (:meth:`TrainerClient.interactive`), each
rank's output streamed into the cell under its rank, the run's progress bar above it, and the
ranks' variables kept from cell to cell as a kernel keeps them."""

import argparse
import queue
import shlex
import sys
import threading
from typing import Any

from IPython.core.magic import Magics, cell_magic, magics_class

from .client import TrainerClient
from .display import ProgressBars
from .errors import TrainerClientError
from .progress import Snapshot

POLL_SECONDS = 0.2  # how often the cell looks for the ranks' lines


def run_in_cell(client: TrainerClient, name: str, source: str) -> dict[str, int]:
    """The ranks run in a thread; their lines are printed here, on the cell's own thread, so they
    land in this cell's output in the order they came."""
    lines: queue.Queue[tuple[str, str]] = queue.Queue()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["codes"] = client.run_cell(name, source, lambda rank, text: lines.put((rank, text)))
        except TrainerClientError as err:
            outcome["error"] = err

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    while worker.is_alive() or not lines.empty():
        try:
            rank, text = lines.get(timeout=POLL_SECONDS)
        except queue.Empty:
            continue
        print(f"[{rank}] {text}", flush=True)
    if "error" in outcome:
        raise outcome["error"]
    codes: dict[str, int] = outcome["codes"]
    return codes


def magic_line() -> argparse.ArgumentParser:
    line = argparse.ArgumentParser(prog="%%trainer", description="run the cell on every rank of a Trainer")
    line.add_argument("name", help="an interactive Trainer (TrainerClient.interactive)")
    line.add_argument("-n", "--namespace", help="its namespace (default: the kubeconfig context's)")
    line.add_argument("--kubeconfig", help="the kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    return line


@magics_class
class TrainerMagics(Magics):
    @cell_magic
    def trainer(self, line: str, cell: str) -> None:
        try:
            args = magic_line().parse_args(shlex.split(line))
        except SystemExit:  # argparse said what is wrong with the line
            return
        try:
            client = TrainerClient(args.namespace, kubeconfig=args.kubeconfig)
            bars = ProgressBars()
            bars.show(Snapshot.of(client.get(args.name)))
            bars.close()
            codes = run_in_cell(client, args.name, cell)
        except TrainerClientError as err:
            print(f"error: {err}", file=sys.stderr)
            return
        failed = [rank for rank, code in codes.items() if code != 0]
        if failed:
            print(f"the cell failed on {', '.join(failed)} (its traceback is above)", file=sys.stderr)


def load_ipython_extension(ipython: Any) -> None:
    ipython.register_magics(TrainerMagics)
