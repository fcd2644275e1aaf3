"""The simulated offline-model file (a "sim-OM"): what ``sim-compile`` writes and the simulator loads.

Layout (little-endian)::

    offset 0   8 bytes   magic b"GESIMOM\\x00"
    offset 8   u32       format version (2; version 1 files are read too)
    offset 12  u32       length J of the JSON description
    offset 16  u64       length N of the embedded ONNX model
    offset 24  J bytes   JSON description (UTF-8)
    offset 24+J N bytes  ONNX model

The JSON description mirrors what ATC bakes into a real .om::

    {"inputs":  [{"name", "dtype" (aclDataType name), "format", "dims" (V2: -1 on gear axes),
                  "size", "role": "input" | "dynamic_shape" | "aipp_data",
                  optional "image_dims" (V1), "ranges", "aipp" (AippConfig), "network" (the tensor the
                  embedded ONNX model takes behind an AIPP: {"dtype", "format", "dims"}),
                  "image" (an aipp_data input: the image input it configures)}, ...],
     "outputs": [{... "dims" at the largest gear, "size" at the largest gear}, ...],
     "gear_kind": "" | "batch" | "hw" | "dims" | "range",
     "gears": [[...], ...]          (dims: the -1 values in shape_order, as ATC's _pred_value_<i>),
     "shape_order": [names]         (dims: ATC's --input_shape order, user_designate_shape_order;
                                     a file without it runs with the dynamic inputs in model order,
                                     and SimOm.shape_order_recorded says it was not recorded),
     "gear_outputs": [[output dims, ...] per gear],
     "producer": {"tool": ..., ...},
     optional "stream_num", "event_num" (the streams and events the model creates at load, as a
     real .om records them in its ModelDef attributes stream_num / event_num; not recorded: one
     stream, no events)}

Inputs are listed in the runtime's index order: ``ascend_dynamic_aipp_data`` right after its
image, ``ascend_mbatch_shape_data`` last (multi_batch_clone_pass.cc 470-511 gives it the index
after every user Data).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ge_python_backend.ascend.aipp import AippConfig
from ge_python_backend.ascend.constants import ACL_DYNAMIC_TENSOR_NAME, AclDataType, data_type_named
from ge_python_backend.ascend.layout import GEAR_KINDS, LayoutTensor, ModelLayout, Shape
from ge_python_backend.ascend.resources import DEFAULT_MODEL_EVENTS, DEFAULT_MODEL_STREAMS, recorded_resources
from ge_python_backend.engines.registry import ModelRecord
from ge_python_backend.errors import ConfigError, OmFormatError
from ge_python_backend.params import Choice
from ge_python_backend.specs import ModelSpec

#: The 8 bytes a sim-OM starts with.
MAGIC = b"GESIMOM\x00"
VERSION = 2
_HEADER = struct.Struct("<8sIIQ")


class InputRole(Choice):
    """What a model input is for: the client's data, the gear selector, or dynamic-AIPP parameters."""

    CLIENT = "input"
    DYNAMIC_SHAPE = "dynamic_shape"
    AIPP_DATA = "aipp_data"


@dataclass(frozen=True)
class NetworkInput:
    """The tensor the network itself takes behind an AIPP (what the AIPP produces)."""

    data_type: AclDataType
    format: str
    dims: Shape


@dataclass(frozen=True)
class ModelInput:
    """One input of the model as the runtime indexes it."""

    tensor: LayoutTensor
    role: InputRole = InputRole.CLIENT
    #: aipp_data: the client input whose dynamic AIPP it configures
    image: str = ""
    network: NetworkInput | None = None


