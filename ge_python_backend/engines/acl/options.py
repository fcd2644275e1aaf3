"""The acl engine's parameters (engines ``acl`` and ``acl-sim``), parsed once into ``AclOptions``."""

from __future__ import annotations

import hmac
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ge_python_backend.ascend.aipp import AippConfig, parse_aipp_config
from ge_python_backend.ascend.atcflags import parse_sizes
from ge_python_backend.ascend.layout import Shape
from ge_python_backend.errors import ConfigError
from ge_python_backend.params import Parameter, parse_bool, parse_float, parse_int, parse_list

#: ACL_PROF_* data types (hicann/runtime include/external/acl/acl_prof.h 26-43), by name without the prefix
PROFILING_TYPES = {
    "ACL_API": 0x0001,
    "TASK_TIME": 0x0002,
    "AICORE_METRICS": 0x0004,
    "AICPU": 0x0008,
    "L2CACHE": 0x0010,
    "HCCL_TRACE": 0x0020,
    "TRAINING_TRACE": 0x0040,
    "MSPROFTX": 0x0080,
    "RUNTIME_API": 0x0100,
    "GE_API_L0": 0x0200,
    "TASK_TIME_L0": 0x0800,
    "TASK_MEMORY": 0x1000,
    "TASK_TIME_L2": 0x2000,
    "OP_ATTR": 0x4000,
    "TASK_TIME_L3": 0x8000,
    "GE_API_L1": 0x01000000,
}
#: aclprofAicoreMetrics (acl_prof.h 55-66)
AICORE_METRICS = {
    "ARITHMETIC_UTILIZATION": 0,
    "PIPE_UTILIZATION": 1,
    "MEMORY_BANDWIDTH": 2,
    "L0B_AND_WIDTH": 3,
    "RESOURCE_CONFLICT_RATIO": 4,
    "MEMORY_UB": 5,
    "L2_CACHE": 6,
    "PIPE_EXECUTE_UTILIZATION": 7,
    "MEMORY_ACCESS": 8,
    "NONE": 0xFF,
}


def _choices(table: Mapping[str, int]):
    def parse(raw: str) -> str:
        if raw not in table:
            raise ValueError("")
        return raw

    return parse


#: What a profiling token may be made of (no ':' or ',', which separate it from BATCHES and others).
_TOKEN = re.compile(r"^[A-Za-z0-9._~+/=-]{16,256}$")


_RETIRED_TOKENS = (
    "tokens in the config are readable by any client that may read model configs (Triton answers "
    "GET /v2/models/<model>/config and gRPC ModelConfig with every parameter); write them to a file, "
    "one per line, and name it in acl_profiling_tokens_file"
)


def _retired_tokens(raw: str) -> str:
    raise ValueError(_RETIRED_TOKENS)


def parse_max_shapes(text: str) -> dict[str, Shape]:
    """``"x:8,3,512,512;y:8,1000"`` -> {"x": (8, 3, 512, 512), "y": (8, 1000)}."""
    try:
        return parse_sizes(text, "acl_max_shapes")
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


