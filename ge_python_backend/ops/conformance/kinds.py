"""The model kinds end to end: each conformance model through the acl engine (the code that serves
it), compared with ONNX Runtime on the ONNX file it was compiled from. AIPP goes through the
reference transform written from ATC's documentation (``testing/aipp_reference.py``), never the
engine's or the simulator's code.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

import numpy as np

from ge_python_backend.errors import GEError
from ge_python_backend.ops.conformance.build import STATIC_ROWS
from ge_python_backend.ops.conformance.probes import UNKNOWN, ProbeContext, close, probe
from ge_python_backend.testing.aipp_reference import crop, normalise, nv12, yuv_to_bgr


def engine(context: ProbeContext, name: str, **options: Any):
    """The acl engine (one slot) on model ``name`` with ``options`` (parameter values as parsed), on the
    run's pyACL, bound to this thread."""
    from ge_python_backend.engines.acl.engine import AclEngine, prepare_options

    path = context.model(name)
    opened = AclEngine(
        path, acl=context.acl, name=context.engine, device_id=context.device, options=prepare_options(options, path)
    )
    context.at_exit("the engine's close", opened.close)
    opened.bind_thread()
    return opened


def run(opened, feeds: Mapping[str, np.ndarray], settings: Hashable = None) -> dict[str, np.ndarray]:
    """Stage ``feeds`` on slot 0, run it, copies of the outputs."""
    slot = opened.slots[0]
    views = slot.inputs({n: a.shape for n, a in feeds.items()}, settings)
    for name, value in feeds.items():
        views[name][...] = value
    return {n: np.array(a) for n, a in slot.run().items()}


def compare(context: ProbeContext, label: str, outputs: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]):
    for name, want in expected.items():
        got = outputs.get(name)
        ok = got is not None and close(got.astype(np.float32), want.astype(np.float32))
        context.expect(f"{label}: output {name} as ONNX Runtime", ok, True)


def refusal(call: Callable[[], Any]) -> str:
    """The message of the GEError ``call`` raised ("" when it returned)."""
    try:
        call()
    except GEError as exc:
        return str(exc)
    return ""


