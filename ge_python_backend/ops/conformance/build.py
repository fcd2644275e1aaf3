"""The conformance models: tiny ONNX networks compiled with the host's ATC for the device's SoC,
or with the simulator's ATC and the same command line for ``acl-sim``.

Each model is one kind the acl engine serves (static shapes, batch / image-size / dims gears,
static and dynamic AIPP, shape ranges) or one a probe needs (an unbounded range, a model for
another SoC). Its ATC flags are written once, here, and both ATCs (the host's and the
simulator's, ``atc.py``) get exactly the same command line. The ATC call is the one function
``compile_model``; each model gets a folder of its own, so what ATC wrote is all that is in it;
nothing is cached (each run compiles afresh).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ge_python_backend.ascend.atc import FRAMEWORKS
from ge_python_backend.ascend.atcflags import parse_input_shape
from ge_python_backend.ascend.limits import platform_npu_arch
from ge_python_backend.ops.conformance.atc import Atc, AtcRun, CompileError
from ge_python_backend.testing import models as nets

#: rows of the static model's input x (FP32 [rows, 4]): 256 bytes, so a buffer 32 short stays non-empty
STATIC_ROWS = 16

#: the static AIPP: YUV420SP_U8 (NV12) 8 x 6 with ATC's default CSC matrix, mean and variance
#: reciprocal per channel, and a mean_chn_3 that OM1 files cannot read back (row 82)
STATIC_AIPP = """aipp_op {
    aipp_mode: static
    related_input_rank: 0
    input_format: YUV420SP_U8
    src_image_size_w: 8
    src_image_size_h: 6
    csc_switch: true
    mean_chn_0: 20
    mean_chn_1: 30
    mean_chn_2: 40
    mean_chn_3: 5
    var_reci_chn_0: 0.01
    var_reci_chn_1: 0.02
    var_reci_chn_2: 0.03
}
"""
#: the dynamic AIPP: up to 4 RGB888 images of 12 x 10 (max_src_image_size = 4 x 12 x 10 x 3)
DYNAMIC_AIPP = """aipp_op {
    aipp_mode: dynamic
    related_input_rank: 0
    max_src_image_size: 1440
}
"""
#: an odd YUV420SP width, which ATC refuses (row 83)
ODD_AIPP = STATIC_AIPP.replace("src_image_size_w: 8", "src_image_size_w: 7")


@dataclass(frozen=True)
class AtcFlags:
    """The ATC flags of one model, in ATC's spelling (``--input_shape`` and the kind's own)."""

    input_shape: str
    input_format: str = "ND"
    dynamic_batch_size: str = ""
    dynamic_image_size: str = ""
    dynamic_dims: str = ""
    #: an AIPP config (ATC's aipp_op syntax), written next to the model as ``<name>.aipp.cfg``
    aipp: str = ""
    #: further flags, as given (``--precision_mode_v2=origin``)
    extra: tuple[str, ...] = ()

    @property
    def shape_ranges(self) -> bool:
        """A shape-range model: an axis a~b, or -1 without gears (--input_shape.md)."""
        dims = [d for shape in parse_input_shape(self.input_shape).values() for d in shape]
        gears = self.dynamic_batch_size or self.dynamic_image_size or self.dynamic_dims
        return any(isinstance(d, tuple) for d in dims) or (-1 in dims and not gears)

    def arguments(self, aipp_file: Path | None) -> list[str]:
        found = [f"--input_format={self.input_format}", f"--input_shape={self.input_shape}"]
        for flag, value in (
            ("--dynamic_batch_size", self.dynamic_batch_size),
            ("--dynamic_image_size", self.dynamic_image_size),
            ("--dynamic_dims", self.dynamic_dims),
        ):
            if value:
                found.append(f"{flag}={value}")
        if aipp_file is not None:
            found.append(f"--insert_op_conf={aipp_file}")
        return [*found, *self.extra]


@dataclass(frozen=True)
class ModelRecipe:
    name: str
    network: Callable[[Path], Path]
    flags: AtcFlags
    what: str
    #: compile for a SoC of another NpuArch than the device's (the load must refuse it)
    foreign_soc: bool = False
    #: ATC must refuse these flags (a probe checks that it does)
    refused: bool = False


def _image_conv_n(path: Path) -> Path:
    return nets.image_conv(path, batch="N")


RECIPES: tuple[ModelRecipe, ...] = (
    ModelRecipe("static", nets.matmul_add, AtcFlags(f"x:{STATIC_ROWS},4"), "static shapes"),
    ModelRecipe("batch", nets.matmul_add, AtcFlags("x:-1,4", dynamic_batch_size="1,2,4"), "batch gears 1, 2, 4"),
    ModelRecipe(
        "hw",
        nets.conv,
        AtcFlags("x:1,3,-1,-1", "NCHW", dynamic_image_size="6,8;10,12"),
        "image-size gears 6x8 and 10x12",
    ),
    ModelRecipe(
        "dims",
        nets.three_inputs,
        AtcFlags("s:2,3;b:-1,-1;a:-1,4", dynamic_dims="2,3,1;4,5,2;1,1,3"),
        "dims gears, a static input listed first and the dynamic ones in reverse graph order",
    ),
    ModelRecipe(
        "static_aipp", nets.image_conv, AtcFlags("x:1,3,6,8", "NCHW", aipp=STATIC_AIPP), "static AIPP (YUV420SP, CSC)"
    ),
    ModelRecipe(
        "dynamic_aipp",
        _image_conv_n,
        AtcFlags("x:-1,3,6,8", "NCHW", dynamic_batch_size="1,2,4", aipp=DYNAMIC_AIPP),
        "dynamic AIPP with batch gears 1, 2, 4",
    ),
    ModelRecipe(
        "static_batch",
        nets.three_inputs,
        AtcFlags("s:2,3;b:-1,6;a:-1,4", dynamic_batch_size="1,2,4"),
        "batch gears 1, 2, 4 beside a static input listed first",
    ),
    ModelRecipe("precision_default", nets.scale_shift, AtcFlags("x:4,8"), "FP32 element-wise, no precision flag"),
    ModelRecipe(
        "precision_origin",
        nets.scale_shift,
        AtcFlags("x:4,8", extra=("--precision_mode_v2=origin",)),
        "FP32 element-wise, --precision_mode_v2=origin",
    ),
    ModelRecipe("range", nets.matmul_add, AtcFlags("x:1~8,4"), "a shape range 1~8"),
    ModelRecipe(
        "range_aipp",
        _image_conv_n,
        AtcFlags("x:1~4,3,6,8", "NCHW", aipp=DYNAMIC_AIPP),
        "dynamic AIPP on a shape range 1~4",
    ),
    ModelRecipe("range_unbounded", nets.matmul_add, AtcFlags("x:-1,4"), "an unbounded shape range"),
    ModelRecipe("foreign", nets.matmul_add, AtcFlags("x:2,4"), "static shapes, for another SoC", foreign_soc=True),
    ModelRecipe(
        "one_gear", nets.matmul_add, AtcFlags("x:-1,4", dynamic_batch_size="4"), "one batch gear", refused=True
    ),
    ModelRecipe(
        "odd_aipp", nets.image_conv, AtcFlags("x:1,3,6,8", "NCHW", aipp=ODD_AIPP), "YUV420SP of odd width", refused=True
    ),
)


@dataclass(frozen=True)
class BuiltModel:
    """One recipe's outcome: the .om (None when the compiler refused it), the command and what it said."""

    recipe: ModelRecipe
    onnx: Path
    om: Path | None
    soc: str
    command: str
    error: str = ""
    #: the ATC run (None when none ran) and which ATC it was
    run: AtcRun | None = None
    atc: str = ""

    def to_json(self) -> dict[str, str]:
        return {"what": self.recipe.what, "soc_version": self.soc, "command": self.command, "error": self.error}


