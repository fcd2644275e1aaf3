"""What a loaded model is, read once from its pyACL model description.

``read_plan`` asks the desc for every input and output (names, types, formats, dims, sizes),
finds the dynamic-shape input (``ascend_mbatch_shape_data``) and the model's gears, and returns
the ``ModelPlan`` every slot of an engine shares.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ge_python_backend.ascend.constants import ACL_DYNAMIC_TENSOR_NAME, ACL_SUCCESS, data_type, format_name
from ge_python_backend.ascend.layout import LayoutTensor, ModelLayout, Shape
from ge_python_backend.engines.acl.runtime import AclError, check, recent_message
from ge_python_backend.errors import ConfigError

LOG = logging.getLogger(__name__)

#: get_dynamic_hw / get_input_dynamic_gear_count / get_input_dynamic_dims take a reserved index: -1.
_RESERVED_INDEX = -1


@dataclass(frozen=True)
class ModelPlan:
    """What every slot needs to know about the model, read once from the first copy's desc."""

    layout: ModelLayout
    #: index and bytes of ascend_mbatch_shape_data; None and 0 for a static model
    dynamic_index: int | None
    dynamic_size: int
    #: per gear, the last argument(s) of its set_dynamic_* call, built once
    gear_arguments: tuple[tuple[Any, ...], ...]

    def model_inputs(self) -> list[tuple[LayoutTensor | None, int]]:
        """(tensor, bytes) of every model input in index order; None is ascend_mbatch_shape_data."""
        inputs: list[tuple[LayoutTensor | None, int]] = [(t, t.size) for t in self.layout.inputs]
        if self.dynamic_index is not None:
            inputs.insert(self.dynamic_index, (None, self.dynamic_size))
        return inputs

    def model_outputs(self) -> list[tuple[LayoutTensor | None, int]]:
        return [(t, t.size) for t in self.layout.outputs]


def gear_arguments(kind: str, gears: tuple[Shape, ...]) -> tuple[tuple[Any, ...], ...]:
    """The values each gear passes to set_dynamic_batch_size (batch), set_dynamic_hw_size (h, w)
    or set_input_dynamic_dims (the dims dict, pyacl.md §4.3)."""
    if kind == "dims":
        return tuple(({"dimCount": len(g), "name": "", "dims": list(g)},) for g in gears)
    return gears


def _refuse_unservable(tensors: list[LayoutTensor], kind: str) -> None:
    for tensor in tensors:
        if not tensor.data_type.triton:
            raise ConfigError(
                f"model {kind} {tensor.name!r} has type ACL_{tensor.data_type.name} ({tensor.data_type.code}), "
                f"which cannot be served: it {tensor.data_type.unsupported}"
            )


def _input_tensor(acl: Any, desc: int, index: int) -> LayoutTensor:
    dims, ret = acl.mdl.get_input_dims(desc, index)
    check(acl, ret, "acl.mdl.get_input_dims", f"reading input {index}")
    name = acl.mdl.get_input_name_by_index(desc, index)
    code = acl.mdl.get_input_data_type(desc, index)
    fmt = acl.mdl.get_input_format(desc, index)
    size = acl.mdl.get_input_size_by_index(desc, index)
    return LayoutTensor(name or dims["name"], data_type(code), format_name(fmt), shape_of(dims), size)


def _output_tensor(acl: Any, desc: int, index: int) -> LayoutTensor:
    dims, ret = acl.mdl.get_output_dims(desc, index)
    check(acl, ret, "acl.mdl.get_output_dims", f"reading output {index}")
    name = acl.mdl.get_output_name_by_index(desc, index)
    code = acl.mdl.get_output_data_type(desc, index)
    fmt = acl.mdl.get_output_format(desc, index)
    size = acl.mdl.get_output_size_by_index(desc, index)
    return LayoutTensor(name or dims["name"], data_type(code), format_name(fmt), shape_of(dims), size)


