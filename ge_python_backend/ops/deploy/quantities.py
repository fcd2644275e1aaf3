"""Kubernetes resource quantities ("500m", "2", "8Gi", "512M"), read and written.

Only the forms a user types for CPU, memory and volume sizes are accepted: a decimal number
with an optional binary (Ki Mi Gi Ti Pi Ei) or decimal (m k M G T P E) suffix. Kubernetes'
own definition: k8s.io/apimachinery pkg/api/resource/quantity.go (the schema only says
"int or string", so a typo would apply and then fail at admission).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from ge_python_backend.errors import ConfigError

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^(?P<number>[0-9]+(\.[0-9]+)?)(?P<suffix>[a-zA-Z]*)$")

MIB = 2**20
GIB = 2**30


def parse_quantity(flag: str, text: str) -> Decimal:
    """The value of ``text``; ConfigError naming ``flag`` when it is not a quantity."""
    match = _QUANTITY.match(text.strip())
    suffix = match.group("suffix") if match else ""
    if not match or suffix not in _SUFFIXES:
        raise ConfigError(
            f"{flag} {text!r}: expected a Kubernetes quantity such as 2, 500m, 8Gi or 512Mi "
            f"(suffixes: {', '.join(s for s in _SUFFIXES if s)})"
        )
    try:
        return Decimal(match.group("number")) * _SUFFIXES[suffix]
    except InvalidOperation:  # pragma: no cover - the pattern admits only plain decimals
        raise ConfigError(f"{flag} {text!r}: not a number") from None


def parse_bytes(flag: str, text: str) -> int:
    """A size in bytes (memory, shared memory, volume size); must be at least 1 MiB."""
    value = parse_quantity(flag, text)
    if value < MIB:
        raise ConfigError(f"{flag} {text!r}: expected at least 1Mi (a size in bytes, e.g. 512Mi or 8Gi)")
    return int(value)


def parse_cpu(flag: str, text: str) -> Decimal:
    """CPU cores (0.001 steps, at least 1m)."""
    value = parse_quantity(flag, text)
    if value < Decimal("0.001"):
        raise ConfigError(f"{flag} {text!r}: expected at least 1m (a CPU amount such as 2 or 500m)")
    return value


def mebibytes(size: int) -> str:
    """``size`` bytes rounded up to whole MiB, as a quantity ("256Mi")."""
    return f"{math.ceil(size / MIB)}Mi"


def gibibytes(size: int) -> str:
    """``size`` bytes rounded up to whole GiB, as a quantity ("2Gi")."""
    return f"{max(1, math.ceil(size / GIB))}Gi"
