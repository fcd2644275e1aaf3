"""Declared, typed string parameters (Triton config ``parameters`` carry only strings).

A module that accepts parameters declares them as ``Parameter`` objects; ``parse_parameters``
turns the raw strings into typed values and refuses unknown names and malformed values with a
message naming the parameter, the value and what is accepted.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from ge_python_backend.errors import ConfigError

E = TypeVar("E", bound=Enum)


class Choice(str, Enum):
    """A string enum whose members print as their values (in messages and config files)."""

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class Parameter:
    """A named string parameter with its parser, default and one-line help."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    accepted: str
    help: str
    #: the value is a secret: messages never show it
    secret: bool = False

    def read(self, raw: str) -> Any:
        try:
            return self.parse(raw.strip())
        except (ValueError, TypeError) as exc:
            detail = f" ({exc})" if str(exc) else ""
            shown = "(not shown)" if self.secret else repr(raw)
            raise ConfigError(f"parameter {self.name!r} has value {shown}{detail}; accepted: {self.accepted}") from None


def parse_int(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        value = int(raw)
        if minimum is not None and value < minimum:
            raise ValueError(f"must be >= {minimum}")
        if maximum is not None and value > maximum:
            raise ValueError(f"must be <= {maximum}")
        return value

    return parse


def parse_float(minimum: float | None = None, maximum: float | None = None) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        value = float(raw)
        if minimum is not None and not value >= minimum:  # NaN fails too
            raise ValueError(f"must be >= {minimum}")
        if maximum is not None and not value <= maximum:
            raise ValueError(f"must be <= {maximum}")
        return value

    return parse


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_bool(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("")


def parse_choice(*choices: str) -> Callable[[str], str]:
    """One of ``choices``; a near miss names the closest one."""

    def parse(raw: str) -> str:
        if raw not in choices:
            close = difflib.get_close_matches(raw, choices, n=1)
            raise ValueError(f"did you mean {close[0]!r}?" if close else "")
        return raw

    return parse


def parse_enum(kind: type[E]) -> Callable[[str], E]:
    """A member of the string enum ``kind``, by value."""

    def parse(raw: str) -> E:
        try:
            return kind(raw)
        except ValueError:
            raise ValueError("") from None

    return parse


def parse_list(item: Callable[[str], Any]) -> Callable[[str], tuple]:
    """Comma-separated list; empty items are refused."""

    def parse(raw: str) -> tuple:
        parts = [p.strip() for p in raw.split(",")]
        if not raw or any(not p for p in parts):
            raise ValueError("expected a comma-separated list with no empty items")
        return tuple(item(p) for p in parts)

    return parse


def parse_parameters(
    raw: Mapping[str, str], declared: Iterable[Parameter], ignored: Iterable[str] = ()
) -> dict[str, Any]:
    """Typed values for every declared parameter (defaults filled in).

    Names in ``ignored`` are accepted and skipped (parameters that Triton itself reads).
    """
    by_name = {p.name: p for p in declared}
    skip = set(ignored)
    unknown = sorted(set(raw) - set(by_name) - skip)
    if unknown:
        raise ConfigError(
            f"unknown parameter {unknown[0]!r} (value {raw[unknown[0]]!r}); accepted parameters: "
            + ", ".join(sorted(by_name))
        )
    values = {name: p.default for name, p in by_name.items()}
    for name, text in raw.items():
        if name in by_name:
            values[name] = by_name[name].read(text)
    return values
