"""The classification template's pieces: image decoding and normalising, labels files, top-k,
and the generated model folder run in-process against ONNX Runtime called directly."""

from __future__ import annotations

import importlib.util
import io
import re

import numpy as np
import onnxruntime as ort
import pytest

from ge_python_backend.errors import ConfigError, InputError
from ge_python_backend.hooks.postprocessing import load_labels, softmax, top_k
from ge_python_backend.hooks.preprocessing import ImageInput, decode_image, decode_images, image_input, normalize
from ge_python_backend.repository.check import check_repository
from ge_python_backend.repository.config import read_config_file, set_parameters
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.specs import TensorSpec
from ge_python_backend.testing import ModelHarness, install_fake_pb_utils, models

pb_utils = install_fake_pb_utils()
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
RGB8 = ImageInput("image", "NCHW", 8, 8, 3, "FP32")


def png_bytes(pixels: np.ndarray, kind: str = "PNG") -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=kind)
    return buffer.getvalue()


# -- image inputs -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, fmt, expected",
    [
        ((-1, 3, 224, 200), "", ("NCHW", 224, 200, 3)),
        ((-1, 224, 200, 3), "", ("NHWC", 224, 200, 3)),
        ((1, 1, 28, 28), "", ("NCHW", 28, 28, 1)),
        ((1, 3, 3, 3), "NHWC", ("NHWC", 3, 3, 3)),
    ],
)
def test_image_input_layout_and_size(shape, fmt, expected):
    image = image_input(TensorSpec("x", "FP32", shape, format=fmt))
    assert (image.layout, image.height, image.width, image.channels) == expected


@pytest.mark.parametrize(
    "tensor, message",
    [
        (TensorSpec("x", "FP32", (-1, 3, 224)), "needs rank 4"),
        (TensorSpec("x", "INT8", (-1, 3, 8, 8)), "must be FP32 or FP16"),
        (TensorSpec("x", "FP32", (-1, 3, -1, -1)), "never resized"),
        (TensorSpec("x", "FP32", (-1, 4, 8, 8)), "has 4 channels"),
    ],
)
def test_image_input_refuses_what_cannot_be_an_image(tensor, message):
    with pytest.raises(ConfigError, match=message):
        image_input(tensor)


def test_raw_pixels_decode_channels_last():
    pixels = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)
    decoded = decode_images(np.array([[pixels.tobytes()], [pixels[::-1].tobytes()]], np.object_), RGB8, 10_000)
    np.testing.assert_array_equal(decoded[0], pixels)
    np.testing.assert_array_equal(decoded[1], pixels[::-1])


def test_png_decodes_losslessly_and_jpeg_closely():
    pytest.importorskip("PIL")
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    np.testing.assert_array_equal(decode_image(png_bytes(pixels), RGB8, 10_000, "IMAGE[0]"), pixels)
    smooth = np.full((8, 8, 3), 120, np.uint8)
    jpeg = decode_image(png_bytes(smooth, "JPEG"), RGB8, 10_000, "IMAGE[0]")
    assert np.abs(jpeg.astype(int) - 120).max() <= 3


def test_grey_png_becomes_rgb_by_replication():
    pytest.importorskip("PIL")
    grey = np.arange(64, dtype=np.uint8).reshape(8, 8)
    decoded = decode_image(png_bytes(grey), RGB8, 10_000, "IMAGE[0]")
    np.testing.assert_array_equal(decoded, np.repeat(grey[:, :, None], 3, axis=2))


@pytest.mark.parametrize(
    "data, message",
    [
        (b"x" * 20_000, "IMAGE\\[0\\] has 20000 bytes, above max_input_bytes 10000"),
        (b"hello", "expected 192 bytes of raw pixels \\(8x8x3 uint8, channels last\\) or a PNG or JPEG"),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "cannot decode the PNG file"),
    ],
)
def test_bad_image_bytes_are_refused_with_the_element_named(data, message):
    pytest.importorskip("PIL")
    with pytest.raises(InputError, match=message):
        decode_image(data, RGB8, 10_000, "IMAGE[0]")


def test_a_png_of_another_size_is_refused_not_resized():
    pytest.importorskip("PIL")
    data = png_bytes(np.zeros((6, 10, 3), np.uint8))
    with pytest.raises(
        InputError, match="10x6 \\(width x height\\) PNG; the model takes 8x8 and images are not resized"
    ):
        decode_image(data, RGB8, 10_000, "IMAGE[0]")