@dataclass
class BuiltModels:
    """Every recipe's outcome by name."""

    models: dict[str, BuiltModel] = field(default_factory=dict)
    #: why nothing was built (e.g. no ATC on this host)
    unbuilt: str = "the models are not built yet"

    def om(self, name: str) -> Path | None:
        found = self.models.get(name)
        return found.om if found is not None else None

    def why_missing(self, name: str) -> str:
        found = self.models.get(name)
        if found is None:
            return f"model {name!r} was not built: {self.unbuilt}"
        return f"model {name!r} did not compile: {found.error}"


def foreign_soc(device_soc: str) -> str | None:
    """A SoC of another NpuArch than ``device_soc`` (ascend/limits.py), for the model its device must refuse."""
    arch = platform_npu_arch(device_soc)
    for candidate in ("Ascend310P3", "Ascend910B3", "Ascend310B1"):
        if platform_npu_arch(candidate) != arch:
            return candidate
    return None


def compile_model(atc: Atc, onnx: Path, om: Path, soc: str, flags: AtcFlags, aipp_file: Path | None) -> AtcRun:
    """``atc`` on ``onnx`` with ``flags`` for ``soc``, writing ``om``'s folder: the run. A model with
    dynamic shapes is written as ``<name>_<os>_<cpu>.om`` (fidelity.md row 127): the single .om of
    the folder is the model. CompileError with ATC's error lines when it refuses."""
    om.parent.mkdir(parents=True, exist_ok=True)
    arguments = [
        f"--model={onnx}",
        f"--framework={FRAMEWORKS['.onnx']}",
        f"--output={om.with_suffix('')}",  # ATC appends .om
        f"--soc_version={soc}",
        *flags.arguments(aipp_file),
    ]
    run = atc.run(arguments, om.parent)
    if run.exit_code != 0:
        message = f"ATC failed to compile {onnx.name} (exit code {run.exit_code}): {run.summary()}"
        raise CompileError(message, run.command, run)
    if written_model(om) is None:
        raise CompileError(f"{atc.name} exited 0 but wrote no {om.name} (nor one .om beside it)", run.command, run)
    return run


