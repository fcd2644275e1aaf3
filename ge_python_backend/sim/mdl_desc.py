"""``acl.mdl`` model-description queries of the simulator: tensors, dims (V1, V2, ranges), AIPP info.

What each returns follows the pyACL binding (hicann/runtime python/pyACL/mdl/mdl_wrap.cpp, commit
134e2edb, lines cited per call) over GE's implementation (hicann/ge api/acl/acl_model/model/).
"""

from __future__ import annotations

from typing import Any

from ge_python_backend.ascend.aipp import AippConfig, AippMode
from ge_python_backend.ascend.constants import format_code, ret_code
from ge_python_backend.ascend.layout import LayoutTensor
from ge_python_backend.sim.aipp import network_nchw
from ge_python_backend.sim.models import LoadedModel, ModelDesc
from ge_python_backend.sim.namespace import Namespace
from ge_python_backend.sim.signature import AclFail, acl_function
from ge_python_backend.sim.simom import InputRole, NetworkInput
from ge_python_backend.sim.state import INVALID_PARAM

AIPP_NOT_EXIST = ret_code("ACL_ERROR_GE_AIPP_NOT_EXIST")
API_NOT_SUPPORT = ret_code("ACL_ERROR_API_NOT_SUPPORT")
_NO_INDEX = (1 << 64) - 1
#: aclmdlInputAippType (acl_mdl.h:132-137) and ACL_INVALID_NODE_INDEX (acl_mdl.h:30)
WITHOUT_AIPP, WITH_STATIC_AIPP, WITH_DYNAMIC_AIPP, DYNAMIC_AIPP_NODE = 0, 1, 2, 3
INVALID_NODE_INDEX = 0xFFFFFFFF
#: the C0 of the FP16 NC1HWC0 tensor an AIPP writes
_C0 = 16


def dims_dict(name: str, dims) -> dict[str, Any]:
    """The ``{"name", "dimCount", "dims"}`` dict the binding builds from an aclmdlIODims."""
    return {"name": name, "dimCount": len(dims), "dims": list(dims)}


