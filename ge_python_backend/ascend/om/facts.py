"""Provenance facts of an OM: what ATC recorded about the build, and the header's identity."""

from __future__ import annotations

from ge_python_backend.ascend.om.header import OmHeader
from ge_python_backend.ascend.om.modeldef import ModelDef

#: ATC --framework numbers -> readable names.
FRAMEWORKS = {"0": "caffe", "1": "mindspore", "3": "tensorflow", "5": "onnx"}

_MODEL_ATTRS = (
    "soc_version",
    "atc_version",
    "atc_cmdline",
    "framework_type",
    "opp_version",
    "memory_size",
    "weight_size",
    "stream_num",
    "event_num",
)


def framework_name(framework_type: str) -> str:
    """Readable framework of a recorded framework_type: "3" or "TensorFlow" -> "tensorflow"."""
    text = framework_type.strip()
    if text in FRAMEWORKS:
        return FRAMEWORKS[text]
    return text.lower() if text.lower() in FRAMEWORKS.values() else text


def collect_facts(header: OmHeader, model: ModelDef) -> dict[str, str]:
    """Facts as strings; model attributes that are absent or empty are left out."""
    facts: dict[str, str] = {}
    for name in _MODEL_ATTRS:
        value = model.attrs.get(name)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value) != "":
            facts[name] = str(value)
    if "framework_type" in facts:
        facts["framework"] = framework_name(facts["framework_type"])
    if header.name:
        facts["om_name"] = header.name
    facts["om_header_version"] = header.version_name
    facts["om_model_type"] = header.model_type_name
    facts["om_ir_version"] = str(header.om_ir_version)
    if header.platform_version:
        facts["platform_version"] = header.platform_version
    return facts
