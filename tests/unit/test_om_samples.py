"""The reader on the public sample files of ../shared/om-samples (facts from om-format.md §3).

Skipped when the samples are not present.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ge_python_backend.ascend.om import IO_FROM_INOUT, IO_FROM_MODEL_DEF, read_om
from ge_python_backend.ascend.om.inout import parse_inout
from ge_python_backend.ascend.om.iospec import io_from_inout, io_from_model_def
from ge_python_backend.ascend.om.modeldef import ModelDef
from ge_python_backend.specs import BatchSupport, TensorSpec
from tests.support.samples import OM_SAMPLES_DIR

SAMPLES = OM_SAMPLES_DIR


def sample(name: str) -> Path:
    path = SAMPLES / name
    if not path.is_file():
        pytest.skip(f"sample {path} is not present")
    return path


def test_autoencoder_tf_cann504():
    om = read_om(sample("autoencoder_tf_cann504.om"))
    assert (om.header.version_name, om.header.model_length, om.header.length) == ("2.0", 0, 618737)
    assert om.header.platform_version == "1.11.z.0" and om.header.om_ir_version == 2
    (model,) = om.models
    assert model.table_bits == 32
    assert [(p.type_name, p.size) for p in model.partitions] == [
        ("MODEL_DEF", 154630),
        ("WEIGHTS_DATA", 386560),
        ("TBE_KERNELS", 64667),
        ("TASK_INFO", 12828),
    ]
    assert model.partitions[0].offset == 308
    assert om.io_source == IO_FROM_MODEL_DEF
    assert om.spec.inputs == (TensorSpec("input", "FP32", (100, 784), "NHWC", native_type="DT_FLOAT"),)
    (output,) = om.spec.outputs
    assert (output.name, output.dtype, output.shape) == ("generation/output:0", "FP32", (100, 28, 28, 1))
    assert om.spec.batch == BatchSupport("static", (100,))
    facts = om.spec.facts
    assert facts["soc_version"] == "Ascend310"
    assert "--input_shape=input:100,784" in facts["atc_cmdline"] and "--framework=3" in facts["atc_cmdline"]
    assert facts["framework"] == "tensorflow"


def test_multi_model_cann_test():
    om = read_om(sample("multi_model_cann_test.om"))
    assert (om.header.model_num, om.header.is_unknow_model, om.header.model_length) == (3, 1, 15753)
    assert [m.table_offset for m in om.models] == [256, 9092, 12557]
    assert all(m.table_bits == 64 for m in om.models)
    assert [m.name for m in om.models] == ["root", "sub_1", "sub_2"]
    assert [t.name for t in om.spec.inputs] == ["data_1", "data_2"]  # compressed 'index' attributes 0 and 1
    root = ModelDef(_partition_bytes(om, 0, "MODEL_DEF"), om.models[0].partitions[0].offset)
    assert [op.attrs["index"] for op in root.graphs[0].ops if op.type == "Data"] == [0, 1]
    assert [g.name for g in root.graphs] == ["root", "sub_1", "sub_2"]


def test_root_model_cann_test_reads_model_inout_info():
    om = read_om(sample("root_model_cann_test.om"))
    assert om.io_source == IO_FROM_INOUT
    assert [p.type_name for p in om.models[0].partitions] == ["MODEL_INOUT_INFO", "MODEL_DEF", "TASK_INFO"]
    assert om.spec.inputs == (TensorSpec("_arg_0", "INT32", (16,), "ND", native_type="DT_INT32"),)
    assert om.spec.outputs == (TensorSpec("output_0_out_0", "INT32", (-1,), "ND", native_type="DT_INT32"),)


def test_root_model_inout_agrees_with_its_model_def():
    """Two independent encodings in one file (ge:: C++ enums vs protobuf enums) must tell the same story."""
    om = read_om(sample("root_model_cann_test.om"))
    inout = om.models[0].partitions[0]
    model_def = om.models[0].partitions[1]
    from_inout = io_from_inout(parse_inout(_partition_bytes(om, 0, "MODEL_INOUT_INFO"), inout.offset))
    from_model_def = io_from_model_def(ModelDef(_partition_bytes(om, 0, "MODEL_DEF"), model_def.offset))
    assert from_inout == from_model_def


def test_flow_model_cann_test():
    om = read_om(sample("flow_model_cann_test.om"))
    assert (om.header.model_type, om.header.model_type_name) == (3, "flow")
    assert om.models[0].table_bits == 64
    assert [p.type for p in om.models[0].partitions] == [0, 6, 7, 7]


def _partition_bytes(om, model: int, type_name: str) -> bytes:
    part = next(p for p in om.models[model].partitions if p.type_name == type_name)
    with open(om.path, "rb") as handle:
        handle.seek(part.offset)
        return handle.read(part.size)