@pytest.mark.parametrize("layout, dtype", [("NCHW", "FP32"), ("NHWC", "FP16")])
def test_normalize_layout_and_type(layout, dtype):
    pixels = np.random.default_rng(1).integers(0, 256, (2, 8, 8, 3), dtype=np.uint8)
    image = ImageInput("image", layout, 8, 8, 3, dtype)
    result = normalize(pixels, image, MEAN, STD)
    for n in range(2):
        for c in range(3):
            expected = (pixels[n, :, :, c].astype(np.float64) / 255 - MEAN[c]) / STD[c]
            plane = result[n, c] if layout == "NCHW" else result[n, :, :, c]
            np.testing.assert_allclose(plane.astype(np.float64), expected, atol=2e-3 if dtype == "FP16" else 1e-5)
    assert result.dtype == (np.float16 if dtype == "FP16" else np.float32)


# -- labels and top-k -------------------------------------------------------------------------


def test_labels_file_with_bom_and_crlf(tmp_path):
    path = tmp_path / "labels.txt"
    path.write_bytes("\ufeffcat\r\nchien\r\nÜber\r\n".encode("utf-8"))
    assert load_labels(path, 3) == ("cat", "chien", "Über")


@pytest.mark.parametrize(
    "data, classes, message",
    [
        (b"cat\n\xffdog\n", None, "not UTF-8 text \\(byte 0xff at offset 4, line 2\\); save it as UTF-8"),
        (b"", None, "is empty; write one label per line"),
        (b"cat\n\ndog\n", None, "line 2 is empty; every class needs a label"),
        (b"cat\ndog\n", 3, "has 2 labels, but the model has 3 classes"),
    ],
)
def test_bad_labels_files_say_what_to_fix(tmp_path, data, classes, message):
    path = tmp_path / "labels.txt"
    path.write_bytes(data)
    with pytest.raises(ConfigError, match=message):
        load_labels(path, classes)


def test_top_k_against_sorting():
    rng = np.random.default_rng(2)
    scores = rng.standard_normal((5, 12)).astype(np.float32)
    labels = tuple(f"c{i}" for i in range(12))
    names, best = top_k(scores, 4, labels)
    for row in range(5):
        ranked = sorted(range(12), key=lambda i: -scores[row, i])[:4]
        assert names[row].tolist() == [labels[i].encode() for i in ranked]
        assert best[row].tolist() == [scores[row, i] for i in ranked]


def test_softmax_rows_sum_to_one_and_keep_order():
    logits = np.array([[1000.0, 999.0, 0.0]], np.float32)
    probs = softmax(logits)
    assert np.isfinite(probs).all() and abs(probs.sum() - 1) < 1e-6
    assert probs[0, 0] / probs[0, 1] == pytest.approx(np.e, rel=1e-4)


# -- the generated model folder, in-process ----------------------------------------------------


def _model_class(folder):
    spec = importlib.util.spec_from_file_location(f"classifier_{folder.name}", folder / "1" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TritonPythonModel


def _classifier(tmp_path, name="clf", labels=None, classes=10, batch="batch", **template_options):
    onnx_file = models.image_classifier(tmp_path / f"{name}.onnx", size=8, channels=(4,), classes=classes, batch=batch)
    labels_file = tmp_path / f"{name}_labels.txt"
    labels_file.write_bytes(labels if labels is not None else "".join(f"kind {i}\n" for i in range(classes)).encode())
    options = {"labels": str(labels_file), **template_options}
    folder = generate(
        onnx_file, tmp_path / "repo", GenerateOptions(name=name, template="classification", template_options=options)
    ).model_dir
    return folder, onnx_file


def _request(blobs):
    return pb_utils.InferenceRequest([pb_utils.Tensor("IMAGE", np.array([[b] for b in blobs], np.object_))])


def _expected(onnx_file, images, k, classes=10):
    batch = ((np.stack(images).astype(np.float32) / 255 - MEAN) / STD).transpose(0, 3, 1, 2)
    (logits,) = ort.InferenceSession(str(onnx_file)).run(None, {"image": batch.astype(np.float32)})
    return top_k(logits, k, tuple(f"kind {i}" for i in range(classes)))


def test_generated_classifier_matches_onnxruntime(tmp_path):
    pytest.importorskip("PIL")
    folder, onnx_file = _classifier(tmp_path, top_k="3")
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, (8, 8, 3), dtype=np.uint8) for _ in range(3)]
    blobs = [images[0].tobytes(), png_bytes(images[1]), images[2].tobytes()]
    with ModelHarness(_model_class(folder), folder) as model:
        good, oversized, wrong = model.infer([_request(blobs), _request([b"\x00" * (17 << 20)]), _request([b"abc"])])
    labels, scores = _expected(onnx_file, images, 3)
    assert not good.has_error(), good.error()
    outputs = {t.name(): t.as_numpy() for t in good.output_tensors()}
    assert outputs["LABELS"].tolist() == labels.tolist()
    np.testing.assert_allclose(outputs["SCORES"], scores, atol=1e-5)
    assert "above max_input_bytes 16777216" in oversized.error().message()
    assert "IMAGE[0] has 3 bytes" in wrong.error().message()


