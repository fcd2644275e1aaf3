"""``acl.mdl`` dynamic-gear calls of the simulator: read the gears, select one.

Each follows GE: the lookups in hicann/ge api/acl/acl_model/model/model_om2.cpp 1786-1921, the
setters in model.cpp 1839-1976 and runtime/v1/executor/ge_executor.cc 138-224, 375-637. A setter
writes the gear's values into the dataset buffer at ``index`` (uint32 each, uint64 when the buffer
has room), where execute reads them back.
"""

from __future__ import annotations

from ge_python_backend.ascend.constants import ACL_DYNAMIC_TENSOR_NAME, ret_code
from ge_python_backend.ascend.layout import GearKind, ModelLayout
from ge_python_backend.sim.models import SYNC, LoadedModel, encode_gear
from ge_python_backend.sim.namespace import Namespace
from ge_python_backend.sim.signature import AclFail, acl_function
from ge_python_backend.sim.state import INVALID_PARAM

DYNAMIC_LENGTH = ret_code("ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID")
NOT_A_GEAR = ret_code("ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID")
MODEL_EXECUTE = ret_code("ACL_ERROR_RT_MODEL_EXECUTE")
#: "index" of the gear lookups is reserved: (size_t)-1 (model_om2.cpp 1846-1921)
RESERVED_INDEX = (1 << 64) - 1
#: aclmdlIODims holds 128 dims (ACL_MAX_DIM_CNT, hicann/ge inc/external/acl/acl_mdl.h:25)
MAX_DIMS = 128


def refuse_while_executing(model: LoadedModel, doing: str) -> None:
    busy = model.busy_elsewhere(None)
    if busy is not None:
        where = "synchronously in another thread" if busy == SYNC else f"on stream {busy:#x}"
        raise AclFail(MODEL_EXECUTE, f"model {model.model_id} is still executing {where}; synchronize before {doing}")


