"""The cheapest Triton Python model there is: every request's input returned as its output.

Used by the host-path and ab scenarios (tools/bench) as the host-path baseline (copied into a model folder as model.py):
what tritonserver, the Python stub and one reply per batch cost with no engine at all.
"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())])
            for r in requests
        ]
