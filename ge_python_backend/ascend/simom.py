"""The simulated offline-model file (a "sim-OM"): what ``sim-compile`` writes and the simulator loads.

Layout (little-endian)::

    offset 0   8 bytes   magic b"GESIMOM\\x00"
    offset 8   u32       format version (1)
    offset 12  u32       length J of the JSON description
    offset 16  u64       length N of the embedded ONNX model
    offset 24  J bytes   JSON description (UTF-8)
    offset 24+J N bytes  ONNX model

The JSON description mirrors what ATC bakes into a real .om::

    {"inputs":  [{"name", "dtype" (aclDataType name), "format", "dims" (-1 on gear axes), "size"}, ...],
     "outputs": [{... "dims" at the largest gear, "size" at the largest gear}, ...],
     "gear_kind": "" | "batch" | "hw" | "dims",
     "gears": [[...], ...], "gear_outputs": [[output dims, ...] per gear],
     "producer": {"tool": ..., ...}}

A dynamic model lists ``ascend_mbatch_shape_data`` (INT32, ND) as its last input, like ATC.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ge_python_backend.ascend.constants import ACL_DYNAMIC_TENSOR_NAME, data_type_named
from ge_python_backend.ascend.layout import LayoutTensor, ModelLayout
from ge_python_backend.ascend.om.header import SIM_OM_MAGIC
from ge_python_backend.errors import ConfigError, OmFormatError
from ge_python_backend.specs import ModelSpec

#: The 8 bytes a sim-OM starts with; the OM reader knows them to refuse the file as simulated.
MAGIC = SIM_OM_MAGIC
VERSION = 1
_HEADER = struct.Struct("<8sIIQ")


@dataclass(frozen=True)
class SimOm:
    """A parsed sim-OM: the model layout, its producer facts and the ONNX bytes it runs."""

    layout: ModelLayout
    producer: Mapping[str, str]
    onnx: bytes

    @property
    def dynamic_tensor(self) -> LayoutTensor | None:
        """The extra ``ascend_mbatch_shape_data`` input of a model with gears."""
        if not self.layout.kind:
            return None
        count = {"batch": 1, "hw": 2, "dims": len(self.layout.gears[0])}[self.layout.kind]
        return LayoutTensor(ACL_DYNAMIC_TENSOR_NAME, data_type_named("INT32"), "ND", (count,), 4 * count)

    @property
    def all_inputs(self) -> tuple[LayoutTensor, ...]:
        """Every model input as the runtime lists it (the dynamic tensor last)."""
        extra = self.dynamic_tensor
        return self.layout.inputs + ((extra,) if extra else ())

    def spec(self) -> ModelSpec:
        facts = {"producer": self.producer.get("tool", ""), "sim_om_version": str(VERSION)}
        facts.update({k: str(v) for k, v in self.producer.items() if k != "tool"})
        return self.layout.spec("sim-om", facts)


def _tensor_json(tensor: LayoutTensor) -> dict[str, Any]:
    return {
        "name": tensor.name,
        "dtype": tensor.data_type.name,
        "format": tensor.format,
        "dims": list(tensor.dims),
        "size": tensor.size,
    }


def encode_sim_om(om: SimOm) -> bytes:
    description = {
        "inputs": [_tensor_json(t) for t in om.all_inputs],
        "outputs": [_tensor_json(t) for t in om.layout.outputs],
        "gear_kind": om.layout.kind,
        "gears": [list(g) for g in om.layout.gears],
        "gear_outputs": [[list(s) for s in shapes] for shapes in om.layout.gear_outputs],
        "producer": dict(om.producer),
    }
    text = json.dumps(description, indent=1).encode()
    return _HEADER.pack(MAGIC, VERSION, len(text), len(om.onnx)) + text + om.onnx


def write_sim_om(path: str | Path, om: SimOm) -> None:
    Path(path).write_bytes(encode_sim_om(om))


def is_sim_om(head: bytes) -> bool:
    """True when ``head`` (the first bytes of a file) starts like a sim-OM."""
    return head[: len(MAGIC)] == MAGIC


def decode_sim_om(data: bytes, origin: str = "<memory>") -> SimOm:
    """Parse sim-OM bytes; OmFormatError names the file, the offset and what was wrong."""
    if len(data) < _HEADER.size:
        raise OmFormatError(f"{origin}: {len(data)} bytes is shorter than the {_HEADER.size}-byte sim-OM header")
    magic, version, json_len, onnx_len = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise OmFormatError(f"{origin}: offset 0: expected the sim-OM magic {MAGIC!r}, found {magic!r}")
    if version != VERSION:
        raise OmFormatError(f"{origin}: offset 8: sim-OM version {version} is not supported (expected {VERSION})")
    expected = _HEADER.size + json_len + onnx_len
    if len(data) != expected:
        raise OmFormatError(
            f"{origin}: header says {json_len} JSON bytes and {onnx_len} ONNX bytes ({expected} bytes in all), "
            f"the file has {len(data)}"
        )
    try:
        description = json.loads(data[_HEADER.size : _HEADER.size + json_len])
        layout = _layout(description)
    except (ValueError, KeyError, TypeError, ConfigError) as exc:
        raise OmFormatError(f"{origin}: offset {_HEADER.size}: bad JSON description: {exc}") from None
    return SimOm(layout, dict(description.get("producer", {})), data[_HEADER.size + json_len :])


def _tensor(entry: Mapping[str, Any]) -> LayoutTensor:
    return LayoutTensor(
        name=str(entry["name"]),
        data_type=data_type_named(entry["dtype"]),
        format=str(entry["format"]),
        dims=tuple(int(d) for d in entry["dims"]),
        size=int(entry["size"]),
    )


def _layout(description: Mapping[str, Any]) -> ModelLayout:
    inputs = [_tensor(e) for e in description["inputs"]]
    kind = str(description["gear_kind"])
    if kind:
        if not inputs or inputs[-1].name != ACL_DYNAMIC_TENSOR_NAME:
            raise ValueError(f"a model with {kind} gears must list {ACL_DYNAMIC_TENSOR_NAME!r} as its last input")
        inputs.pop()
    return ModelLayout(
        inputs=tuple(inputs),
        outputs=tuple(_tensor(e) for e in description["outputs"]),
        kind=kind,
        gears=tuple(tuple(int(d) for d in g) for g in description["gears"]),
        gear_outputs=tuple(tuple(tuple(int(d) for d in s) for s in shapes) for shapes in description["gear_outputs"]),
    )


def load_sim_om(path: str | Path) -> SimOm:
    return decode_sim_om(Path(path).read_bytes(), str(path))


def read_sim_om(path: str | Path) -> ModelSpec:
    """The ModelSpec of a sim-OM file: client inputs only, gears, source "sim-om", producer facts."""
    return load_sim_om(path).spec()