def test_generated_classifier_without_batching(tmp_path):
    folder, onnx_file = _classifier(tmp_path, name="single", batch=1, softmax="true")
    assert read_config_file(folder / "config.pbtxt").max_batch_size == 0
    image = np.random.default_rng(4).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    with ModelHarness(_model_class(folder), folder) as model:
        request = pb_utils.InferenceRequest([pb_utils.Tensor("IMAGE", np.array([image.tobytes()], np.object_))])
        (response,) = model.infer([request])
    assert not response.has_error(), response.error()
    outputs = {t.name(): t.as_numpy() for t in response.output_tensors()}
    batch = ((image.astype(np.float32) / 255 - MEAN) / STD).transpose(2, 0, 1)[None]
    (logits,) = ort.InferenceSession(str(onnx_file)).run(None, {"image": batch.astype(np.float32)})
    labels, scores = top_k(softmax(logits), 5, tuple(f"kind {i}" for i in range(10)))
    assert outputs["LABELS"].shape == (5,) and outputs["LABELS"].tolist() == labels[0].tolist()
    np.testing.assert_allclose(outputs["SCORES"], scores[0], atol=1e-6)


TEN = "".join(f"kind {i}\n" for i in range(10))
BAD_LABELS = [
    (b"", "is empty"),
    (TEN.encode("utf-16"), "is not UTF-8 text (byte 0xff at offset 0, line 1)"),
    ("".join(f"caf\u00e9 {i}\n" for i in range(10)).encode("latin-1"), "is not UTF-8 text (byte 0xe9 at offset 3"),
    (TEN.replace("kind 3\n", "kind 3\n\n").encode(), "line 5 is empty"),
    ((TEN + "\n").encode(), "line 11 is empty"),
    (TEN.replace("kind 3", "  ").encode(), "line 4 is empty"),
    (b"a\nb\n", "has 2 labels, but the model has 10 classes"),
    ((TEN + "kind 10\n").encode(), "has 11 labels, but the model has 10 classes"),
]


