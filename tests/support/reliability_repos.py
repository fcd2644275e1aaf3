"""Model folders for the reliability tests: good models, and models broken on purpose.

Every folder is written by ``ge_python_backend.repository.generate`` and then changed the way a
user could get it wrong (a parameter added, a file removed, replaced or corrupted), so the
tests see exactly what a user would.
"""

from __future__ import annotations

from pathlib import Path

from ge_python_backend.repository.config import set_parameters
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.sim import sim_compile
from ge_python_backend.testing import models

CLASSES = 10
LABELS = tuple(f"kind {i}" for i in range(CLASSES))
IMAGE_SIZE = 8
#: max_input_bytes of the classifier: above one raw 8x8 RGB image (192 bytes), far below a big blob
CLASSIFIER_MAX_INPUT_BYTES = 1024
GEARS = (1, 2, 4, 8)


class Sources:
    """The ONNX files (and the simulated .om compiled from one) the folders are made of."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.linear = models.linear(folder / "linear.onnx")
        self.pair = models.two_inputs(folder / "pair.onnx")
        self.classifier = models.image_classifier(
            folder / "classifier.onnx", size=IMAGE_SIZE, channels=(4, 8), classes=CLASSES
        )
        self.linear_om = folder / "linear.om"
        sim_compile(self.linear, self.linear_om, batch_gears=GEARS)
        self.labels = folder / "labels.txt"
        self.labels.write_text("".join(f"{label}\n" for label in LABELS), encoding="utf-8")


def model(repo: Path, source: Path, name: str, parameters: dict | None = None, **options) -> Path:
    """A generated model folder with extra config ``parameters``."""
    folder = generate(source, repo, GenerateOptions(name=name, **options)).model_dir
    set_parameters(folder / "config.pbtxt", **(parameters or {}))
    return folder


def classifier(repo: Path, sources: Sources, name: str, parameters: dict | None = None) -> Path:
    """The classification template (top 3, max_input_bytes CLASSIFIER_MAX_INPUT_BYTES)."""
    options = {"labels": str(sources.labels), "top_k": "3", "max_input_bytes": str(CLASSIFIER_MAX_INPUT_BYTES)}
    folder = generate(
        sources.classifier, repo, GenerateOptions(name=name, template="classification", template_options=options)
    ).model_dir
    set_parameters(folder / "config.pbtxt", **(parameters or {}))
    return folder


def broken_models(repo: Path, sources: Sources) -> dict[str, str]:
    """Folders that must fail to load, each with a fragment its load error must contain."""
    expected = {}
    folder = model(repo, sources.linear, "no_model_file")
    (folder / "1" / "model.onnx").unlink()
    expected["no_model_file"] = f"model file {folder / '1' / 'model.onnx'} does not exist"

    folder = model(repo, sources.linear_om, "om_unreadable")
    om = folder / "1" / "model.om"
    om.unlink()
    om.mkdir()  # root reads any file: a folder where the file should be is what stays unreadable
    expected["om_unreadable"] = f"model file {om} is a directory"

    folder = model(repo, sources.linear_om, "om_corrupt")
    om = folder / "1" / "model.om"
    om.write_bytes(om.read_bytes()[:200])
    expected["om_corrupt"] = "acl.mdl.load_from_file returned 100013 ACL_ERROR_PARSE_MODEL"

    folder = model(repo, sources.linear_om, "om_garbled")
    om = folder / "1" / "model.om"
    garbled = bytearray(om.read_bytes())
    garbled[30:60] = b"\xff" * 30  # inside the JSON description, after the 24-byte header
    om.write_bytes(bytes(garbled))
    expected["om_garbled"] = "offset 24: bad JSON description"

    folder = classifier(repo, sources, "labels_not_utf8")
    (folder / "1" / "labels.txt").write_bytes("".join(f"{label}\n" for label in LABELS).encode("utf-16"))
    expected["labels_not_utf8"] = "is not UTF-8 text"

    folder = classifier(repo, sources, "labels_empty")
    (folder / "1" / "labels.txt").write_bytes(b"")
    expected["labels_empty"] = "is empty; write one label per line"

    model(repo, sources.linear, "unknown_parameter", {"top_kk": "3"})
    expected["unknown_parameter"] = "unknown parameter 'top_kk' (value '3'); accepted parameters: "
    return expected
