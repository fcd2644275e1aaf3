"""The pipeline templates (the detection ensemble and its hooks layout, OCR): what generate writes,
what it refuses, and check's reading of the folders (served in tests/e2e/test_pipelines_served.py)."""

from __future__ import annotations

import pytest

from ge_python_backend.errors import ConfigError
from ge_python_backend.repository.check import check_repository
from ge_python_backend.repository.config import read_config_file
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.repository.modelcode import read_model_code
from ge_python_backend.testing import models


@pytest.fixture(scope="module")
def yolo(tmp_path_factory):
    return models.yolo(tmp_path_factory.mktemp("yolo") / "yolo.onnx", "v8", classes=3, size=64)


def detection(name: str = "det", template: str = "detection", **options) -> GenerateOptions:
    return GenerateOptions(name=name, template=template, engine="acl-sim", **options)


def test_detection_writes_an_ensemble_around_the_model(tmp_path, yolo):
    result = generate(yolo, tmp_path, detection(template_options={"max_det": "7"}))
    assert [f.name for f in result.folders] == ["det_model", "det", "det_pre", "det_post"]
    assert result.model_dir == tmp_path / "det_model"
    model = read_config_file(tmp_path / "det_model" / "config.pbtxt")
    ensemble = read_config_file(tmp_path / "det" / "config.pbtxt")
    pre = read_config_file(tmp_path / "det_pre" / "config.pbtxt")
    post = read_config_file(tmp_path / "det_post" / "config.pbtxt")
    assert ensemble.platform == "ensemble" and ensemble.max_batch_size == model.max_batch_size == pre.max_batch_size
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == ["det_pre", "det_model", "det_post"]
    (pixels,) = [o for o in pre.output if o.name == model.input[0].name]
    assert (pixels.data_type, list(pixels.dims)) == (model.input[0].data_type, list(model.input[0].dims))
    assert (post.input[0].name, list(post.input[0].dims)) == (model.output[0].name, list(model.output[0].dims))
    assert {o.name: list(o.dims) for o in ensemble.output} == {
        "NUM_DETS": [1],
        "DET_BOXES": [7, 4],
        "DET_SCORES": [7],
        "DET_CLASSES": [7],
        "DET_LABELS": [7],
    }
    assert post.parameters["max_det"].string_value == "7" and post.parameters["model"].string_value == "det_model"
    assert (tmp_path / "det" / "1").is_dir(), "tritonserver needs a version folder, even for an ensemble"
    assert not (tmp_path / "det_post" / "1" / "labels.txt").exists()
    assert read_model_code(tmp_path / "det_pre" / "1" / "model.py").step
    assert not check_repository(tmp_path).errors


def test_the_classes_file_is_copied_when_given(tmp_path, yolo):
    classes = tmp_path / "names.txt"
    classes.write_text("a\nb\nc\n")
    generate(yolo, tmp_path / "repo", detection(template_options={"classes": str(classes)}))
    assert (tmp_path / "repo" / "det_post" / "1" / "labels.txt").read_text() == "a\nb\nc\n"


def test_a_model_of_two_inputs_is_refused_naming_them(tmp_path):
    source = models.two_inputs(tmp_path / "pair.onnx", length=4)
    with pytest.raises(
        ConfigError, match=r"around a model of one input and one output; pair.onnx has inputs \['a', 'b'\]"
    ):
        generate(source, tmp_path / "repo", detection())
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())


def test_an_existing_folder_of_the_pipeline_is_kept_without_force(tmp_path, yolo):
    (tmp_path / "det_pre").mkdir()
    with pytest.raises(ConfigError, match="det_pre exists; pass --force"):
        generate(yolo, tmp_path, detection())
    assert not (tmp_path / "det_model").exists()
    generate(yolo, tmp_path, detection(overwrite=True))
    assert (tmp_path / "det_pre" / "config.pbtxt").is_file()


def test_several_models_cannot_take_another_version(tmp_path, yolo):
    generate(yolo, tmp_path, detection())
    with pytest.raises(ConfigError, match="writes several models .*; --add-version cannot"):
        generate(yolo, tmp_path, detection(add_version=True, version=2))


def test_ocr_writes_three_networks_and_the_reading_model(tmp_path):
    sources = tmp_path / "sources"
    det = models.image_conv(sources / "det.onnx", batch=1, height=32, width=32)
    cls = models.linear(sources / "cls.onnx", features=4, classes=2)
    rec = models.linear(sources / "rec.onnx", features=4, classes=5)
    options = {"cls": str(cls), "rec": str(rec), "text_score": "0.7"}
    result = generate(det, tmp_path / "repo", GenerateOptions(name="ocr", template="ocr", template_options=options))
    assert [f.name for f in result.folders] == ["ocr_det", "ocr_cls", "ocr_rec", "ocr"]
    repo = tmp_path / "repo"
    for network, source in (("ocr_det", det), ("ocr_cls", cls), ("ocr_rec", rec)):
        assert (repo / network / "1" / "model.onnx").read_bytes() == source.read_bytes()
        assert read_model_code(repo / network / "1" / "model.py").uses_package
    reader = read_config_file(repo / "ocr" / "config.pbtxt")
    assert {o.name: list(o.dims) for o in reader.output} == {"TEXTS": [-1], "SCORES": [-1], "BOXES": [-1, 4, 2]}
    assert reader.max_batch_size == 0 and [list(i.dims) for i in reader.input] == [[1]]
    parameters = {k: v.string_value for k, v in reader.parameters.items()}
    assert parameters["det_model"] == "ocr_det" and parameters["rec_model"] == "ocr_rec"
    assert parameters["text_score"] == "0.7"
    assert not (repo / "ocr" / "1" / "keys.txt").exists(), "without --set keys the rec ONNX's metadata serves"
    assert read_model_code(repo / "ocr" / "1" / "model.py").step
    assert not check_repository(repo).errors