@pytest.mark.parametrize("labels, message", BAD_LABELS)
def test_generate_and_check_refuse_bad_labels(tmp_path, labels, message):
    """Finding: empty, UTF-16, Latin-1, blank-line and miscounted labels files passed generate and
    check and failed only at load. Each is refused by generate, naming the problem, and nothing is
    written; a labels file replaced after generate is an error for check (and still fails the load)."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        _classifier(tmp_path, labels=labels)
    assert not (tmp_path / "repo" / "clf").exists()

    folder, _ = _classifier(tmp_path)
    (folder / "1" / "labels.txt").write_bytes(labels)
    (problem,) = check_repository(folder.parent, backends=tmp_path).errors
    assert problem.path == folder / "1" / "model.py"
    assert "the image classifier would not load: labels file" in problem.message and message in problem.message
    with (
        pytest.raises(pb_utils.TritonModelException, match=re.escape(message)),
        ModelHarness(_model_class(folder), folder),
    ):
        pass


def test_labels_given_as_a_folder_say_so(tmp_path):
    """Finding: --set labels=<a directory> said the file "does not exist"."""
    with pytest.raises(ConfigError, match=r"option 'labels': .* is a folder, not a file"):
        generate(
            models.image_classifier(tmp_path / "c.onnx", size=8, channels=(4,), classes=10),
            tmp_path / "repo",
            GenerateOptions(name="c", template="classification", template_options={"labels": str(tmp_path)}),
        )


def test_dynamic_image_size_is_refused_at_generate(tmp_path):
    """Finding: the classification template on a model with dynamic H/W passed generate and check; the
    load then failed (and the default serve exited)."""
    onnx_file = tmp_path / "dyn.onnx"
    _dynamic_hw_classifier(onnx_file)
    labels = tmp_path / "labels.txt"
    labels.write_text(TEN)
    with pytest.raises(ConfigError, match="height, width and channels must be fixed"):
        generate(
            onnx_file,
            tmp_path / "repo",
            GenerateOptions(name="dyn", template="classification", template_options={"labels": str(labels)}),
        )
    assert not (tmp_path / "repo" / "dyn").exists()


def _dynamic_hw_classifier(path):
    """image [N,3,H,W] -> GlobalAveragePool -> Flatten -> Gemm -> logits [N,10]."""
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.ones((3, 10), np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("GlobalAveragePool", ["image"], ["pooled"]),
            helper.make_node("Flatten", ["pooled"], ["flat"]),
            helper.make_node("MatMul", ["flat", "w"], ["logits"]),
        ],
        "dynamic_hw",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())


def test_top_k_parameter_must_match_the_output_dims(tmp_path):
    folder, _ = _classifier(tmp_path)
    set_parameters(folder / "config.pbtxt", top_k=4)
    with (
        pytest.raises(pb_utils.TritonModelException, match="output 'LABELS' must be BYTES dims \\[4\\]"),
        ModelHarness(_model_class(folder), folder),
    ):
        pass


def test_labels_split_at_line_feeds_only(tmp_path):
    """Finding: str.splitlines() also split at U+2028, \\x0c and U+0085 inside a label."""
    path = tmp_path / "labels.txt"
    path.write_text("a\u2028b\r\nc\x0cd\ne\u0085f\n", encoding="utf-8")
    assert load_labels(path, 3) == ("a\u2028b", "c\x0cd", "e\u0085f")


def test_generate_names_the_labels_file_the_user_gave(tmp_path):
    """Finding: the error named REPO/NAME/1/labels.txt, a copy in a folder that was never written."""
    with pytest.raises(ConfigError) as raised:
        _classifier(tmp_path, labels=b"")
    message = str(raised.value)
    assert f"labels file {tmp_path / 'clf_labels.txt'} is empty" in message
    assert "1/labels.txt is empty" not in message


def test_a_grey_model_gets_grey_defaults_for_mean_and_std(tmp_path):
    """Finding: the template's defaults failed on a 1-channel model ("parameter 'mean' has 3 values")."""
    onnx_file = models.image_classifier(tmp_path / "grey.onnx", size=8, channels=(4,), classes=10, image_channels=1)
    labels = tmp_path / "labels.txt"
    labels.write_text(TEN, encoding="utf-8")
    options = GenerateOptions(name="grey", template="classification", template_options={"labels": str(labels)})
    folder = generate(onnx_file, tmp_path / "repo", options).model_dir
    parameters = read_config_file(folder / "config.pbtxt").parameters
    assert parameters["mean"].string_value == "auto" and parameters["std"].string_value == "auto"
    grey = np.random.default_rng(5).integers(0, 256, (8, 8), dtype=np.uint8)
    with ModelHarness(_model_class(folder), folder) as model:
        assert model.model.classifier.mean.tolist() == pytest.approx([0.299 * 0.485 + 0.587 * 0.456 + 0.114 * 0.406])
        assert model.model.classifier.std.tolist() == pytest.approx([0.299 * 0.229 + 0.587 * 0.224 + 0.114 * 0.225])
        (response,) = model.infer([_request([grey.tobytes()])])
    assert not response.has_error(), response.error().message()
    with pytest.raises(ConfigError, match="option 'mean' is 'grey'; expected comma-separated numbers or auto"):
        generate(
            onnx_file,
            tmp_path / "repo2",
            GenerateOptions(
                name="g", template="classification", template_options={"labels": str(labels), "mean": "grey"}
            ),
        )
