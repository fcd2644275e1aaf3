"""Argument parsing and return shapes of simulated pyACL functions.

pyACL wrappers are METH_VARARGS C functions that parse with ``PyArg_ParseTuple`` (the binding's
utils_methods.h:34-45, py_init_acl.cpp:40):
arguments are positional only, counts are exact, and each format letter accepts only certain
Python types. ``acl_function`` gives a Python method the same behaviour and the same return
conventions: ``ret``; ``(outputs..., ret)``; or a plain value.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

_MASK64 = (1 << 64) - 1
_MASK32 = (1 << 32) - 1


class AclFail(Exception):
    """Raised inside a simulated function: the call returns ``ret`` and records ``message``."""

    def __init__(self, ret: int, message: str) -> None:
        super().__init__(message)
        self.ret = ret
        self.message = message


@dataclass(frozen=True)
class Signature:
    """How one function parses its arguments and shapes its result.

    ``fmt`` uses PyArg_ParseTuple letters (k K I i H h b B s f O, ``|`` before optional ones).
    ``outputs`` holds the value of each output returned on failure (ret follows them);
    ``None`` means the function returns only ``ret``. ``value`` marks a function that returns
    one plain value and no ret at all (``fail_value`` on failure).
    """

    fmt: str
    outputs: tuple[Any, ...] | None = None
    value: bool = False
    fail_value: Any = 0
    needs_init: bool = True
    locked: bool = True

    @property
    def arity(self) -> tuple[int, int]:
        """(minimum, maximum) argument counts."""
        letters = self.fmt.replace("|", "")
        return (self.fmt.index("|") if "|" in self.fmt else len(letters)), len(letters)


class AclFunction(Protocol):
    """A method made by ``acl_function``: callable, and carrying its Signature for ``api.signatures``."""

    acl_signature: Signature

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


def _integer(value: Any, fn: str, position: int) -> int:
    if isinstance(value, float):
        raise TypeError(f"{fn}() argument {position} must be int, not float")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{fn}() argument {position} must be int, not {type(value).__name__}") from None


def convert(letter: str, value: Any, fn: str, position: int) -> Any:
    """One argument as PyArg_ParseTuple converts it for ``letter``."""
    if letter in "kK":
        if not isinstance(value, int):
            raise TypeError(f"{fn}() argument {position} must be int, not {type(value).__name__}")
        return value & _MASK64
    if letter == "I":
        return _integer(value, fn, position) & _MASK32
    if letter == "B":  # unsigned char, no overflow check (the value is masked)
        return _integer(value, fn, position) & 0xFF
    if letter in "iHhb":
        number = _integer(value, fn, position)
        low, high = {
            "i": (-(1 << 31), (1 << 31) - 1),
            "H": (0, 0xFFFF),
            "h": (-(1 << 15), (1 << 15) - 1),
            "b": (0, 0xFF),
        }[letter]
        if not low <= number <= high:
            raise OverflowError(f"{fn}() argument {position}: {number} is out of range for format {letter!r}")
        return number
    if letter == "s":
        if not isinstance(value, str):
            raise TypeError(f"{fn}() argument {position} must be str, not {type(value).__name__}")
        if "\0" in value:
            raise ValueError(f"{fn}() argument {position}: embedded null character")
        return value
    if letter == "f":
        if not isinstance(value, (str, bytes, bytearray)):
            try:
                return float(value)
            except TypeError:
                pass
        raise TypeError(f"{fn}() argument {position} must be real number, not {type(value).__name__}")
    if letter == "O":
        return value
    raise ValueError(f"unknown format letter {letter!r}")


def parse_args(
    signature: Signature, fn: str, args: tuple, kwargs: dict, parsed: tuple[str, int, int] | None = None
) -> list[Any]:
    """``parsed``: (letters, minimum, maximum) of ``signature``, when the caller has them at hand."""
    if kwargs:
        raise TypeError(f"{fn}() takes no keyword arguments")
    letters, low, high = parsed or (signature.fmt.replace("|", ""), *signature.arity)
    if not low <= len(args) <= high:
        expected = f"exactly {high}" if low == high else f"from {low} to {high}"
        raise TypeError(f"{fn}() takes {expected} argument{'s' if high != 1 else ''} ({len(args)} given)")
    return [convert(letter, value, fn, i + 1) for i, (letter, value) in enumerate(zip(letters, args))]


def acl_function(
    fmt: str = "",
    *,
    outputs: tuple[Any, ...] | None = None,
    value: bool = False,
    fail_value: Any = 0,
    needs_init: bool = True,
    locked: bool = True,
) -> Callable:
    """Declare a method of an API namespace as a simulated pyACL function.

    The method receives converted arguments and returns the outputs (a tuple when ``outputs``
    has more than one entry, the single output otherwise, or the value); it raises AclFail to
    fail. The namespace object provides ``_call(name, signature, body)`` which runs the common
    checks (init, faults, device loss, lock) and records errors.
    """
    signature = Signature(fmt, outputs, value, fail_value, needs_init, locked)
    parsed = (fmt.replace("|", ""), *signature.arity)  # once, not on every call

    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            qualified = f"{self._prefix}.{method.__name__}"
            converted = parse_args(signature, qualified, args, kwargs, parsed)
            return self._call(method.__name__, qualified, signature, lambda: method(self, *converted))

        # A function object takes the attribute at run time; its declared type (functools' _Wrapped) has none.
        function = cast(AclFunction, wrapper)
        function.acl_signature = signature
        return function

    return decorate


def shape_result(signature: Signature, produced: Any, ret: int) -> Any:
    """The Python result of a call that produced ``produced`` (ignored on failure) and ``ret``."""
    if signature.value:
        return produced if ret == 0 else signature.fail_value
    if signature.outputs is None:
        return ret
    if ret != 0:
        return (*signature.outputs, ret)
    values = produced if len(signature.outputs) > 1 else (produced,)
    return (*values, ret)
