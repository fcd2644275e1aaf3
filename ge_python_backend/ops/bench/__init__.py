"""Load generation and reporting for Triton models (``ge-triton bench`` and ``python -m tools.bench``).

Knows nothing of GEModel internals: it talks to a server through tritonclient and reads the
server's Prometheus metrics.
"""

from ge_python_backend.ops.bench.load import BenchError, Sweep, Target, random_inputs, run_sweep
from ge_python_backend.ops.bench.stats import Latency, Point, percentile

__all__ = ["BenchError", "Latency", "Point", "Sweep", "Target", "percentile", "random_inputs", "run_sweep"]
