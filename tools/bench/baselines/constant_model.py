"""The Python backend's floor for a request: its input read, a constant answer of the output's shape.

Used by the images scenario (tools/bench) beside each image model (copied into a model folder as
model.py, with that model's config and no engine parameters): what tritonserver and the Python stub
cost to hand one request's bytes in and one small answer out, with no engine and no gather.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.input = config["input"][0]["name"]
        self.outputs = [
            (o["name"], [int(d) for d in o["dims"]], pb_utils.triton_string_to_numpy(o["data_type"]))
            for o in config["output"]
        ]

    def execute(self, requests):
        responses = []
        for request in requests:
            rows = pb_utils.get_input_tensor_by_name(request, self.input).as_numpy().shape[0]
            answers = [pb_utils.Tensor(name, np.zeros([rows, *dims], dtype)) for name, dims, dtype in self.outputs]
            responses.append(pb_utils.InferenceResponse(answers))
        return responses