class DescCalls(Namespace):
    """create/get/destroy desc and what a desc answers."""

    @acl_function("", value=True)
    def create_desc(self):
        return self._sim.add(self._sim.descs, ModelDesc)

    @acl_function("kI")
    def get_desc(self, model_desc, model_id):
        desc = self._sim.lookup(self._sim.descs, model_desc, "model desc")
        desc.model = self._sim.model(model_id)

    @acl_function("k")
    def destroy_desc(self, model_desc):
        self._sim.remove(self._sim.descs, model_desc, "model desc")

    def _described(self, model_desc) -> LoadedModel:
        desc = self._sim.lookup(self._sim.descs, model_desc, "model desc")
        if desc.model is None:
            raise AclFail(INVALID_PARAM, f"model desc {model_desc:#x} is empty (call get_desc first)")
        return desc.model

    def _tensor(self, model_desc, index, outputs: bool) -> LayoutTensor:
        model = self._described(model_desc)
        tensors = model.om.layout.outputs if outputs else model.om.all_inputs
        if index >= len(tensors):
            kind = "output" if outputs else "input"
            raise AclFail(INVALID_PARAM, f"{kind} index {index} is out of range; the model has {len(tensors)}")
        return tensors[index]

    @acl_function("k", value=True)
    def get_num_inputs(self, model_desc):
        return len(self._described(model_desc).om.all_inputs)

    @acl_function("k", value=True)
    def get_num_outputs(self, model_desc):
        return len(self._described(model_desc).om.layout.outputs)

    @acl_function("kk", value=True)
    def get_input_size_by_index(self, model_desc, index):
        return self._tensor(model_desc, index, False).size

    @acl_function("kk", value=True)
    def get_output_size_by_index(self, model_desc, index):
        return self._tensor(model_desc, index, True).size

    @acl_function("kk", outputs=({},))
    def get_input_dims(self, model_desc, index):
        """V1: the image's dims for an AIPP input (davinci_model.cc 4328-4356; aclmdlGetInputDims.md 31-61)."""
        tensor = self._tensor(model_desc, index, False)
        return dims_dict(tensor.name, tensor.v1_dims)

    @acl_function("kk", outputs=({},))
    def get_input_dims_v2(self, model_desc, index):
        """V2: what the buffer holds; its product is the input's size (aclmdlGetInputDimsV2.md 31-61)."""
        tensor = self._tensor(model_desc, index, False)
        return dims_dict(tensor.name, tensor.dims)

    @acl_function("kk", outputs=({},))
    def get_output_dims(self, model_desc, index):
        tensor = self._tensor(model_desc, index, True)
        return dims_dict(tensor.name, tensor.dims)

    @acl_function("kk", outputs=({},))
    def get_cur_output_dims(self, model_desc, index):
        tensor = self._tensor(model_desc, index, True)
        model = self._described(model_desc)
        layout = model.om.layout
        if layout.kind == "range":  # the dynamic-shape executor does not answer it (model.cpp 1981-1985)
            raise AclFail(
                API_NOT_SUPPORT,
                "get_cur_output_dims is not supported for a shape-range model; read "
                "the output dataset's tensor desc after execute",
            )
        if layout.kind and model.current_gear is None:
            return dims_dict(tensor.name, tensor.dims)
        return dims_dict(tensor.name, layout.output_shapes(model.current_gear or 0)[index])

    @acl_function("kk", value=True, fail_value=None)
    def get_input_name_by_index(self, model_desc, index):
        return self._tensor(model_desc, index, False).name

    @acl_function("kk", value=True, fail_value=None)
    def get_output_name_by_index(self, model_desc, index):
        return self._tensor(model_desc, index, True).name

    def _index_by_name(self, model_desc, name, outputs: bool) -> int:
        model = self._described(model_desc)
        tensors = model.om.layout.outputs if outputs else model.om.all_inputs
        for index, tensor in enumerate(tensors):
            if tensor.name == name:
                return index
        raise AclFail(INVALID_PARAM, f"the model has no {'output' if outputs else 'input'} named {name!r}")

    @acl_function("ks", outputs=(_NO_INDEX,))
    def get_input_index_by_name(self, model_desc, name):
        return self._index_by_name(model_desc, name, False)

    @acl_function("ks", outputs=(_NO_INDEX,))
    def get_output_index_by_name(self, model_desc, name):
        return self._index_by_name(model_desc, name, True)

    @acl_function("kk", value=True, fail_value=-1)
    def get_input_format(self, model_desc, index):
        return format_code(self._tensor(model_desc, index, False).format)

    @acl_function("kk", value=True, fail_value=-1)
    def get_output_format(self, model_desc, index):
        return format_code(self._tensor(model_desc, index, True).format)

    @acl_function("kk", value=True, fail_value=-1)
    def get_input_data_type(self, model_desc, index):
        return self._tensor(model_desc, index, False).data_type.code

    @acl_function("kk", value=True, fail_value=-1)
    def get_output_data_type(self, model_desc, index):
        return self._tensor(model_desc, index, True).data_type.code

    @acl_function("kk", outputs=({"rangeCount": 0, "range": []},))
    def get_input_dims_range(self, model_desc, index):
        """``{"rangeCount", "range": [[min, max], ...]}``; static axes [d, d], a gear model none
        (model_om2.cpp 471-543); the binding builds the dict even on failure (mdl_wrap.cpp 1476-1503)."""
        tensor = self._tensor(model_desc, index, False)
        model = self._described(model_desc)
        if tensor.ranges:
            ranges = [list(r) for r in tensor.ranges]
        elif model.om.layout.kind in ("batch", "hw", "dims"):
            ranges = []
        else:
            ranges = [[d, d] for d in tensor.dims]
        return {"rangeCount": len(ranges), "range": ranges}

    # --- AIPP -----------------------------------------------------------------------------------

    def _loaded_input(self, model_id, index) -> tuple[LoadedModel, int]:
        model = self._sim.model(model_id)
        if index >= len(model.om.all_inputs):
            raise AclFail(
                INVALID_PARAM, f"input index {index} is out of range; the model has {len(model.om.all_inputs)}"
            )
        return model, index

    @acl_function("Ik", outputs=(0, INVALID_NODE_INDEX))
    def get_aipp_type(self, model_id, index):
        """(type, attached index): 1 static AIPP, 2 an image with dynamic AIPP (attached: its
        parameter input), 3 the parameter input itself (acl_aipp.cpp 456-474; aipp_utils.cc 201-244)."""
        model, index = self._loaded_input(model_id, index)
        entry = model.om.model_inputs[index]
        if entry.role is InputRole.AIPP_DATA:
            return DYNAMIC_AIPP_NODE, INVALID_NODE_INDEX
        aipp = entry.tensor.aipp
        if aipp is None:
            return WITHOUT_AIPP, INVALID_NODE_INDEX
        if aipp.aipp_mode is AippMode.STATIC:
            return WITH_STATIC_AIPP, INVALID_NODE_INDEX
        attached = model.om.index_of(InputRole.AIPP_DATA, entry.tensor.name)
        return WITH_DYNAMIC_AIPP, INVALID_NODE_INDEX if attached is None else attached

    @acl_function("Ik", outputs=(None,))
    def get_first_aipp_info(self, model_id, index):
        """The aclAippInfo dict of an AIPP input; 145015 when it has none (acl_aipp.cpp 502-595).
        The binding exports six of the nine matrix entries (mdl_wrap.cpp 656-823)."""
        model, index = self._loaded_input(model_id, index)
        tensor = model.om.model_inputs[index].tensor
        if tensor.aipp is None:
            raise AclFail(AIPP_NOT_EXIST, f"input {index} ({tensor.name!r}) has no AIPP")
        entry = model.om.client_input(tensor.name)
        assert entry.network is not None, f"AIPP input {tensor.name!r} without its network input"
        layout = model.om.layout
        batches = [g[0] for g in layout.gears] if layout.kind == "batch" else []
        return _aipp_info(tensor, tensor.aipp, entry.network, max(batches, default=0))


