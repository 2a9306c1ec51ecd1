"""Kubernetes resource quantities as exact decimals ("500m" -> 0.5, "40Gi" -> 42949672960)."""

import re
from decimal import Decimal

# "", n, u, m, then decimal (k, M, G, T, P, E) and binary (Ki, Mi, ...) multiples.
_SUFFIX = {"": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3")}
_SUFFIX |= {s: Decimal(1000) ** i for i, s in enumerate("kMGTPE", 1)}
_SUFFIX |= {f"{s}i": Decimal(1024) ** i for i, s in enumerate("KMGTPE", 1)}
_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:[eE]([+-]?[0-9]+)|([KMGTPE]i|[numkMGTPE]))?$")


def parse_quantity(value: int | str) -> Decimal:
    if isinstance(value, int):
        return Decimal(value)
    m = _RE.match(value.strip())
    if not m:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    number, exponent, suffix = m.group(1), m.group(2), m.group(3) or ""
    if exponent is not None:  # "1e3"; "1Ei" is a binary suffix, not an exponent
        return Decimal(number) * (Decimal(10) ** int(exponent))
    return Decimal(number) * _SUFFIX[suffix]


def format_quantity(value: Decimal) -> str:
    """A plain decimal rendering (no suffix), for messages."""
    text = format(value.normalize(), "f")
    return text
