"""What a user would otherwise write: a minimal Triton Python model around ONNX Runtime.

Concatenate the batch, run it, slice the result back per request. Used by
the serving and variants scenarios (tools/bench) as the hand-written baseline (copied into a model folder as model.py).
"""

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.session = ort.InferenceSession(pb_utils.get_model_dir() + "/model.onnx")

    def execute(self, requests):
        images = [pb_utils.get_input_tensor_by_name(r, "image").as_numpy() for r in requests]
        (logits,) = self.session.run(["logits"], {"image": np.concatenate(images)})
        responses, start = [], 0
        for image in images:
            end = start + len(image)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("logits", logits[start:end])]))
            start = end
        return responses
