"""Kubernetes resource quantities as exact decimals ("500m" -> 0.5, "40Gi" -> 42949672960)."""

import re
from decimal import Decimal

_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$")


def parse_quantity(value: int | str) -> Decimal:
    if isinstance(value, int):
        return Decimal(value)
    m = _RE.match(value.strip())
    if not m:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    number, suffix = m.group(1), m.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return Decimal(number) * (Decimal(10) ** int(suffix[1:]))
    return Decimal(number) * _SUFFIX[suffix]


def format_quantity(value: Decimal) -> str:
    """A plain decimal rendering (no suffix), for messages."""
    text = format(value.normalize(), "f")
    return text
