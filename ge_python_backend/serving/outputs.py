"""The outputs a request asked for, in the config's data types.

A rank-0 result leaves as ``[1]``: Triton declares a scalar output as ``dims: [1]`` (it has no
scalar tensors in a model without batching), and that is the shape clients receive.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ge_python_backend.errors import GEError
from ge_python_backend.serving.requests import RequestInfo
from ge_python_backend.specs import dtype_name


class OutputSelector:
    """Picks the requested outputs (all when none are named) and casts them to the config's types."""

    def __init__(self, output_types: Mapping[str, np.dtype]) -> None:
        self._types = dict(output_types)
        self._all = tuple(self._types)

    def __call__(self, outputs: Mapping[str, Any], info: RequestInfo) -> dict[str, np.ndarray]:
        wanted = info.requested_outputs or self._all
        types = self._types
        selected = {}
        for name in wanted:
            if name not in outputs:
                raise GEError(f"output {name!r} was requested but the model produced only {sorted(outputs)}")
            value = outputs[name]
            # the common case first: an array of rank >= 1 already in the config's type
            if type(value) is np.ndarray and value.ndim and value.dtype == types.get(name, value.dtype):
                selected[name] = value
            else:
                selected[name] = self._typed(name, value)
        return selected

    def _typed(self, name: str, value: Any) -> np.ndarray:
        array = np.asarray(value)
        if array.ndim == 0:
            array = array.reshape(1)
        target = self._types.get(name)
        if target is None or array.dtype == target:
            return array
        if target == np.dtype(object):
            return array.astype(object)
        if np.can_cast(array.dtype, target, casting="same_kind"):
            return array.astype(target)
        raise GEError(
            f"output {name!r} has data type {dtype_name(array.dtype)}; the config declares {dtype_name(target)}"
        )