PARAMETERS = (
    Parameter(
        "acl_json",
        str,
        "",
        "an acl.json file in the version folder (or an absolute path)",
        "passed to acl.init; its dump and profiler keys and values are checked as CANN reads them and a mistake fails "
        "the load naming the key; with profiling on it cannot be combined with acl_profiling_dir, with dump on not "
        "with acl_dump_config",
    ),
    Parameter(
        "acl_dump_config",
        str,
        "",
        "a JSON file with a 'dump' section (acl.json syntax), in the version folder or absolute",
        "data dump from load on: acl.mdl.init_dump and set_dump before the model copies load, finalize_dump at close",
    ),
    Parameter(
        "acl_profiling_dir",
        str,
        "",
        "a folder for profiling results (created if missing)",
        "where acl.prof writes: a window after load (acl_profiling_batches, acl_profiling_seconds) or on demand "
        "(acl_profiling_tokens_file), which need it",
    ),
    Parameter("acl_profiling_batches", parse_int(0), 0, "an integer >= 0", "profile the first N batches after load"),
    Parameter("acl_profiling_seconds", parse_float(0.0), 0.0, "seconds >= 0", "profile the first S seconds after load"),
    Parameter(
        "acl_profiling_types",
        parse_list(_choices(PROFILING_TYPES)),
        ("ACL_API", "TASK_TIME"),
        "comma-separated ACL_PROF_* names without the prefix: " + ", ".join(PROFILING_TYPES),
        "what acl.prof collects (OR-ed into create_config's data type config)",
    ),
    Parameter(
        "acl_profiling_aicore_metrics",
        _choices(AICORE_METRICS),
        "PIPE_UTILIZATION",
        ", ".join(AICORE_METRICS),
        "aclprofAicoreMetrics; has an effect only with profiling type AICORE_METRICS",
    ),
    Parameter(
        "acl_profiling_tokens_file",
        str,
        "",
        "a file of tokens, one per line (at least 16 of A-Z a-z 0-9 . _ ~ + / = -), in the version folder or absolute",
        "allow a request with parameter acl_profile=TOKEN[:BATCHES] to start a profiling window",
    ),
    Parameter(
        "acl_profiling_max_batches",
        parse_int(1, 1_000_000),
        1000,
        "an integer from 1 to 1000000",
        "the most batches a window opened on demand may profile (BATCHES above it is refused)",
    ),
    Parameter(
        "acl_profiling_max_seconds",
        parse_float(0.001),
        60.0,
        "seconds > 0",
        "a window opened on demand closes after this long, even with batches left",
    ),
    Parameter(
        "acl_profiling_tokens",
        _retired_tokens,
        (),
        "nothing (retired: use acl_profiling_tokens_file)",
        "retired: tokens in the config are visible to clients",
        secret=True,
    ),
    Parameter(
        "acl_timing_events",
        parse_bool,
        None,
        "true or false (default: true when GEModel's metrics are on)",
        "time copies and execution with 4 device events per stream (events are a finite device resource); an event "
        "that cannot be read never fails a batch whose outputs are ready (its wall time is reported instead)",
    ),
    Parameter(
        "acl_timing_every",
        parse_int(1),
        8,
        "an integer >= 1",
        "with timing events, time one batch in N per stream (the first, then every Nth); a timed batch counts in "
        "ge_phase_duration_us for itself and the untimed ones since the previous (1: every batch); the events are 7 "
        "of a batch's 11 runtime calls",
    ),
    Parameter(
        "acl_share_weights",
        parse_bool,
        True,
        "true or false",
        "load every stream's model copy over one weight buffer (load_from_file_with_mem): device memory "
        "S x (work + I/O) + 1 x weights, printed at load",
    ),
    Parameter(
        "acl_max_shapes",
        parse_max_shapes,
        {},
        "NAME:D0,D1,...;... (largest shapes of shape-range inputs and outputs)",
        "buffer sizes of a shape-range model's tensors whose ranges have no upper bound",
    ),
    Parameter(
        "aipp_config",
        str,
        "",
        "an AIPP config in ATC's aipp_op syntax, in the version folder (or an absolute path)",
        "dynamic AIPP: the values used unless a request's parameters set them (related_input_rank counts the model's "
        "inputs)",
    ),
)


@dataclass(frozen=True)
class ProfilingSettings:
    folder: Path
    batches: int
    seconds: float
    data_types: int
    aicore_metrics: int
    tokens: tuple[str, ...] = field(default=(), repr=False)
    #: a window opened on demand: its batches at most, and its seconds
    max_batches: int = 1000
    max_seconds: float = 60.0

    def allows(self, token: str) -> bool:
        """Whether ``token`` is one of the tokens (compared in constant time, every token tried)."""
        given = token.encode("utf-8", "surrogatepass")
        found = False
        for known in self.tokens:
            found |= hmac.compare_digest(given, known.encode())
        return found


