"""The benchmarks: every scenario behind one entry point, ``python -m tools.bench SCENARIO``.

They are tools of this checkout, not part of the package: each scenario starts and stops its own
servers on loopback, measures its configurations against a baseline in the same run, and hands
one ``Report`` to the shared runner (``runner``), which waits for a quiet host before every
measurement and writes the report's JSON, markdown summary and PNG. ``measure`` holds the load
generators' shared parts (perf_analyzer windows, ``ge-triton bench`` sweeps, in-process timing),
``repos`` the model repositories the scenarios serve, ``scenarios/`` one module per scenario.

    .venv/bin/python -m tools.bench --list
    .venv/bin/python -m tools.bench host-path --help
"""