def shape_of(dims: Mapping[str, Any]) -> Shape:
    return tuple(int(d) for d in dims["dims"][: dims["dimCount"]])


def _gears(acl: Any, desc: int) -> tuple[str, tuple[Shape, ...]]:
    """The gear kind and gears of a model that has ascend_mbatch_shape_data.

    A lookup that fails, or answers no gears, means "not this kind": pyacl.md §4.3 only infers
    ret 0 with count 0 for a kind the model lacks, so a runtime may answer with an error code
    instead. Only when none of the three finds gears is the model refused, listing each answer.
    """
    answers = []
    batch, ret = acl.mdl.get_dynamic_batch(desc)
    if ret == ACL_SUCCESS and batch["batchCount"]:
        return "batch", tuple((int(b),) for b in batch["batch"][: batch["batchCount"]])
    answers.append(_lookup_answer(acl, "acl.mdl.get_dynamic_batch", ret, f"batchCount {batch.get('batchCount')}"))
    hw, ret = acl.mdl.get_dynamic_hw(desc, _RESERVED_INDEX)
    if ret == ACL_SUCCESS and hw["hwCount"]:
        return "hw", tuple((int(h), int(w)) for h, w in hw["hw"][: hw["hwCount"]])
    answers.append(_lookup_answer(acl, "acl.mdl.get_dynamic_hw", ret, f"hwCount {hw.get('hwCount')}"))
    count, ret = acl.mdl.get_input_dynamic_gear_count(desc, _RESERVED_INDEX)
    if ret == ACL_SUCCESS and count:
        gears, ret = acl.mdl.get_input_dynamic_dims(desc, _RESERVED_INDEX, count)
        check(acl, ret, "acl.mdl.get_input_dynamic_dims", f"reading the model's {count} dims gears")
        return "dims", tuple(shape_of(g) for g in gears)
    answers.append(_lookup_answer(acl, "acl.mdl.get_input_dynamic_gear_count", ret, f"gear count {count}"))
    raise ConfigError(
        f"the model has the input {ACL_DYNAMIC_TENSOR_NAME!r} but no gear lookup found gears: " + "; ".join(answers)
    )


def _lookup_answer(acl: Any, function: str, ret: int, found: str) -> str:
    """How one gear lookup answered (reading the runtime's message, so none is left behind)."""
    if ret == ACL_SUCCESS:
        return f"{function} returned 0 with {found}"
    answer = str(AclError(function, ret, recent_message(acl)))
    LOG.debug("gear lookup: %s (taken as: not this gear kind)", answer)
    return answer


def read_plan(acl: Any, desc: int) -> ModelPlan:
    """The model's tensors and gears from the desc (output shapes per gear still unknown)."""
    count = acl.mdl.get_num_inputs(desc)
    index, ret = acl.mdl.get_input_index_by_name(desc, ACL_DYNAMIC_TENSOR_NAME)
    dynamic_index = index if ret == ACL_SUCCESS else None
    if dynamic_index is None:  # "no such input" is the documented answer for a static model
        LOG.debug("no %s input (%s): static model", ACL_DYNAMIC_TENSOR_NAME, recent_message(acl))
    inputs = [_input_tensor(acl, desc, i) for i in range(count) if i != dynamic_index]
    output_count = acl.mdl.get_num_outputs(desc)
    outputs = [_output_tensor(acl, desc, i) for i in range(output_count)]
    _refuse_unservable(inputs, "input")
    _refuse_unservable(outputs, "output")
    kind, dynamic_size = "", 0
    gears: tuple[Shape, ...] = ()
    if dynamic_index is not None:
        kind, gears = _gears(acl, desc)
        dynamic_size = acl.mdl.get_input_size_by_index(desc, dynamic_index)
    layout = ModelLayout(tuple(inputs), tuple(outputs), kind, gears)
    return ModelPlan(layout, dynamic_index, dynamic_size, gear_arguments(kind, gears))
