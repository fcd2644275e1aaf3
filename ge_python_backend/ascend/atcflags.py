"""ATC's option syntax, read the same way by sim-compile, atc-cmd and the acl engine's parameters.

``--input_shape`` is ``NAME:D0,D1,...;NAME:...`` with each axis a size, ``-1`` (an axis of gears,
or of a shape range without bounds) or ``low~high`` / ``low~`` (a shape range); gear lists are
``V,V,...;V,V,...`` (ATC's --input_shape.md, --dynamic_dims.md, --dynamic_image_size.md).
"""

from __future__ import annotations

from ge_python_backend.errors import ConfigError
from ge_python_backend.specs import UNBOUNDED

#: one axis: a size, -1, or (low, high) with high UNBOUNDED for "low~"
Dim = int | tuple[int, int]


def parse_input_shape(
    text: str, flag: str = "--input_shape", *, ranges_refused: str = ""
) -> dict[str, tuple[Dim, ...]]:
    """``"x:-1,3,224,224;y:1~8,4"`` -> {"x": (-1, 3, 224, 224), "y": ((1, 8), 4)}, in the given order.
    ``ranges_refused``: why ``a~b`` is not accepted here (empty: it is)."""
    shapes: dict[str, tuple[Dim, ...]] = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        name, sep, dims = part.rpartition(":")
        if not sep or not name:
            raise ConfigError(f"{flag} item {part!r} is not NAME:D0,D1,... (e.g. x:-1,3,224,224)")
        if name in shapes:
            raise ConfigError(f"{flag} names input {name!r} twice")
        if ranges_refused and "~" in dims:
            raise ConfigError(f"{flag} of {name!r}: {dims!r} is a shape range; {ranges_refused}")
        shapes[name] = tuple(_dim(d.strip(), name, flag) for d in dims.split(",")) if dims.strip() else ()
    return shapes


def _dim(text: str, name: str, flag: str) -> Dim:
    try:
        if "~" in text:
            low, _, high = text.partition("~")
            bounds = (int(low), int(high) if high else UNBOUNDED)
            if bounds[0] < 0 or (bounds[1] != UNBOUNDED and bounds[1] < bounds[0]):
                raise ValueError
            return bounds
        value = int(text)
        if value < -1 or value == 0:
            raise ValueError
        return value
    except ValueError:
        raise ConfigError(
            f"{flag} of {name!r}: {text!r} is not a size >= 1, -1 or a range low~high (e.g. 1~8)"
        ) from None


def parse_sizes(text: str, flag: str) -> dict[str, tuple[int, ...]]:
    """``"x:8,3,512,512;y:8,1000"``: the --input_shape syntax with sizes only (no -1, no ranges)."""
    shapes = parse_input_shape(text, flag, ranges_refused="give the largest size of each axis")
    for name, dims in shapes.items():
        if any(d == -1 for d in dims):
            raise ConfigError(f"{flag} of {name!r}: every axis needs a size, got -1")
    return {name: tuple(int(d) for d in dims if isinstance(d, int)) for name, dims in shapes.items()}


def format_dims(dims: tuple[Dim, ...]) -> str:
    """Dims back in --input_shape's spelling."""
    return ",".join(f"{d[0]}~{'' if d[1] == UNBOUNDED else d[1]}" if isinstance(d, tuple) else str(d) for d in dims)


def parse_int_list(text: str, flag: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4) ("" -> ()); ConfigError naming ``flag`` otherwise."""
    if not text.strip():
        return ()
    try:
        return tuple(int(p) for p in text.split(","))
    except ValueError:
        raise ConfigError(f"{flag}: {text!r} is not a comma-separated list of integers") from None


def parse_gear_list(text: str, flag: str) -> tuple[tuple[int, ...], ...]:
    """``"224,224;448,448"`` -> ((224, 224), (448, 448))."""
    return tuple(parse_int_list(part.strip(), flag) for part in text.split(";") if part.strip())
