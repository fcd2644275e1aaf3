"""One module per benchmark scenario (tools/bench/runner.py: SCENARIOS)."""