def read_tokens(path: Path) -> tuple[str, ...]:
    """The tokens of ``acl_profiling_tokens_file``: one per line, '#' comments and blank lines
    skipped; ConfigError for a file that cannot be read, is writable by anyone, holds no token or
    a malformed one (by line number: the token itself is never shown)."""
    where = f"parameter 'acl_profiling_tokens_file': {path}"
    try:
        if path.stat().st_mode & stat.S_IWOTH:
            raise ConfigError(f"{where} is writable by every user (anyone could add a token): chmod o-w it")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: {getattr(exc, 'strerror', None) or exc}") from None
    tokens = []
    for number, line in enumerate(text.splitlines(), 1):
        token = line.strip()
        if not token or token.startswith("#"):
            continue
        if not _TOKEN.match(token):
            raise ConfigError(
                f"{where}: line {number} is not a token (16 to 256 of A-Z a-z 0-9 . _ ~ + / = -, e.g. from "
                "`openssl rand -hex 16`)"
            )
        tokens.append(token)
    if not tokens:
        raise ConfigError(f"{where} holds no token")
    return tuple(tokens)


@dataclass(frozen=True)
class AclOptions:
    """Typed acl engine options; relative files are in the model's version folder."""

    acl_json: Path | None = None
    dump_config: Path | None = None
    profiling: ProfilingSettings | None = None
    timing_events: bool = True
    #: time one batch in this many per slot (it stands for the untimed ones before it)
    timing_every: int = 8
    share_weights: bool = True
    max_shapes: Mapping[str, Shape] = field(default_factory=dict)
    aipp: tuple[AippConfig, ...] = ()

    @classmethod
    def read(cls, options: Mapping[str, Any], version_dir: Path) -> AclOptions:
        values = {p.name: p.default for p in PARAMETERS} | dict(options)

        def path(name: str) -> Path | None:
            text = values[name]
            if not text:
                return None
            found = Path(text)
            return found if found.is_absolute() else version_dir / found

        if values["acl_profiling_tokens"]:
            raise ConfigError(f"parameter 'acl_profiling_tokens' is retired: {_RETIRED_TOKENS}")
        aipp_file = path("aipp_config")
        aipp: tuple[AippConfig, ...] = ()
        if aipp_file is not None:
            try:
                aipp = parse_aipp_config(aipp_file.read_text(encoding="utf-8"), str(aipp_file))
            except OSError as exc:
                raise ConfigError(f"parameter 'aipp_config': {aipp_file}: {exc.strerror or exc}") from None
            except UnicodeDecodeError as exc:
                raise ConfigError(
                    f"parameter 'aipp_config': {aipp_file} is not a text file in ATC's aipp_op syntax ({exc.reason} "
                    f"at byte {exc.start})"
                ) from None
            except ConfigError as exc:
                raise ConfigError(f"parameter 'aipp_config': {exc}") from None
        profiling = None
        folder = path("acl_profiling_dir")
        if folder is not None:
            types = 0
            for name in values["acl_profiling_types"]:
                types |= PROFILING_TYPES[name]
            tokens_file = path("acl_profiling_tokens_file")
            profiling = ProfilingSettings(
                folder,
                values["acl_profiling_batches"],
                values["acl_profiling_seconds"],
                types,
                AICORE_METRICS[values["acl_profiling_aicore_metrics"]],
                read_tokens(tokens_file) if tokens_file is not None else (),
                values["acl_profiling_max_batches"],
                values["acl_profiling_max_seconds"],
            )
        elif values["acl_profiling_batches"] or values["acl_profiling_seconds"] or values["acl_profiling_tokens_file"]:
            raise ConfigError(
                "parameters acl_profiling_batches/seconds/tokens_file need acl_profiling_dir (where results go)"
            )
        timing = values["acl_timing_events"]
        return cls(
            acl_json=path("acl_json"),
            dump_config=path("acl_dump_config"),
            profiling=profiling,
            timing_events=True if timing is None else timing,
            timing_every=values["acl_timing_every"],
            share_weights=values["acl_share_weights"],
            max_shapes=dict(values["acl_max_shapes"]),
            aipp=aipp,
        )