def _aipp_info(tensor: LayoutTensor, config: AippConfig, network: NetworkInput, batch: int) -> dict[str, Any]:
    """outDims[0]: srcDims is the AIPP output's origin shape, the network input ATC was given, in its
    origin format and type (srcFormat, srcDatatype); aippOutdims the AIPP output itself, FP16 NC1HWC0
    (insert_aipp_op_util.cc 675-705; acl_aipp.cpp 502-595). A batch model reports its largest gear."""
    dims = tuple(batch if d < 0 and batch else d for d in network.dims)
    n, c, h, w = network_nchw(NetworkInput(network.data_type, network.format, dims))
    c1 = -(-c // _C0)
    out_dims = (n, c1, h, w, _C0)
    src_size = LayoutTensor(tensor.name, network.data_type, network.format, dims, 0).byte_size(dims)
    matrix = config.matrix or ((0, 0, 0),) * 3
    fmt = config.input_format.value if config.input_format is not None else 0
    info: dict[str, Any] = {
        "cscSwitch": int(config.csc_switch),
        "matrixR0C0": matrix[0][0],
        "matrixR0C1": matrix[0][1],
        "matrixR1C0": matrix[1][0],
        "matrixR1C1": matrix[1][1],
        "matrixR1C2": matrix[1][2],
        "matrixR2C2": matrix[2][2],
        "outputBias0": config.output_bias[0],
        "outputBias1": config.output_bias[1],
        "outputBias2": config.output_bias[2],
        "inputBias0": config.input_bias[0],
        "inputBias1": config.input_bias[1],
        "inputBias2": config.input_bias[2],
        "rbuvSwapSwitch": int(config.rbuv_swap_switch),
        "axSwapSwitch": int(config.ax_swap_switch),
        "singleLineMode": 0,
        "srcImageSizeW": config.src_image_size_w,
        "srcImageSizeH": config.src_image_size_h,
        "srcFormat": format_code(network.format),
        "srcDatatype": network.data_type.code,
        "srcDimNum": len(dims),
        "shapeCount": 1,
        "inputFormat": fmt,
        "aippExtend": 0,
        "cropSwitch": int(config.crop),
        "loadStartPosW": config.load_start_pos_w,
        "loadStartPosH": config.load_start_pos_h,
        "cropSizeW": config.crop_size_w,
        "cropSizeH": config.crop_size_h,
        "resizeSwitch": 0,
        "resizeOutputW": 0,
        "resizeOutputH": 0,
        "paddingSwitch": int(config.padding),
        "leftPaddingSize": config.left_padding_size,
        "rightPaddingSize": config.right_padding_size,
        "topPaddingSize": config.top_padding_size,
        "bottomPaddingSize": config.bottom_padding_size,
        "outDims": [
            {
                "srcDims": dims_dict(tensor.name, dims),
                "srcSize": src_size,
                "aippOutdims": dims_dict(tensor.name, out_dims),
                "aippOutSize": 2 * int(_prod(out_dims)),
            }
        ],
    }
    for i in range(4):
        # mean/min channel 3 are stored but never read back for OM1 models (ge_op_utils.cc 131-140)
        info[f"meanChn{i}"] = config.mean_chn[i] if i < 3 else 0
        info[f"minChn{i}"] = float(config.min_chn[i]) if i < 3 else 0.0
        info[f"varReciChn{i}"] = float(config.var_reci_chn[i])
    return info


def _prod(dims) -> int:
    result = 1
    for d in dims:
        result *= max(int(d), 1)
    return result