def floats(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def against_onnxruntime(context: ProbeContext, name: str, cases: list[tuple[str, dict[str, np.ndarray]]]) -> None:
    """Model ``name`` through the acl engine, case by case (label, feeds), against ONNX Runtime."""
    opened = engine(context, name)
    for label, feeds in cases:
        compare(context, label, run(opened, feeds), context.reference(name, feeds))


@probe("K-static", "100", "a static model through the acl engine answers as ONNX Runtime", phase="last")
def kind_static(context: ProbeContext) -> None:
    against_onnxruntime(context, "static", [(f"x {STATIC_ROWS} x 4", {"x": floats((STATIC_ROWS, 4), 1)})])


@probe("K-batch-gears", "61, 66, 100", "every batch gear through the acl engine answers as ONNX Runtime", phase="last")
def kind_batch(context: ProbeContext) -> None:
    against_onnxruntime(context, "batch", [(f"batch {b}", {"x": floats((b, 4), b)}) for b in (1, 4, 2, 4)])


@probe("K-image-size-gears", "62", "every image-size gear through the acl engine answers as ONNX Runtime", phase="last")
def kind_hw(context: ProbeContext) -> None:
    sizes = ((10, 12), (6, 8))
    against_onnxruntime(context, "hw", [(f"{h} x {w}", {"x": floats((1, 3, h, w), h)}) for h, w in sizes])


@probe(
    "K-dims-gears",
    "58, 59, 63",
    "dims gears (static input first, dynamic ones reversed) answer as ONNX Runtime",
    phase="last",
)
def kind_dims(context: ProbeContext) -> None:
    gears = (((2, 3), (1, 4)), ((4, 5), (2, 4)), ((1, 1), (3, 4)))  # b and a of the gears 2,3,1; 4,5,2; 1,1,3
    cases = [
        (f"b {b}, a {a}", {"a": floats(a, a[0]), "b": floats(b, b[0] + 10), "s": floats((2, 3), 5)}) for b, a in gears
    ]
    against_onnxruntime(context, "dims", cases)


@probe(
    "K-static-aipp",
    "50, 85",
    "a YUV420SP static AIPP with CSC answers as the documented transform + ONNX Runtime",
    phase="last",
)
def kind_static_aipp(context: ProbeContext) -> None:
    opened = engine(context, "static_aipp")
    rng = np.random.default_rng(85)
    for u, v in ((120, 140), (136, 118)):
        luma = rng.integers(60, 181, (6, 8), dtype=np.uint8)
        network = normalise(yuv_to_bgr(luma, u, v), (20, 30, 40), (0, 0, 0), (0.01, 0.02, 0.03))
        expected = context.reference("static_aipp", {"x": network})
        compare(context, f"U {u}, V {v}", run(opened, {"x": nv12(luma, u, v)}), expected)


@probe(
    "K-dynamic-aipp",
    "88, 89, 96, 97",
    "dynamic AIPP values set per request answer as the documented transform",
    phase="last",
)
def kind_dynamic_aipp(context: ProbeContext) -> None:
    opened = engine(context, "dynamic_aipp")
    rng = np.random.default_rng(97)
    cases = (
        (4, (4, 2), (30, 40, 50), (0.02, 0.03, 0.04)),
        (2, (0, 4), (100, 10, 60), (0.05, 0.01, 0.02)),
    )
    for batch, (start_w, start_h), mean, var_reci in cases:
        parameters = {
            "crop": True,
            "load_start_pos_w": start_w,
            "load_start_pos_h": start_h,
            "crop_size_w": 8,
            "crop_size_h": 6,
            **{f"mean_chn_{i}": m for i, m in enumerate(mean)},
            **{f"var_reci_chn_{i}": str(r) for i, r in enumerate(var_reci)},
        }
        pixels = rng.integers(0, 256, (batch, 10, 12, 3), dtype=np.uint8)
        settings = opened.batch_settings(parameters, {"x": pixels.shape})
        network = normalise(crop(pixels, start_w, start_h, 8, 6), mean, (0, 0, 0), var_reci)
        expected = context.reference("dynamic_aipp", {"x": network})
        compare(
            context, f"{batch} image(s), crop at {start_w},{start_h}", run(opened, {"x": pixels}, settings), expected
        )


@probe("K-range", "72, 75, 77", "a shape-range model at two batch sizes answers as ONNX Runtime", phase="last")
def kind_range(context: ProbeContext) -> None:
    against_onnxruntime(context, "range", [(f"batch {b}", {"x": floats((b, 4), b + 20)}) for b in (3, 8)])


@probe(
    "K-static-beside-batch",
    "136",
    "batch gears beside a static input: every gear through the acl engine answers as ONNX Runtime",
    phase="last",
)
def kind_static_beside_batch(context: ProbeContext) -> None:
    static = floats((2, 3), 136)
    cases = [(f"batch {g}", {"a": floats((g, 4), g), "b": floats((g, 6), g + 10), "s": static}) for g in (1, 4, 2)]
    against_onnxruntime(context, "static_batch", cases)


#: a relative error above this is not FP32 arithmetic; FP16 rounding of values near 1 is about 5e-4
FP32_ERROR = 1e-5


@probe(
    "K-precision-default",
    "130",
    "without a precision flag ATC computes FP32 operators in FP16; with --precision_mode_v2=origin in FP32",
    phase="last",
)
def kind_precision_default(context: ProbeContext) -> None:
    feeds = {"x": floats((4, 8), 130)}
    expected = context.reference("precision_default", feeds)["y"]
    for name, rounded in (("precision_default", True), ("precision_origin", False)):
        got = run(engine(context, name), feeds)["y"].astype(np.float32)
        error = float(np.abs(got - expected).max()) / float(np.abs(expected).max())
        context.expect(
            f"{name}: off ONNX Runtime's FP32 by more than FP32 rounding",
            error > FP32_ERROR,
            rounded,
            simulated=False,
            note="the simulator computes in the model's own types",
        )
        context.expect(f"{name}: within FP16 accuracy of ONNX Runtime", close(got, expected), True)
        context.expect(f"{name}: the largest error relative to the largest output", error, UNKNOWN)


@probe(
    "K-range-bounds",
    "138",
    "the acl engine plans a range model's batches up to its bound, refuses a request beyond it, and sizes "
    "an unbounded one only from acl_max_shapes",
    phase="last",
)
def kind_range_bounds(context: ProbeContext) -> None:
    opened = engine(context, "range")
    batch = opened.spec.batch
    context.expect("the batch the engine plans with (x:1~8,4)", [batch.kind, batch.limit], ["dynamic", 8])
    refused = refusal(lambda: opened.slots[0].inputs({"x": (9, 4)}))
    context.expect("a batch of 9: refused naming the range", "range is 1..8" in refused, True, note=refused)
    feeds = {"x": floats((8, 4), 138)}
    compare(context, "batch 8", run(opened, feeds), context.reference("range", feeds))
    refused = refusal(lambda: engine(context, "range_unbounded"))
    context.expect("x:-1,4 without acl_max_shapes: refused naming it", "acl_max_shapes" in refused, True, note=refused)
    largest = {"x": (16, 4), "y": (16, 3), "h": (16, 3)}
    bounded = engine(context, "range_unbounded", acl_max_shapes=largest)
    feeds = {"x": floats((16, 4), 16)}
    compare(
        context,
        "x:-1,4 with acl_max_shapes of batch 16, batch 16",
        run(bounded, feeds),
        context.reference("range_unbounded", feeds),
    )
