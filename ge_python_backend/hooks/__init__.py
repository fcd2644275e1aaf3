"""Pre- and post-processing helpers for GEModel subclasses and pipeline models.

``ImageClassifier`` is the ``classification`` template's hooks as one object and ``Detector`` the
``detection`` template's (YOLO: letterbox, head decoding, class-aware NMS), ``TextReader`` the ``ocr``
template's PP-OCR pipeline (DB, crops, direction, CTC); ``preprocessing`` and
``postprocessing`` hold the pieces (image decoding and normalisation, labels, top-k) for hooks of
your own.
"""

from ge_python_backend.hooks.classification import CLASSIFICATION_PARAMETERS, IMAGE, LABELS, SCORES, ImageClassifier
from ge_python_backend.hooks.detection import DETECTION_PARAMETERS, Detector, Letterbox, letterbox
from ge_python_backend.hooks.ocr import OcrOptions, TextReader
from ge_python_backend.hooks.postprocessing import load_labels, softmax, top_k
from ge_python_backend.hooks.preprocessing import ImageInput, decode_images, image_input, normalize

__all__ = [
    "CLASSIFICATION_PARAMETERS",
    "DETECTION_PARAMETERS",
    "Detector",
    "Letterbox",
    "OcrOptions",
    "TextReader",
    "letterbox",
    "IMAGE",
    "LABELS",
    "SCORES",
    "ImageClassifier",
    "ImageInput",
    "decode_images",
    "image_input",
    "load_labels",
    "normalize",
    "softmax",
    "top_k",
]
