"""argparse ``type=`` converters shared by the verbs: a bad value becomes argparse's one-line
"argument --flag: ..." error naming the value and what was expected."""

from __future__ import annotations

import argparse

from ge_python_backend.params import parse_int, parse_list
from ge_python_backend.serving.sequences import StatePair, parse_state_pairs


def int_list(text: str) -> tuple[int, ...]:
    """Comma-separated integers >= 1 (batch sizes, gears, concurrency levels)."""
    try:
        return parse_list(parse_int(1))(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers >= 1 ({exc})") from None


def device_list(text: str) -> tuple[int, ...]:
    """Comma-separated device ids (integers >= 0)."""
    try:
        return parse_list(parse_int(0))(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers >= 0 ({exc})") from None


def setting(text: str) -> tuple[str, str]:
    """KEY=VALUE (the value may be empty or hold '=')."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key, value


def state_pair(text: str) -> StatePair:
    """INPUT=OUTPUT: a model input fed from the previous step's output."""
    try:
        (pair,) = parse_state_pairs(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: expected INPUT=OUTPUT ({exc})") from None
    return pair


def tensor_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """NAME:D0,D1,... (the name may hold ':'; -1 for any size)."""
    name, sep, dims = text.rpartition(":")
    try:
        shape = tuple(int(d) for d in dims.split(","))
    except ValueError:
        shape = ()
    if not sep or not name or not shape:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME:D0,D1,... (e.g. x:-1,3,224,224)")
    return name, shape
