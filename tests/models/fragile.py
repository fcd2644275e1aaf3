"""A GEModel whose postprocess has a bug: integer division by the request parameter ``divisor``.

Serves a generated ``linear`` folder; a request with ``divisor`` 0 raises ZeroDivisionError in
the hook, which must fail that request alone (one line for the client, HTTP 500) and leave its
traceback in tritonserver's log.
"""

from __future__ import annotations

from ge_python_backend import GEModel


class TritonPythonModel(GEModel):
    def postprocess(self, outputs, request):
        scale = 1 // int(request.parameters.get("divisor", 1))  # the bug: divisor 0
        return {name: array * scale for name, array in outputs.items()}
