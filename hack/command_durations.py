#!/usr/bin/env python3
"""Pass tox's output through and, at its end, say how long each of its commands took.

    tox 2>&1 | python3 hack/command_durations.py [--out FILE]

tox prints ``ENV: commands[N]> COMMAND`` as each command starts (and ``ENV: install_deps> pip
install ...`` as it installs the environment); each lasts until the next one starts or the output
ends. The table goes to stdout after everything else (and to FILE).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

COMMAND_STARTS = re.compile(r"^(?P<env>[\w.-]+): (?:commands\[\d+\]|(?P<install>install_deps))> (?P<command>.+)$")


def durations(lines: Iterable[str], clock: Iterator[float]) -> Iterator[tuple[str, float] | str]:
    """Each line as it comes, then (command, seconds) for every command once it has ended."""
    current: tuple[str, float] | None = None
    for line in lines:
        started = COMMAND_STARTS.match(line.rstrip("\n"))
        if started:
            now = next(clock)
            if current:
                yield current[0], now - current[1]
            what = "installing the environment" if started["install"] else started["command"]
            current = (f"{started['env']}: {what}", now)
        yield line
    if current:
        yield current[0], next(clock) - current[1]


def table(rows: list[tuple[str, float]]) -> str:
    width = 100
    lines = ["tox commands, in order, and how long each took:"]
    for command, seconds in rows:
        shown = command if len(command) <= width else command[: width - 1] + "…"
        lines.append(f"  {seconds:8.1f} s  {shown}")
    lines.append(f"  {sum(s for _, s in rows):8.1f} s  in all")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    clock = iter(time.monotonic, None)
    rows: list[tuple[str, float]] = []
    for item in durations(sys.stdin, clock):
        if isinstance(item, str):
            sys.stdout.write(item)
            sys.stdout.flush()
        else:
            rows.append(item)
    report = table(rows)
    print(report)
    if args.out:
        args.out.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
