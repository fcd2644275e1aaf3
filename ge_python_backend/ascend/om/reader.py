"""``read_om``: identify, bound-check and decode a CANN .om file's metadata without CANN."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import BinaryIO

from ge_python_backend.ascend.aipp import AippConfig
from ge_python_backend.ascend.om.aippinfo import AippTensor
from ge_python_backend.ascend.om.facts import collect_facts
from ge_python_backend.ascend.om.gears import dims_order, gear_support
from ge_python_backend.ascend.om.header import HEADER_SIZE, OmHeader, identify, parse_header
from ge_python_backend.ascend.om.inout import parse_inout
from ge_python_backend.ascend.om.iospec import RuntimeInput, io_from_inout, io_from_model_def
from ge_python_backend.ascend.om.modeldef import ModelDef
from ge_python_backend.ascend.om.partitions import MODEL_DEF, MODEL_INOUT_INFO, ModelBlock, Partition, read_blocks
from ge_python_backend.ascend.om.source import FileSource
from ge_python_backend.errors import OmFormatError
from ge_python_backend.specs import ModelSpec

IO_FROM_INOUT = "MODEL_INOUT_INFO"
IO_FROM_MODEL_DEF = "MODEL_DEF"


@dataclass(frozen=True)
class SubModel:
    """One model block of the file: model 0 is the root, the others its submodels."""

    index: int
    name: str
    table_offset: int
    table_bits: int
    partitions: tuple[Partition, ...]


@dataclass(frozen=True)
class OmFile:
    """What an .om file says about itself.

    ``io_source`` names the partition the inputs and outputs came from ("MODEL_INOUT_INFO" or
    "MODEL_DEF"); ``dynamic_input`` is "ascend_mbatch_shape_data" when the model has that
    runtime-internal gear-selection input (it is never in ``spec.inputs``). ``runtime_inputs`` lists
    every input no client sends (that one and the dynamic-AIPP parameter inputs) with its runtime
    index. ``shape_order`` is, for a dims model, the inputs named in ATC's --input_shape in that
    order (static ones included), () otherwise. ``aipp`` maps each input with AIPP to its config;
    ``aipp_notes`` says what a file sets that the config cannot carry, ``aipp_network`` the network
    input behind each AIPP (``_aipp_inputs``).
    """

    path: str
    file_size: int
    header: OmHeader
    models: tuple[SubModel, ...]
    io_source: str
    dynamic_input: str | None
    spec: ModelSpec
    shape_order: tuple[str, ...] = ()
    aipp: Mapping[str, AippConfig] = field(default_factory=dict)
    runtime_inputs: tuple[RuntimeInput, ...] = ()
    aipp_notes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    aipp_network: Mapping[str, AippTensor] = field(default_factory=dict)
    #: the file records ``shape_order`` (user_designate_shape_order); without it, ``shape_order`` is
    #: a guess (the dynamic inputs in model order)
    shape_order_recorded: bool = False

    @property
    def submodel_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.models[1:])


def read_om(path: str | os.PathLike) -> OmFile:
    """Read an .om file's metadata. Every problem with the file raises OmFormatError naming it."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            return _read(handle, path)
    except OmFormatError as exc:
        raise OmFormatError(f"{path}: {exc}") from None
    except OSError as exc:
        raise OmFormatError(f"{path}: cannot read the file: {exc.strerror or exc}") from exc


def _read(handle: BinaryIO, path: str) -> OmFile:
    info = os.fstat(handle.fileno())
    if not stat.S_ISREG(info.st_mode):
        raise OmFormatError("is not a regular file")
    size = info.st_size
    prefix = handle.read(HEADER_SIZE)
    reason = identify(prefix)
    if reason:
        raise OmFormatError(reason)
    header = parse_header(prefix)
    if header.is_encrypt:
        raise OmFormatError(
            f"is an encrypted OM (is_encrypt={header.is_encrypt}): its partitions cannot be read without "
            "the key, and this reader supports only unencrypted OMs"
        )
    if header.body_length != size - HEADER_SIZE:
        field = "model_length" if header.model_length else "length"
        raise OmFormatError(
            f"header: {field} says the body after the {HEADER_SIZE}-byte header is {header.body_length} bytes, "
            f"but the file has {size - HEADER_SIZE} (truncated or padded file)"
        )
    source = FileSource(handle, size)
    blocks = read_blocks(header, source)
    root = _model_def(blocks[0], source)
    if root is None:
        raise OmFormatError("model 0 has no MODEL_DEF partition")
    inout = blocks[0].find(MODEL_INOUT_INFO)
    if inout is not None:
        summary = parse_inout(source.read(inout.offset, inout.size, "MODEL_INOUT_INFO"), inout.offset)
        io = io_from_inout(summary, root)
    else:
        io = io_from_model_def(root)
    support = gear_support(io.inputs, io.outputs, io.gears)
    spec = ModelSpec(
        inputs=io.inputs,
        outputs=support.outputs,
        batch=support.batch,
        shape_gears=support.shape_gears,
        gear_kind=support.gear_kind,
        source="om",
        facts=collect_facts(header, root),
    )
    names = [root.name] + [_model_name(b, source) for b in blocks[1:]]
    models = tuple(
        SubModel(b.index, name, b.table_offset, b.table_bits, b.partitions) for b, name in zip(blocks, names)
    )
    return OmFile(
        path=path,
        file_size=size,
        header=header,
        models=models,
        io_source=IO_FROM_INOUT if inout is not None else IO_FROM_MODEL_DEF,
        dynamic_input=io.dynamic_input,
        spec=spec,
        shape_order=dims_order(io.inputs, io.gears),
        shape_order_recorded=bool(io.gears.order),
        aipp=io.aipp,
        runtime_inputs=io.runtime_inputs,
        aipp_notes=io.aipp_notes,
        aipp_network=io.aipp_network,
    )


def _model_name(block: ModelBlock, source: FileSource) -> str:
    model = _model_def(block, source)
    return model.name if model is not None else ""


def _model_def(block: ModelBlock, source: FileSource) -> ModelDef | None:
    part = block.find(MODEL_DEF)
    if part is None:
        return None
    what = f"model {block.index} MODEL_DEF"
    return ModelDef(source.read(part.offset, part.size, what), part.offset, what)
