"""Model folders at the edges of what loads: those the load refuses, each with what the offline
``check`` must say, and those it takes (``check_says`` None), which ``check`` must pass.

Each folder starts from what ``ge-triton generate`` writes (or a folder laid out as a user wrote
it: a two-line config, CANN's GE backend example) and changes one thing: a parameter value the
load refuses, a file a parameter names that is missing or malformed, a combination CANN refuses,
a batch above a shape range, a range buffer that cannot be sized, an ATC flag the builder refuses,
a model ATC cannot size, an ensemble step naming a missing output; or an edge that loads (static
AIPP compiled at load, dims gears without batching in a GE backend folder, the GE backend's
``default_model_filename``). The folders are made once per root. That the load refuses exactly the
folders with a ``check_says``, and takes the others, is proven by a real tritonserver, with the
property "offline check errs iff the load refuses" (tests/e2e/test_load_refusals.py); that check
reports each refusal's cause without a server, in process (tests/unit/test_gear_boundaries.py).
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
    """A folder made from the ``base`` folder by ``edit`` (folder, root) and what check must say
    (a substring of one of its errors, which the load's own message holds too); None: the load
    takes the folder and check finds no error in it."""

    name: str
    base: str
    edit: Callable[[Path, Path], None]
    check_says: str | None


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


def _atc_flags(flags: str) -> Callable[[Path, Path], None]:
    return _parameters(atc_flags=flags)


def _replaced(config: str, model: Callable[[Path], Path], files: dict[str, str] | None = None):
    """Replaces the folder by ``config`` (``{name}``, ``{cache}`` filled in), the model ``model``
    writes into the version folder, and ``files`` there."""

    def edit(folder: Path, root: Path) -> None:
        version = folder / "1"
        for path in version.iterdir():
            path.unlink()
        model(version)
        for name, text in (files or {}).items():
            (version / name).write_text(text, encoding="utf-8")
        text = config.replace("{name}", folder.name).replace("{cache}", str(root / "cache"))
        (folder / "config.pbtxt").write_text(text, encoding="utf-8")

    return edit


#: the parameters every folder compiled at load in this corpus sets: acl-sim's ATC, the corpus's cache
SIM_COMPILE = '{key: "engine" value {string_value: "acl-sim"}}, {key: "atc_cache_dir" value {string_value: "{cache}"}}'
STATIC_AIPP = """aipp_op {
  aipp_mode: static
  related_input_rank: 0
  input_format: RGB888_U8
  src_image_size_w: 8
  src_image_size_h: 8
}
"""
TWO_LINE_AIPP = (
    'name: "{name}"\nbackend: "ge"\n'
    f'parameters [{SIM_COMPILE}, {{key: "atc_flags" value {{string_value: "--insert_op_conf=aipp.cfg"}}}}]\n'
)
DECLARED_AIPP = TWO_LINE_AIPP + (
    'max_batch_size: 8\ninput [{name: "x" data_type: TYPE_UINT8 dims: [8, 8, 3]}]\n'
    'output [{name: "c" data_type: TYPE_FP32 dims: [2, 8, 8]}]\n'
)
#: a GE backend folder with dims gears, no batching, inputs and outputs left out (docs/npu-ge.md)
NPU_GE_DIMS = (
    'name: "{name}"\nbackend: "npu_ge"\nmax_batch_size: 0\nparameters [\n'
    ' {key: "ge.inputShape" value {string_value: "x:-1,4"}},\n'
    ' {key: "ge.dynamicDims" value {string_value: "1;2;4"}},\n'
    f" {SIM_COMPILE}]\n"
)
#: CANN's GE backend example's layout: the model under its own name, named by default_model_filename
NPU_GE_LAYOUT = (
    'name: "{name}"\nbackend: "npu_ge"\nmax_batch_size: 8\ndefault_model_filename: "my.onnx"\n'
    f"parameters [{SIM_COMPILE}]\n"
)
UNSIZED = f'name: "{{name}}"\nbackend: "ge"\nmax_batch_size: 8\nparameters [{SIM_COMPILE}]\n'
ENSEMBLE = """name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [{name: "x" data_type: TYPE_FP32 dims: [4]}]
output [{name: "y" data_type: TYPE_FP32 dims: [3]}]
ensemble_scheduling { step [{ model_name: "taken_onnx" model_version: -1 input_map {key: "x" value: "x"}
  output_map {key: "%s" value: "y"} }] }
"""


def _image(version: Path) -> Path:
    return models.image_conv(version / "model.onnx", batch="N", height=8, width=8)


def _unsized_image(version: Path) -> Path:
    return models.image_conv(version / "model.onnx", batch="N", height="H", width="W")


def _ensemble(output: str) -> Callable[[Path, Path], None]:
    def edit(folder: Path, root: Path) -> None:
        for path in (folder / "1").iterdir():
            path.unlink()
        (folder / "config.pbtxt").write_text(ENSEMBLE.replace("{name}", folder.name) % output, encoding="utf-8")

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
    # compile at load: the ATC command the load would build, refused by the builder (check runs it too)
    Refusal("atc_flags_unclosed_quote", "onnx", _atc_flags("--input_shape='x:-1,4"), "No closing quotation"),
    Refusal("atc_flags_output", "onnx", _atc_flags("--output=/tmp/m"), "--output cannot be given here"),
    Refusal("atc_flags_model", "onnx", _atc_flags("--model=other.onnx"), "--model cannot be given here"),
    Refusal("atc_flags_framework", "onnx", _atc_flags("--framework=3"), "--framework cannot be given here"),
    Refusal("atc_flags_soc", "onnx", _atc_flags("--soc_version=Ascend910B3"), "--soc_version cannot be given here"),
    Refusal(
        "atc_flags_batch_gears", "onnx", _atc_flags("--dynamic_batch_size=1,2"), "--dynamic_batch_size cannot be given"
    ),
    Refusal("atc_flags_mode", "onnx", _atc_flags("--mode=1"), "it makes ATC do something else"),
    Refusal("atc_flags_json", "onnx", _atc_flags("--json=m.json"), "--json cannot be given here"),
    Refusal("atc_flags_unknown", "onnx", _atc_flags("--aicore=2"), "--aicore is not an ATC flag"),
    Refusal("atc_flags_no_dashes", "onnx", _atc_flags("precision_mode=fp16"), "is not an ATC flag of the form"),
    Refusal("atc_flags_precision", "onnx", _atc_flags("--precision_mode=fp32"), "--precision_mode=fp32: ATC accepts"),
    Refusal(
        "atc_flags_two_precisions",
        "onnx",
        _atc_flags("--precision_mode=force_fp16 --precision_mode_v2=fp16"),
        "together; ATC takes one",
    ),
    Refusal("atc_flags_aicore_num", "onnx", _atc_flags("--aicore_num=12"), "expected CUBE|VECTOR core counts"),
    Refusal("atc_flags_input_shape", "onnx", _atc_flags("--input_shape=z:-1,4"), "names 'z', which is not a model"),
    Refusal("atc_flags_input_format", "onnx", _atc_flags("--input_format=NCWH"), "'NCWH': accepted"),
    Refusal(
        "atc_flags_insert_op_conf", "onnx", _atc_flags("--insert_op_conf=missing.cfg"), "missing.cfg: No such file"
    ),
    Refusal(
        "atc_flags_dims_values",
        "onnx",
        _atc_flags("--input_shape=x:-1,4 --dynamic_dims=1,2;3,4"),
        "gear 1,2 has 2 value(s)",
    ),
    Refusal(
        "atc_flags_ranges_with_dims",
        "onnx",
        _atc_flags("--input_shape=x:1~8,4 --dynamic_dims=1;2"),
        "ATC refuses ranges together with --dynamic_batch_size, --dynamic_image_size or --dynamic_dims (E10040)",
    ),
    Refusal(
        "atc_flags_ranges_below_max_batch",
        "onnx",
        _atc_flags("--input_shape=x:1~4,4"),
        "max_batch_size 8 batches requests along axis 0, but the shape ranges of --input_shape",
    ),
    Refusal("atc_cache_relative", "onnx", _parameters(atc_cache_dir="cache"), "(a relative path"),
    Refusal("onnx_unsized_height_width", "onnx", _replaced(UNSIZED, _unsized_image), "have no size, and ATC compiles"),
    Refusal("ensemble_missing_output", "onnx", _ensemble("nope"), "is mapped from non-existing output nope"),
    # edges the load takes: check must pass them (check_says None)
    Refusal("taken_onnx", "onnx", lambda folder, root: None, None),
    Refusal("taken_static_aipp_two_line", "onnx", _replaced(TWO_LINE_AIPP, _image, {"aipp.cfg": STATIC_AIPP}), None),
    Refusal("taken_static_aipp_declared", "onnx", _replaced(DECLARED_AIPP, _image, {"aipp.cfg": STATIC_AIPP}), None),
    Refusal("taken_npu_ge_dims", "onnx", _replaced(NPU_GE_DIMS, lambda v: models.linear(v / "linear.onnx")), None),
    Refusal("taken_npu_ge_layout", "onnx", _replaced(NPU_GE_LAYOUT, lambda v: models.linear(v / "my.onnx")), None),
    Refusal("taken_onnx_ranges", "onnx", _atc_flags("--input_shape=x:1~8,4"), None),
    Refusal("taken_ensemble", "onnx", _ensemble("logits"), None),
)
REFUSED = tuple(case for case in CASES if case.check_says is not None)
TAKEN = tuple(case for case in CASES if case.check_says is None)


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
        "onnx": (models.linear(sources / "linear.onnx"), {"engine": "acl-sim"}),
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
        if case.base == "onnx":  # compiled by the simulator's ATC into the corpus's own cache
            _parameters(atc_cache_dir=str(root / "cache"))(folder, root)
        case.edit(folder, root)
    return repo, {case.name: case for case in CASES}