@pytest.mark.parametrize(
    ("engine", "options", "flags"),
    [
        (
            "acl-sim",
            {},
            {
                "ocr_det": "--input_shape=x:1,3,32~960,32~960",
                "ocr_cls": "--input_shape=x:-1,3,48,192",
                "ocr_rec": "--input_shape=x:1~6,3,48,320~3200",
            },
        ),
        (
            "acl",
            {"det_limit_side_len": "736", "rec_batch": "4", "rec_max_width": "1600"},
            {
                "ocr_det": "--input_shape=x:1,3,32~736,32~736",
                "ocr_cls": "--input_shape=x:-1,3,48,192",
                "ocr_rec": "--input_shape=x:1~4,3,48,320~1600",
            },
        ),
        ("onnxruntime", {}, {"ocr_det": None, "ocr_cls": None, "ocr_rec": None}),
    ],
)
def test_ocr_states_the_shape_ranges_of_onnx_networks_compiled_at_load(tmp_path, engine, options, flags):
    """Compiled at load, det takes H and W in 32~det_limit_side_len, rec a batch of 1~rec_batch lines
    of height 48 and width 320~rec_max_width, cls its fixed 48x192 in batch gears; the configs say
    so (atc_flags) and describe the range models; an engine that runs the ONNX itself gets none."""
    sources = tmp_path / "sources"
    det, cls, rec = (models.image_conv(sources / f"{n}.onnx", batch="N", height="H", width="W") for n in "dcr")
    given = {"cls": str(cls), "rec": str(rec), **options}
    generate(det, tmp_path / "repo", GenerateOptions(name="ocr", template="ocr", engine=engine, template_options=given))
    configs = {name: read_config_file(tmp_path / "repo" / name / "config.pbtxt") for name in flags}
    for name, config in configs.items():
        stated = config.parameters["atc_flags"].string_value if "atc_flags" in config.parameters else None
        assert stated == flags[name], name
    if engine == "onnxruntime":
        return
    side = int(options.get("det_limit_side_len", 960))
    assert (configs["ocr_det"].max_batch_size, list(configs["ocr_det"].input[0].dims)) == (0, [1, 3, -1, -1])
    assert (configs["ocr_rec"].max_batch_size, list(configs["ocr_rec"].input[0].dims)) == (
        int(options.get("rec_batch", 6)),
        [3, 48, -1],
    )
    assert list(configs["ocr_cls"].input[0].dims) == [3, 48, 192]
    reader = {
        k: v.string_value for k, v in read_config_file(tmp_path / "repo" / "ocr" / "config.pbtxt").parameters.items()
    }
    assert reader["det_limit_side_len"] == str(side)
    assert (reader["rec_batch"], reader["rec_max_width"]) == (
        options.get("rec_batch", "6"),
        options.get("rec_max_width", "3200"),
    )


def test_ocr_det_side_limit_is_a_multiple_of_32(tmp_path):
    det = models.image_conv(tmp_path / "det.onnx", batch=1, height=32, width=32)
    options = {"cls": str(det), "rec": str(det), "det_limit_side_len": "1000"}
    with pytest.raises(
        ConfigError, match="'det_limit_side_len' is '1000'; expected an integer >= 32, a multiple of 32"
    ):
        generate(det, tmp_path / "repo", GenerateOptions(name="ocr", template="ocr", template_options=options))


def test_ocr_needs_its_classifier_and_recogniser(tmp_path):
    det = models.image_conv(tmp_path / "det.onnx", batch=1, height=32, width=32)
    with pytest.raises(ConfigError, match=r"template 'ocr' needs option 'cls' \(--set cls=\.\.\.\)"):
        generate(det, tmp_path / "repo", GenerateOptions(name="ocr", template="ocr"))


def test_detection_hooks_writes_one_model_whose_hooks_make_both_sides(tmp_path, yolo):
    classes = tmp_path / "names.txt"
    classes.write_text("a\nb\nc\n")
    options = {"max_det": "7", "iou_threshold": "0.5", "classes": str(classes)}
    result = generate(yolo, tmp_path / "repo", detection(template="detection-hooks", template_options=options))
    assert [f.name for f in result.folders] == ["det"]
    config = read_config_file(result.model_dir / "config.pbtxt")
    assert [(i.name, list(i.dims)) for i in config.input] == [("IMAGE", [1])]
    assert {o.name: list(o.dims) for o in config.output} == {
        "NUM_DETS": [1],
        "DET_BOXES": [7, 4],
        "DET_SCORES": [7],
        "DET_CLASSES": [7],
        "DET_LABELS": [7],
    }
    assert config.parameters["max_det"].string_value == "7"
    assert config.parameters["iou_threshold"].string_value == "0.5"
    assert (result.model_dir / "1" / "labels.txt").read_text() == "a\nb\nc\n"
    code = read_model_code(result.model_dir / "1" / "model.py")
    assert code.overrides == {"preprocess", "postprocess"} and not code.step
    assert not check_repository(tmp_path / "repo").errors
