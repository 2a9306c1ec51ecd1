"""Progress bars of Trainers: one tqdm bar per run (its percent done) with the run's line after it;
``tqdm.auto`` draws a widget in Jupyter and text in a terminal."""

from typing import Any, TextIO

from tqdm.auto import tqdm

from .progress import Snapshot, line

BAR = "{desc} {percentage:3.0f}%|{bar:20}| "  # then the run's line (not tqdm's postfix: it starts with ", ")


def bar_format(text: str) -> str:
    """The bar, then ``text`` as it is (its braces are not format fields)."""
    return BAR + text.replace("{", "{{").replace("}", "}}")


class ProgressBars:
    def __init__(self, file: TextIO | None = None) -> None:
        self._file = file
        self._bars: dict[str, Any] = {}

    def show(self, snapshot: Snapshot) -> None:
        bar = self._bars.get(snapshot.name)
        if bar is None:
            bar = tqdm(total=100, desc=snapshot.name, bar_format=BAR, file=self._file, dynamic_ncols=True)
            self._bars[snapshot.name] = bar
        bar.n = snapshot.percent
        bar.bar_format = bar_format(line(snapshot))
        bar.refresh()

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()