@dataclass(frozen=True)
class SimOm:
    """A parsed sim-OM: the model layout, every runtime input, producer facts and the ONNX bytes."""

    layout: ModelLayout
    model_inputs: tuple[ModelInput, ...]
    producer: Mapping[str, str]
    onnx: bytes
    #: the file records the --input_shape order of a dims model. A file without it (written with this
    #: False) still runs on the simulator, with the dynamic inputs in model order (the layout's default),
    #: but a reader cannot tell that order from a guess
    shape_order_recorded: bool = True
    #: the streams and events the model creates when it loads (ATTR_MODEL_STREAM_NUM / _EVENT_NUM;
    #: hicann/ge runtime/v1/graph/load/model_manager/model_utils.cc 1321-1324), None: not recorded
    stream_num: int | None = None
    event_num: int | None = None

    @property
    def model_streams(self) -> int:
        """Streams a load of this model takes: stream_num, or 1 when the file records none."""
        return DEFAULT_MODEL_STREAMS if self.stream_num is None else self.stream_num

    @property
    def model_events(self) -> int:
        return DEFAULT_MODEL_EVENTS if self.event_num is None else self.event_num

    @property
    def all_inputs(self) -> tuple[LayoutTensor, ...]:
        """Every model input as the runtime lists it."""
        return tuple(m.tensor for m in self.model_inputs)

    def index_of(self, role: InputRole, image: str = "") -> int | None:
        """The runtime index of the input of ``role`` (for aipp_data: the one of ``image``)."""
        for index, entry in enumerate(self.model_inputs):
            if entry.role is role and (not image or entry.image == image):
                return index
        return None

    def client_input(self, name: str) -> ModelInput:
        for entry in self.model_inputs:
            if entry.role is InputRole.CLIENT and entry.tensor.name == name:
                return entry
        raise KeyError(name)

    def spec(self) -> ModelSpec:
        facts = {"producer": self.producer.get("tool", ""), "sim_om_version": str(VERSION)}
        facts.update({k: str(v) for k, v in self.producer.items() if k != "tool"})
        for key in ("stream_num", "event_num"):
            if getattr(self, key) is not None:
                facts[key] = str(getattr(self, key))
        return self.layout.spec("sim-om", facts)


def dynamic_shape_input(layout: ModelLayout) -> LayoutTensor:
    """The ``ascend_mbatch_shape_data`` input ATC adds to a model with gears: INT32 [k], k = 1
    (batch), 2 (hw) or the number of -1 axes (dims) (multi_batch_clone_pass.cc 470-511)."""
    count = {"batch": 1, "hw": 2}.get(layout.kind, len(layout.gears[0]) if layout.gears else 0)
    return LayoutTensor(ACL_DYNAMIC_TENSOR_NAME, data_type_named("INT32"), "ND", (count,), 4 * count)


def _tensor_json(entry: ModelInput | LayoutTensor) -> dict[str, Any]:
    tensor = entry.tensor if isinstance(entry, ModelInput) else entry
    data: dict[str, Any] = {
        "name": tensor.name,
        "dtype": tensor.data_type.name,
        "format": tensor.format,
        "dims": list(tensor.dims),
        "size": tensor.size,
    }
    if tensor.image_dims:
        data["image_dims"] = list(tensor.image_dims)
    if tensor.ranges:
        data["ranges"] = [list(r) for r in tensor.ranges]
    if tensor.aipp is not None:
        data["aipp"] = tensor.aipp.to_json()
    if isinstance(entry, ModelInput):
        data["role"] = entry.role.value
        if entry.image:
            data["image"] = entry.image
        if entry.network is not None:
            net = entry.network
            data["network"] = {"dtype": net.data_type.name, "format": net.format, "dims": list(net.dims)}
    return data


def encode_sim_om(om: SimOm) -> bytes:
    description: dict[str, Any] = {
        "inputs": [_tensor_json(m) for m in om.model_inputs],
        "outputs": [_tensor_json(t) for t in om.layout.outputs],
        "gear_kind": om.layout.kind,
        "gears": [list(g) for g in om.layout.gears],
        "gear_outputs": [[list(s) for s in shapes] for shapes in om.layout.gear_outputs],
        "producer": dict(om.producer),
    }
    if om.shape_order_recorded:
        description["shape_order"] = list(om.layout.shape_order)
    for key in ("stream_num", "event_num"):
        if getattr(om, key) is not None:
            description[key] = getattr(om, key)
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
    if version not in (1, VERSION):
        raise OmFormatError(f"{origin}: offset 8: sim-OM version {version} is not supported (expected 1 or {VERSION})")
    expected = _HEADER.size + json_len + onnx_len
    if len(data) != expected:
        raise OmFormatError(
            f"{origin}: header says {json_len} JSON bytes and {onnx_len} ONNX bytes ({expected} bytes in all), "
            f"the file has {len(data)}"
        )
    try:
        description = json.loads(data[_HEADER.size : _HEADER.size + json_len])
        layout, model_inputs = _layout(description, version)
    except (ValueError, KeyError, TypeError, ConfigError) as exc:
        raise OmFormatError(f"{origin}: offset {_HEADER.size}: bad JSON description: {exc}") from None
    recorded = version == 1 or "shape_order" in description  # version 1: the order is its convention
    producer = dict(description.get("producer", {}))
    resources = [description.get(key) for key in ("stream_num", "event_num")]
    if any(v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0) for v in resources):
        raise OmFormatError(f"{origin}: stream_num and event_num must be integers >= 0, found {resources}")
    return SimOm(layout, model_inputs, producer, data[_HEADER.size + json_len :], recorded, *resources)


