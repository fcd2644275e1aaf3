"""Post-processing for hooks: class labels files and top-k labels with their scores."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ge_python_backend.errors import ConfigError
from ge_python_backend.specs import ModelSpec, TensorSpec


def load_labels(path: Path, classes: int | None = None) -> tuple[str, ...]:
    """One label per line of a UTF-8 text file, in class-index order.

    Lines end at LF (a CR before it is dropped: CRLF files are accepted, and so are a final newline
    and a UTF-8 byte order mark); other Unicode line separators are part of a label. ConfigError, naming
    the file and what to fix, when it cannot be read, is not UTF-8, is empty, has an empty line,
    or (with ``classes``) holds a different number of labels."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"labels file {path}: cannot read it ({exc.strerror})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"labels file {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}, line {line}); "
            "save it as UTF-8 with one label per line"
        ) from None
    # lines end at "\n" only (str.splitlines would also split at U+2028, \x0c, U+0085, ... inside a label)
    labels = text.split("\n")
    if labels[-1] == "":
        labels.pop()  # the final newline
    labels = [label[:-1] if label.endswith("\r") else label for label in labels]
    if not labels:
        raise ConfigError(f"labels file {path} is empty; write one label per line, one line per class")
    for number, label in enumerate(labels, 1):
        if not label.strip():
            raise ConfigError(f"labels file {path}: line {number} is empty; every class needs a label")
    if classes is not None and len(labels) != classes:
        raise ConfigError(
            f"labels file {path} has {len(labels)} labels, but the model has {classes} classes; "
            "write exactly one label per class, in class-index order"
        )
    return tuple(labels)


def softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in float32, stable for large logits."""
    values = np.asarray(scores, np.float32)
    shifted = np.exp(values - values.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def top_k(scores: np.ndarray, k: int, labels: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``scores [rows, classes]``: the ``k`` best labels (UTF-8 bytes, object array
    ``[rows, k]``) and their scores (float32 ``[rows, k]``), best first; ties keep class order."""
    if scores.ndim != 2:
        raise ValueError(f"scores must be [rows, classes]; got shape {list(scores.shape)}")
    order = np.argsort(-scores.astype(np.float32), axis=1, kind="stable")[:, :k]
    encoded = [label.encode("utf-8") for label in labels]
    names = np.array([[encoded[i] for i in row] for row in order], dtype=np.object_).reshape(order.shape)
    return names, np.take_along_axis(scores, order, axis=1).astype(np.float32)


def chosen_output(spec: ModelSpec, name: str, parameter: str, what: str) -> TensorSpec:
    """The output a hook reads: the one named by ``parameter`` (its value ``name``), or the model's
    only output when ``name`` is empty. ConfigError naming the parameter otherwise."""
    if name:
        try:
            return spec.output(name)
        except KeyError as exc:
            raise ConfigError(f"parameter {parameter!r}: {exc.args[0]}") from None
    if len(spec.outputs) != 1:
        raise ConfigError(
            f"the model has outputs {[t.name for t in spec.outputs]}; name {what} with parameter {parameter!r}"
        )
    return spec.outputs[0]
