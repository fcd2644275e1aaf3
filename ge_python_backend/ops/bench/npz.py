"""A request's tensors from an ``.npz`` file (``ge-triton bench --data``), string tensors included.

``np.savez`` stores an object array (the way Triton's BYTES tensors live in numpy: one ``bytes``
per element) as a pickle, which ``np.load(allow_pickle=False)`` refuses and ``allow_pickle=True``
would run as code. Here such an array is unpickled with only numpy's array reconstruction
allowed (the "restricting globals" pattern of Python's ``pickle`` documentation), and its
elements must be ``bytes`` or ``str`` (sent as UTF-8). ``str`` arrays (numpy ``U``) are sent as
UTF-8 too; fixed-width ``bytes`` arrays (numpy ``S``) are refused: numpy drops their trailing
zero bytes, so the bytes sent would not be the ones saved.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.lib import format as npy

from ge_python_backend.ops.bench.load import BenchError

#: what an object array's pickle may name: numpy's reconstruction of an array (numpy 1 and 2),
#: and the codec protocol 2 uses for bytes
_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}
_HEADERS = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}


class _ArraysOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it names {module}.{name}, which is not part of a numpy array")


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Name -> tensor for every array in the file; BenchError naming the file and the array."""
    try:
        with zipfile.ZipFile(path) as archive:
            arrays = {}
            for member in archive.namelist():
                name = member[: -len(".npy")] if member.endswith(".npy") else member
                with archive.open(member) as stream:
                    arrays[name] = _tensor(name, _array(stream))
    except (OSError, zipfile.BadZipFile, ValueError, pickle.UnpicklingError, EOFError) as exc:
        raise BenchError(f"--data {path}: cannot read it as an .npz of the request's tensors ({exc})") from None
    if not arrays:
        raise BenchError(f"--data {path}: the file holds no array")
    return arrays


def _array(stream: IO[bytes]) -> np.ndarray:
    version = npy.read_magic(stream)
    header = _HEADERS.get(version)
    if header is None:
        raise ValueError(f"npy format version {version} is not supported")
    shape, fortran, dtype = header(stream)
    if dtype.hasobject:
        array = _ArraysOnly(stream).load()
        if not isinstance(array, np.ndarray) or array.shape != shape:
            raise ValueError(f"an object array of shape {list(shape)} does not unpickle as one")
        return array
    count = int(np.prod(shape))
    data = np.frombuffer(stream.read(count * dtype.itemsize), dtype=dtype, count=count)
    return data.reshape(shape, order="F" if fortran else "C")


def _tensor(name: str, array: np.ndarray) -> np.ndarray:
    """The array as the request carries it: string arrays as object arrays of bytes."""
    if array.dtype.kind == "S":
        raise ValueError(
            f"array {name!r} is numpy fixed-width bytes ({array.dtype}), whose trailing zero bytes numpy drops: "
            "save it with dtype=object"
        )
    if array.dtype.kind == "U":
        array = array.astype(object)
    if array.dtype != np.dtype(object):
        return array
    converted = np.empty(array.shape, dtype=object)
    flat = converted.reshape(-1)
    for index, value in enumerate(array.reshape(-1)):
        if isinstance(value, str):
            value = value.encode("utf-8")
        if not isinstance(value, bytes):
            raise ValueError(
                f"array {name!r} element {index} is {type(value).__name__}; string tensors hold bytes or str"
            )
        flat[index] = value
    return converted
