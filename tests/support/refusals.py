"""Model folders whose load fails: parameters, files and configs ``check`` once passed.

Each folder starts from what ``ge-triton generate`` writes and breaks one thing, the way users
did: a parameter value the load refuses, a file a parameter names that is missing or malformed, a
combination CANN refuses, a batch above a shape range, a range buffer that cannot be sized. The
folders are made once per root; ``CASES`` says, per folder, what the offline ``check`` must say
(a substring of one of its errors). That the load refuses each is proven by a real tritonserver
(tests/e2e/test_load_refusals.py); that ``check`` reports each without one, in process
(tests/unit/test_gear_boundaries.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ge_python_backend.ascend.aipp import AippConfig, AippMode
from ge_python_backend.repository.config import format_config, read_config_file
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing import models
from tests.support import acl_sim_nets as nets

#: a user's model.py declaring its own parameter with the package's parser (README's example)
OWN_PARAMETER_MODEL = """from ge_python_backend import GEModel
from ge_python_backend.params import Parameter, parse_int


class TritonPythonModel(GEModel):
    extra_parameters = (Parameter("top_k", parse_int(1), 5, "an integer >= 1", "labels per image"),)
"""


@dataclass(frozen=True)
class Refusal:
    """A folder made from the ``base`` folder by ``edit`` (folder, root) and what check must say."""

    name: str
    base: str
    edit: Callable[[Path, Path], None]
    check_says: str


def _parameters(**values: str) -> Callable[[Path, Path], None]:
    def edit(folder: Path, root: Path) -> None:
        config = read_config_file(folder / "config.pbtxt")
        for key, value in values.items():
            if value == "<unset>":
                config.parameters.pop(key, None)
            else:
                config.parameters[key].string_value = value.replace("{root}", str(root))
        (folder / "config.pbtxt").write_text(format_config(config), encoding="utf-8")

    return edit


def _file(name: str, content: str | bytes, **values: str) -> Callable[[Path, Path], None]:
    """Writes ``content`` as ``<version>/<name>`` and sets ``values``."""

    def edit(folder: Path, root: Path) -> None:
        path = folder / "1" / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        _parameters(**values)(folder, root)

    return edit


def _max_batch(size: int) -> Callable[[Path, Path], None]:
    def edit(folder: Path, root: Path) -> None:
        config = read_config_file(folder / "config.pbtxt")
        config.max_batch_size = size
        (folder / "config.pbtxt").write_text(format_config(config), encoding="utf-8")

    return edit


def _own_model(top_k: str) -> Callable[[Path, Path], None]:
    def edit(folder: Path, root: Path) -> None:
        (folder / "1" / "model.py").write_text(OWN_PARAMETER_MODEL, encoding="utf-8")
        _parameters(top_k=top_k)(folder, root)

    return edit


PROFILER_ON = json.dumps({"profiler": {"switch": "on", "output": "{root}/prof"}})
BINARY = bytes(range(256)) * 4

CASES = (
    Refusal("profiling_batches_without_dir", "range", _parameters(acl_profiling_batches="5"), "acl_profiling_dir"),
    Refusal("dump_config_missing", "range", _parameters(acl_dump_config="missing.json"), "parameter 'acl_dump_config'"),
    Refusal(
        "dump_config_misspelt_key",
        "range",
        _file("dump.json", json.dumps({"dump": {"dump_pth": "/tmp/x", "dump_list": []}}), acl_dump_config="dump.json"),
        "dump.dump_pth: is not a key CANN reads",
    ),
    Refusal("acl_json_not_json", "range", _file("acl.json", "{", acl_json="acl.json"), "is not JSON"),
    Refusal(
        "acl_json_unknown_key",
        "range",
        _file(
            "acl.json",
            json.dumps({"profiler": {"switch": "off", "aic_metric": "PipeUtilization"}}),
            acl_json="acl.json",
        ),
        "aic_metric",
    ),
    Refusal(
        "acl_json_profiling_and_profiling_dir",
        "range",
        _file("acl.json", PROFILER_ON, acl_json="acl.json", acl_profiling_dir="{root}/prof_dir"),
        "parameters 'acl_json' and 'acl_profiling_dir' cannot be combined",
    ),
    Refusal("aipp_config_missing", "aipp", _parameters(aipp_config="missing.cfg"), "parameter 'aipp_config'"),
    Refusal(
        "aipp_config_bad_format",
        "aipp",
        _file("aipp.cfg", "aipp_op {\n  aipp_mode: dynamic\n  input_format: RGB999\n}\n", aipp_config="aipp.cfg"),
        "RGB999",
    ),
    Refusal(
        "aipp_config_binary",
        "aipp",
        _file("aipp.cfg", BINARY, aipp_config="aipp.cfg"),
        "aipp.cfg is not a text file in ATC's aipp_op syntax",
    ),
    Refusal(
        "aipp_config_not_an_image",
        "aipp",
        _file("aipp.cfg", "aipp_op {\n  aipp_mode: dynamic\n  related_input_rank: 1\n}\n", aipp_config="aipp.cfg"),
        "related_input_rank 1 is not an input with dynamic AIPP",
    ),
    Refusal("max_shapes_wrong_rank", "range", _parameters(acl_max_shapes="x:4,4,4"), "gives 'x' rank 3"),
    Refusal("max_shapes_unknown_name", "range", _parameters(acl_max_shapes="z:4,4"), "names 'z'"),
    Refusal("max_batch_above_the_range", "range", _max_batch(8), "above the largest batch the model runs, 4"),
    Refusal(
        "unbounded_without_max_shapes",
        "unbounded",
        _parameters(acl_max_shapes="<unset>"),
        "has no upper bound on its shape",
    ),
    Refusal("engine_misspelt", "range", _parameters(engine="acl_sim"), "did you mean 'acl-sim'?"),
    Refusal("template_top_k_not_a_number", "classifier", _parameters(top_k="abc"), "parameter 'top_k'"),
    Refusal("template_top_k_zero", "classifier", _parameters(top_k="0"), "parameter 'top_k'"),
    Refusal("own_top_k_not_a_number", "range", _own_model("abc"), "parameter 'top_k' has value 'abc'"),
    Refusal("own_top_k_zero", "range", _own_model("0"), "parameter 'top_k' has value '0' (must be >= 1)"),
)


def build(root: Path) -> tuple[Path, dict[str, Refusal]]:
    """The repository of every case (and nothing else), under ``root``."""
    sources = root / "sources"
    sources.mkdir(parents=True)
    matmul = nets.matmul_add(sources / "matmul.onnx")
    sim_compile(matmul, sources / "range.om", input_shapes="x:1~4,4")
    sim_compile(matmul, sources / "unbounded.om", input_shapes="x:-1,4")
    dynamic = AippConfig(aipp_mode=AippMode.DYNAMIC, max_src_image_size=2 * 10 * 12 * 3)
    sim_compile(
        nets.image_conv(sources / "conv.onnx", batch="N"),
        sources / "aipp.om",
        input_shapes="x:-1,3,6,8",
        batch_gears="1,2",
        insert_op_conf=[dynamic],
    )
    classifier = models.image_classifier(sources / "classifier.onnx", size=8, channels=(4,), classes=4)
    (sources / "labels.txt").write_text("a\nb\nc\nd\n", encoding="utf-8")
    bases = {
        "range": (sources / "range.om", {}),
        "unbounded": (sources / "unbounded.om", {}),
        "aipp": (sources / "aipp.om", {}),
        "classifier": (
            classifier,
            {"template": "classification", "template_options": {"labels": str(sources / "labels.txt"), "top_k": "2"}},
        ),
    }
    repo = root / "repo"
    for case in CASES:
        model_file, options = bases[case.base]
        folder = generate(model_file, repo, GenerateOptions(name=case.name, instance_count=1, **options)).model_dir
        case.edit(folder, root)
    return repo, {case.name: case for case in CASES}