def _tensor(entry: Mapping[str, Any]) -> LayoutTensor:
    aipp = entry.get("aipp")
    return LayoutTensor(
        name=str(entry["name"]),
        data_type=data_type_named(entry["dtype"]),
        format=str(entry["format"]),
        dims=tuple(int(d) for d in entry["dims"]),
        size=int(entry["size"]),
        image_dims=tuple(int(d) for d in entry.get("image_dims", ())),
        ranges=tuple((int(lo), int(hi)) for lo, hi in entry.get("ranges", ())),
        aipp=AippConfig.from_json(aipp) if aipp else None,
    )


def _model_input(entry: Mapping[str, Any]) -> ModelInput:
    network = entry.get("network")
    return ModelInput(
        tensor=_tensor(entry),
        role=InputRole(entry.get("role", InputRole.CLIENT.value)),
        image=str(entry.get("image", "")),
        network=NetworkInput(
            data_type_named(network["dtype"]), str(network["format"]), tuple(int(d) for d in network["dims"])
        )
        if network
        else None,
    )


def _layout(description: Mapping[str, Any], version: int) -> tuple[ModelLayout, tuple[ModelInput, ...]]:
    model_inputs = [_model_input(e) for e in description["inputs"]]
    kind = next((k for k in GEAR_KINDS if k == description["gear_kind"]), None)
    if kind is None:
        raise ValueError(f"gear_kind {description['gear_kind']!r} is not one of {GEAR_KINDS}")
    gears = tuple(tuple(int(d) for d in g) for g in description["gears"])
    if version == 1 and model_inputs and model_inputs[-1].tensor.name == ACL_DYNAMIC_TENSOR_NAME:
        model_inputs[-1] = ModelInput(model_inputs[-1].tensor, InputRole.DYNAMIC_SHAPE)
    if kind in ("batch", "hw", "dims"):
        roles = [m.role for m in model_inputs]
        if not roles or roles[-1] is not InputRole.DYNAMIC_SHAPE:
            raise ValueError(f"a model with {kind} gears must list {ACL_DYNAMIC_TENSOR_NAME!r} as its last input")
    clients = tuple(m.tensor for m in model_inputs if m.role is InputRole.CLIENT)
    order = tuple(str(n) for n in description.get("shape_order", ()))
    if version == 1 and kind == "dims":
        # version 1 stored each dims gear as the full shapes of the -1 inputs in model order
        dynamic = [t for t in clients if -1 in t.dims]
        order = tuple(t.name for t in dynamic)
        declared = [d for t in dynamic for d in t.dims]
        gears = tuple(tuple(v for v, want in zip(g, declared) if want < 0) for g in gears)
    layout = ModelLayout(
        inputs=clients,
        outputs=tuple(_tensor(e) for e in description["outputs"]),
        kind=kind,
        gears=gears,
        gear_outputs=tuple(tuple(tuple(int(d) for d in s) for s in shapes) for shapes in description["gear_outputs"]),
        shape_order=order,
    )
    return layout, tuple(model_inputs)


def load_sim_om(path: str | Path) -> SimOm:
    return decode_sim_om(Path(path).read_bytes(), str(path))


def read_sim_om(path: str | Path) -> ModelSpec:
    """The ModelSpec of a sim-OM file: client inputs only, gears, source "sim-om", producer facts."""
    return load_sim_om(path).spec()


def read_record(path: Path) -> ModelRecord:
    """What a sim-OM records, as the registry's readers tell it (the format's reader): a load of
    a model with shape ranges goes to the dynamic-shape executor, as a real one does."""
    om = load_sim_om(path)
    spec = om.spec()
    order = om.layout.shape_order if om.shape_order_recorded else ()
    return ModelRecord(spec, tuple(order), recorded_resources(spec.facts, dynamic=om.layout.kind == "range"))
