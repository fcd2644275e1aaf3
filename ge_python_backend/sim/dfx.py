"""Data dump and profiling in the simulator: which is on, from where, and the marker files.

The simulator dumps no tensors and profiles nothing; it keeps the state CANN keeps, answers the
codes CANN answers (docs/fidelity.md "Profiling and dump"), and writes one JSON line per event
into the output folder so a test can see what was switched on:

- ``acl-sim-dump.jsonl`` in the dump folder: one line per execution of a model that is dumped
  (loaded after ``acl.mdl.set_dump``, or with ``dump`` in the acl.json given to ``acl.init``;
  "only models loaded after SetDump get the dump config", 18_dump_configuration.md 147-159);
- ``acl-sim-profiling.jsonl`` in the profiling folder: ``start`` and ``stop`` of an
  ``acl.prof`` session, and ``acl.json`` profiling when ``acl.init`` switched it on.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ge_python_backend.ascend.acljson import AclJson

DUMP_MARKER = "acl-sim-dump.jsonl"
PROFILING_MARKER = "acl-sim-profiling.jsonl"


def write_marker(folder: Path, name: str, record: dict[str, Any]) -> None:
    try:
        with open(Path(folder) / name, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(dict(record, pid=os.getpid())) + "\n")
    except OSError:  # an unwritable folder: CANN would drop its dump too; nothing to fail here
        pass


@dataclass
class DumpState:
    """aclmdlInitDump / SetDump / FinalizeDump, and acl.json's dump section."""

    initialized: bool = False
    #: the dump config in force for models loaded from now on (set_dump, or acl.init's acl.json)
    config: AclJson | None = None
    from_init: AclJson | None = None
    #: model id -> (dump folder, dump mode) of a model loaded while dump was on
    dumped: dict[int, tuple[Path, str]] = field(default_factory=dict)

    def configure(self, config: AclJson | None) -> None:
        self.config = config

    def loaded(self, model: Any) -> None:
        config = self.config or self.from_init
        if config is None or not config.dumps:
            return
        folder = dict(config.output_folders()).get("dump.dump_path")
        if folder is not None:
            self.dumped[model.model_id] = (folder, str((config.dump or {}).get("dump_mode", "output")))

    def executed(self, model: Any) -> None:
        found = self.dumped.get(model.model_id)
        if found is not None:
            folder, mode = found
            write_marker(folder, DUMP_MARKER, {"model_id": model.model_id, "model": model.path, "mode": mode})


@dataclass
class ProfilingState:
    """aclprofInit / CreateConfig / Start / Stop / DestroyConfig / Finalize, and acl.json profiling."""

    #: the result folder of acl.prof.init, None before init
    folder: Path | None = None
    #: acl.json switched profiling on at acl.init: the API then refuses (100042)
    from_init: bool = False
    #: config handle -> (device ids, data type config)
    configs: dict[int, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    #: config handles started and not stopped
    running: set[int] = field(default_factory=set)
