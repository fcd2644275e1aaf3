"""A GEModel whose hooks break their contract when a request asks them to.

It serves the ``linear`` ONNX model (x FP32 [-1,4] -> logits, probs FP32 [-1,3]) behind a config
of its own (``tests/support/parity.py``): X FP32 [4] in; SCORE FP32 [3], LEVEL INT8 [1], HALF
FP16 [1] and NAME TYPE_STRING [1] out. Normally preprocess renames X to x, and postprocess
returns the logits, the best class as INT64 (fits INT8), the best probability as FP64 (FP16
rounds it) and the best class's name as ``str`` (the client gets its UTF-8 bytes). The request
parameter ``pre`` or ``post`` names one of the ways below to get it wrong instead.
"""

from __future__ import annotations

import numpy as np

from ge_python_backend import GEModel

PRE = {
    "list": lambda x: [x],
    "fp64": lambda x: {"x": x.astype(np.float64)},
    "shape": lambda x: {"x": x[:, :3]},
    "empty": lambda x: {},
    "double": lambda x: {"x": np.concatenate([x, x])},
    "many": lambda x: {"x": np.repeat(x, 5, axis=0)},
}
POST = {
    "none": lambda answer: None,
    "shape": lambda answer: {**answer, "SCORE": answer["SCORE"][:, :2]},
    "rank1": lambda answer: {**answer, "SCORE": answer["SCORE"].reshape(-1)},
    "double": lambda answer: {**answer, "SCORE": np.concatenate([answer["SCORE"]] * 2)},
    "int8_overflow": lambda answer: {**answer, "LEVEL": np.full(answer["LEVEL"].shape, 300, np.int64)},
    "fp16_overflow": lambda answer: {**answer, "HALF": np.full(answer["HALF"].shape, 70000.0)},
    "number_for_string": lambda answer: {**answer, "NAME": answer["LEVEL"]},
}


class TritonPythonModel(GEModel):
    def preprocess(self, inputs, request):
        x = inputs["X"]
        return PRE[request.parameters["pre"]](x) if "pre" in request.parameters else {"x": x}

    def postprocess(self, outputs, request):
        logits, probs = outputs["logits"], outputs["probs"]
        best = np.argmax(logits, axis=1)
        answer = {
            "SCORE": logits,
            "LEVEL": best.reshape(-1, 1),
            "HALF": probs.max(axis=1, keepdims=True).astype(np.float64),
            "NAME": np.array([[f"class {i}"] for i in best], dtype=object),
        }
        return POST[request.parameters["post"]](answer) if "post" in request.parameters else answer
