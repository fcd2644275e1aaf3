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

#: converts one argument (value, function name, 1-based position) as one format letter does
Converter = Callable[[Any, str, int], Any]
#: (converters, minimum, maximum) of one signature
Parsed = tuple[tuple[Converter, ...], int, int]


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


def _unsigned_long(value: Any, fn: str, position: int) -> int:
    if not isinstance(value, int):
        raise TypeError(f"{fn}() argument {position} must be int, not {type(value).__name__}")
    return value & _MASK64


def _masked(mask: int) -> Converter:
    def convert(value: Any, fn: str, position: int) -> int:
        return _integer(value, fn, position) & mask

    return convert


def _ranged(letter: str, low: int, high: int) -> Converter:
    def convert(value: Any, fn: str, position: int) -> int:
        number = _integer(value, fn, position)
        if not low <= number <= high:
            raise OverflowError(f"{fn}() argument {position}: {number} is out of range for format {letter!r}")
        return number

    return convert


def _text(value: Any, fn: str, position: int) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{fn}() argument {position} must be str, not {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{fn}() argument {position}: embedded null character")
    return value


def _real(value: Any, fn: str, position: int) -> float:
    if not isinstance(value, (str, bytes, bytearray)):
        try:
            return float(value)
        except TypeError:
            pass
    raise TypeError(f"{fn}() argument {position} must be real number, not {type(value).__name__}")


def _any_object(value: Any, fn: str, position: int) -> Any:
    return value


#: PyArg_ParseTuple's letter -> how it converts one argument; "B" masks without an overflow check
_CONVERTERS: dict[str, Converter] = {
    "k": _unsigned_long,
    "K": _unsigned_long,
    "I": _masked(_MASK32),
    "B": _masked(0xFF),
    "i": _ranged("i", -(1 << 31), (1 << 31) - 1),
    "H": _ranged("H", 0, 0xFFFF),
    "h": _ranged("h", -(1 << 15), (1 << 15) - 1),
    "b": _ranged("b", 0, 0xFF),
    "s": _text,
    "f": _real,
    "O": _any_object,
}


def converters(signature: Signature) -> tuple[Converter, ...]:
    """The converter of each argument of ``signature`` (looked up once per function, not per call)."""
    letters = signature.fmt.replace("|", "")
    unknown = sorted(set(letters) - set(_CONVERTERS))
    if unknown:
        raise ValueError(f"unknown format letter(s) {unknown} in {signature.fmt!r}")
    return tuple(_CONVERTERS[letter] for letter in letters)


def parse_args(signature: Signature, fn: str, args: tuple, kwargs: dict, parsed: Parsed | None = None) -> list[Any]:
    """``parsed``: (converters, minimum, maximum) of ``signature``, when the caller has them at hand."""
    if kwargs:
        raise TypeError(f"{fn}() takes no keyword arguments")
    steps, low, high = parsed or (converters(signature), *signature.arity)
    if not low <= len(args) <= high:
        expected = f"exactly {high}" if low == high else f"from {low} to {high}"
        raise TypeError(f"{fn}() takes {expected} argument{'s' if high != 1 else ''} ({len(args)} given)")
    return [step(value, fn, position) for position, (step, value) in enumerate(zip(steps, args), 1)]


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
    parsed: Parsed = (converters(signature), *signature.arity)  # once, not on every call

    def decorate(method: Callable) -> Callable:
        name = method.__name__

        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            qualified = f"{self._prefix}.{name}"
            converted = parse_args(signature, qualified, args, kwargs, parsed)
            return self._call(name, qualified, signature, lambda: method(self, *converted))

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