class GearCalls(Namespace):
    """get_dynamic_batch / hw, get_input_dynamic_gear_count / dims, and the three setters."""

    def _desc_layout(self, model_desc) -> ModelLayout:
        desc = self._sim.lookup(self._sim.descs, model_desc, "model desc")
        if desc.model is None:
            raise AclFail(INVALID_PARAM, f"model desc {model_desc:#x} is empty (call get_desc first)")
        return desc.model.om.layout

    def _gears(self, model_desc, kind: GearKind) -> list[list[int]]:
        """The model's gears of ``kind``; none (ret 0, model_om2.cpp 1803-1807, 1846-1874), or a
        failure when SimConfig.absent_gears_ret asks the simulator to answer like that."""
        layout = self._desc_layout(model_desc)
        if layout.kind == kind:
            return [list(g) for g in layout.gears]
        absent = self._sim.config.absent_gears_ret
        if absent:
            raise AclFail(absent, f"the model has {layout.kind or 'no'} gears, not {kind} gears")
        return []

    @acl_function("k", outputs=({},))
    def get_dynamic_batch(self, model_desc):
        batches = [g[0] for g in self._gears(model_desc, "batch")]
        return {"batchCount": len(batches), "batch": batches}

    @acl_function("kk", outputs=({},))
    def get_dynamic_hw(self, model_desc, index):
        """``index`` is ignored by GE (model_om2.cpp 1818: ``(void)index``)."""
        gears = self._gears(model_desc, "hw")
        return {"hwCount": len(gears), "hw": gears}

    @acl_function("kk", outputs=(0,))
    def get_input_dynamic_gear_count(self, model_desc, index):
        if index != RESERVED_INDEX:
            raise AclFail(INVALID_PARAM, f"index must be -1 (reserved), got {index}")
        return len(self._gears(model_desc, "dims"))

    @acl_function("kkk", outputs=(None,))
    def get_input_dynamic_dims(self, model_desc, index, gear_count):
        """Each gear as the full dims of the inputs in ``--input_shape`` order, static ones included
        (model_om2.cpp 1876-1921); ``name`` is not written ("name not used", aclmdlGetInputDynamicDims.md 54)."""
        if index != RESERVED_INDEX:
            raise AclFail(INVALID_PARAM, f"index must be -1 (reserved), got {index}")
        if gear_count > 4096:  # the binding refuses before calling C (mdl_wrap.cpp 1088-1141)
            raise AclFail(INVALID_PARAM, f"gear_count {gear_count} is above 4096")
        gears = self._gears(model_desc, "dims")
        if gear_count < len(gears):
            raise AclFail(INVALID_PARAM, f"gear_count {gear_count} is below the model's {len(gears)} dims gears")
        layout = self._desc_layout(model_desc)
        found = [layout.runtime_dims(g) for g in range(len(gears))]
        if any(len(d) > MAX_DIMS for d in found):
            raise AclFail(ret_code("ACL_ERROR_FAILURE"), f"the dims gears have more than {MAX_DIMS} dims")
        # the binding builds gear_count dicts; those past the model's gears are zeroed (mdl_wrap.cpp 1103-1133)
        padding = [{"name": "", "dimCount": 0, "dims": []}] * (gear_count - len(found))
        return [{"name": "", "dimCount": len(d), "dims": list(d)} for d in found] + padding

    def _dynamic_buffer(self, dataset: int, index: int):
        """The dataset buffer the setter writes, as the ACL layer checks it before GE is called: a
        buffer at ``index`` with a non-NULL address, else 100000 (model.cpp 1850-1860, 1891-1901,
        1936-1944). GE's own NULL check (145011) is never reached through pyACL."""
        sim = self._sim
        found = sim.lookup(sim.datasets, dataset, "dataset")
        if index >= len(found.buffers):
            raise AclFail(INVALID_PARAM, f"dataset {dataset:#x} has {len(found.buffers)} buffer(s), no index {index}")
        buffer = sim.lookup(sim.buffers, found.buffers[index], "data buffer")
        if buffer.addr == 0:
            raise AclFail(INVALID_PARAM, f"the data buffer at index {index} has a NULL address")
        return buffer

    def _check_index(self, model: LoadedModel, index: int) -> None:
        """GE takes any index with a buffer (model.cpp 1850-1861); the simulator also insists on
        ascend_mbatch_shape_data's index where the model has one, to catch an engine that writes the
        gear into a client input (a static model goes on to GE's answer: 145013, or 145012 for dims,
        ge_executor.cc 375-621)."""
        if model.dynamic_index is not None and index != model.dynamic_index:
            raise AclFail(
                INVALID_PARAM,
                f"index {index} is not the index of {ACL_DYNAMIC_TENSOR_NAME!r} ({model.dynamic_index}); look it "
                f"up with get_input_index_by_name (the real runtime writes the gear into whatever buffer is there)",
            )

    def _select(
        self, model: LoadedModel, buffer, values: tuple[int, ...], minimum: int, length_first: bool, kind: GearKind
    ) -> None:
        """Check the buffer length (145012) and the gear (145013) in GE's order, store the gear on the
        model and write it. Batch and HW check the length before they look at the model's gears, so a
        short buffer is 145012 on any model (ge_executor.cc 385-394 then 404-414, 444-453 then 463-475);
        dims store the gear and then check the length (ge_executor.cc 548-582)."""
        layout = model.om.layout
        short = buffer.size < minimum
        if short and length_first:
            raise AclFail(
                DYNAMIC_LENGTH,
                f"the {ACL_DYNAMIC_TENSOR_NAME!r} buffer has {buffer.size} bytes, at least {minimum} are needed",
            )
        if layout.kind != kind:
            what = {"batch": "batch gears", "hw": "image sizes", "dims": "dims gears"}[kind]
            raise AclFail(NOT_A_GEAR, f"model {model.model_id} has {layout.kind or 'no'} gears, not {what}")
        if values not in layout.gears:
            listed = [list(g) for g in layout.gears]
            raise AclFail(NOT_A_GEAR, f"{list(values)} is not one of the model's gears {listed or '(none: static)'}")
        model.current_gear = layout.gears.index(values)
        if short:
            raise AclFail(
                DYNAMIC_LENGTH,
                f"the {ACL_DYNAMIC_TENSOR_NAME!r} buffer has {buffer.size} bytes, at least {minimum} are needed",
            )
        self._sim.write(buffer.addr, encode_gear(values, buffer.size), True, "dynamic input buffer")

    def _model(self, model_id, doing: str) -> LoadedModel:
        sim = self._sim
        model = sim.model(model_id, sim.current_context())
        refuse_while_executing(model, doing)
        return model

    @acl_function("IkkK")
    def set_dynamic_batch_size(self, model_id, dataset, index, batch_size):
        if batch_size == 0:
            raise AclFail(INVALID_PARAM, "batch size 0")
        buffer = self._dynamic_buffer(dataset, index)
        model = self._model(model_id, "selecting a gear")
        self._check_index(model, index)
        self._select(model, buffer, (batch_size,), 4, length_first=True, kind="batch")

    @acl_function("IkkKK")
    def set_dynamic_hw_size(self, model_id, dataset, index, height, width):
        if height == 0 or width == 0:
            raise AclFail(INVALID_PARAM, f"height {height} x width {width}: neither may be 0")
        buffer = self._dynamic_buffer(dataset, index)
        model = self._model(model_id, "selecting a gear")
        self._check_index(model, index)
        self._select(model, buffer, (height, width), 8, length_first=True, kind="hw")

    @acl_function("IkkO")
    def set_input_dynamic_dims(self, model_id, dataset, index, dims):
        """The full dims of the --input_shape inputs, in that order (aclmdlSetInputDynamicDims.md 44):
        the count and every static value must match (else 145012), the -1 values one gear (else 145013)."""
        if not isinstance(dims, dict):
            raise TypeError("acl.mdl.set_input_dynamic_dims: argument 4 is not dict")
        values = dims.get("dims")
        count = dims.get("dimCount", 0)
        if not isinstance(values, list):
            raise TypeError("The dims of parameter 4 is not a list.")
        if not isinstance(count, int) or len(values) < count or not all(isinstance(v, int) for v in values[:count]):
            raise TypeError("the dims of fourth parameter is not list of int")
        if count == 0:
            raise AclFail(INVALID_PARAM, "dimCount is 0")
        buffer = self._dynamic_buffer(dataset, index)
        model = self._model(model_id, "selecting a gear")
        self._check_index(model, index)
        layout = model.om.layout
        if layout.kind != "dims":
            raise AclFail(
                DYNAMIC_LENGTH,
                f"model {model_id} has {layout.kind or 'no'} gears, not dims gears: "
                f"{count} dims given, the model's --input_shape order has none",
            )
        try:
            gear = layout.gear_of_runtime_dims(values[:count])
        except ValueError as exc:
            raise AclFail(DYNAMIC_LENGTH, str(exc)) from None
        self._select(model, buffer, gear, 4 * len(gear), length_first=False, kind="dims")