def written_model(om: Path) -> Path | None:
    """``om``, or the one .om ATC wrote in its folder instead."""
    if om.is_file():
        return om
    found = sorted(om.parent.glob("*.om"))
    return found[0] if len(found) == 1 else None


def build_models(
    folder: Path, device_soc: str, atc: Atc, recipes: Mapping[str, ModelRecipe] | None = None
) -> BuiltModels:
    """Compile every recipe into a folder of its own under ``folder`` for ``device_soc``; a refusal
    is recorded, never raised."""
    built = BuiltModels()
    for recipe in (recipes or {r.name: r for r in RECIPES}).values():
        onnx = recipe.network(folder / f"{recipe.name}.onnx")
        soc = foreign_soc(device_soc) if recipe.foreign_soc else device_soc
        om = folder / recipe.name / f"{recipe.name}.om"
        aipp_file = None
        if recipe.flags.aipp:
            aipp_file = folder / f"{recipe.name}.aipp.cfg"
            aipp_file.write_text(recipe.flags.aipp, encoding="utf-8")
        if soc is None:
            built.models[recipe.name] = BuiltModel(recipe, onnx, None, "", "", "no SoC of another NpuArch is known")
            continue
        try:
            run = compile_model(atc, onnx, om, soc, recipe.flags, aipp_file)
        except CompileError as exc:
            built.models[recipe.name] = BuiltModel(
                recipe, onnx, None, soc, exc.command.shell(), str(exc), exc.run, atc.name
            )
            continue
        written = written_model(om)
        built.models[recipe.name] = BuiltModel(recipe, onnx, written, soc, run.command.shell(), "", run, atc.name)
    return built
