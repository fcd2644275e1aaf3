"""The test suite: unit/ (in-process) and e2e/ (a real tritonserver)."""
