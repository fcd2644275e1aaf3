"""The least a Python model can do to forward requests to another model through BLS: each request of
an execute sent on with ``exec`` (one at a time, waiting for each) and its answer returned.

Used by the router scenario (tools/bench) as the baseline of the router's cost: what BLS itself
costs per request, without the router's policy, threads or response senders. The member's name is
config parameter ``member``.
"""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.member = json.loads(args["model_config"])["parameters"]["member"]["string_value"]

    def execute(self, requests):
        answers = []
        for request in requests:
            forwarded = pb_utils.InferenceRequest(
                model_name=self.member,
                inputs=request.inputs(),
                requested_output_names=list(request.requested_output_names()),
            )
            response = forwarded.exec()
            if response.has_error():
                answers.append(pb_utils.InferenceResponse(error=response.error()))
            else:
                answers.append(pb_utils.InferenceResponse(output_tensors=response.output_tensors()))
        return answers
