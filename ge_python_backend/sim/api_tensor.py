"""Top-level ``acl.*`` tensor-desc calls of the simulator (hicann/runtime python/pyACL/py_init_acl.cpp
155-475: create_tensor_desc "iOi", destroy_tensor_desc returns None, the getters plain values,
get_tensor_desc_dim_v2 ``(dim, ret)``)."""

from __future__ import annotations

import math

from ge_python_backend.ascend.constants import data_type
from ge_python_backend.sim.models import TensorDesc
from ge_python_backend.sim.namespace import Namespace
from ge_python_backend.sim.signature import AclFail, acl_function
from ge_python_backend.sim.state import INVALID_PARAM
from ge_python_backend.specs import NUMPY_DTYPES


class TensorDescCalls(Namespace):
    """create_tensor_desc and what a tensor desc answers."""

    def _desc(self, handle: int) -> TensorDesc:
        """A desc the caller created, or a dataset's own copy (get_dataset_tensor_desc: execute
        rewrites the output descs of a shape-range model, model.cpp 672-693, 818-842)."""
        return self._sim.tensor_desc(handle)

    @acl_function("iOi", value=True)
    def create_tensor_desc(self, dtype, dims, fmt):
        if not isinstance(dims, list):
            raise TypeError("acl.create_tensor_desc: argument 2 is not list")
        if not all(isinstance(d, int) for d in dims):
            raise TypeError("acl.create_tensor_desc: argument 2 is not a list of int")
        shape = tuple(dims)
        return self._sim.add(self._sim.tensor_descs, lambda handle: TensorDesc(handle, dtype, shape, fmt))

    @acl_function("k", value=True, fail_value=None)
    def destroy_tensor_desc(self, desc):
        self._sim.remove(self._sim.tensor_descs, desc, "tensor desc")

    @acl_function("k", value=True)
    def get_tensor_desc_num_dims(self, desc):
        return len(self._desc(desc).dims)

    @acl_function("kk", value=True, fail_value=-1)
    def get_tensor_desc_dim(self, desc, index):
        dims = self._desc(desc).dims
        if index >= len(dims):
            raise AclFail(INVALID_PARAM, f"dim index {index} is out of range; the desc has {len(dims)} dims")
        return dims[index]

    @acl_function("kk", outputs=(-1,))
    def get_tensor_desc_dim_v2(self, desc, index):
        dims = self._desc(desc).dims
        if index >= len(dims):
            raise AclFail(INVALID_PARAM, f"dim index {index} is out of range; the desc has {len(dims)} dims")
        return dims[index]

    @acl_function("k", value=True, fail_value=-1)
    def get_tensor_desc_type(self, desc):
        return self._desc(desc).data_type

    @acl_function("k", value=True, fail_value=-1)
    def get_tensor_desc_format(self, desc):
        return self._desc(desc).format

    @acl_function("k", value=True)
    def get_tensor_desc_element_count(self, desc):
        return math.prod(self._desc(desc).dims)

    @acl_function("k", value=True)
    def get_tensor_desc_size(self, desc):
        found = self._desc(desc)
        dtype = NUMPY_DTYPES.get(data_type(found.data_type).triton)
        return math.prod(found.dims) * (dtype.itemsize if dtype is not None else 0)
