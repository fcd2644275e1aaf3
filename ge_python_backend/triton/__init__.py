"""The only layer that touches Triton's ``triton_python_backend_utils`` (pb_utils).

``model`` is ``GEModel``, the ``TritonPythonModel`` base class: it reads each request into the
Triton-free request path (``serving``) and turns its answers into Triton responses; ``settings``
parses the model config once at load (``ModelSettings``; an unknown or malformed parameter
fails the load); ``metrics`` reports GEModel's Prometheus metrics through ``pb_utils.MetricFamily``;
``logbridge`` forwards stdlib logging to tritonserver's log; ``capabilities`` probes what the
stub offers (response senders arrived in r24.06).
"""
