"""The router's settings, read once at load from its config and its members' configs (no Triton
import: ``check`` and ``generate`` read them the same way). The router model is ``triton/router.py``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ge_python_backend.errors import ConfigError
from ge_python_backend.modelconfig.files import config_dict, read_config_file
from ge_python_backend.modelconfig.members import (
    MemberFacts,
    RouterIO,
    TensorFacts,
    member_facts,
    member_limits,
    parse_limits,
    router_io,
)
from ge_python_backend.params import (
    Choice,
    Parameter,
    parse_bool,
    parse_enum,
    parse_float,
    parse_list,
    parse_parameters,
)
from ge_python_backend.serving.routing import MemberLimit
from ge_python_backend.triton.settings import TRITON_PARAMETERS

#: python_backend's BLS thread pool per model instance when the server is not told otherwise
#: (r24.02 ``src/python_be.cc:2113``, r24.10 ``:1981``)
DEFAULT_BLS_THREADS = 32
_POOL_FLAG = "thread-pool-size="


class ResponseMode(Choice):
    """How the router answers: through response senders (execute returns at once) or returned from execute."""

    AUTO = "auto"
    SENDER = "sender"
    RETURN = "return"


ROUTER_PARAMETERS = (
    Parameter(
        "members",
        parse_list(str),
        (),
        "comma-separated model names of the same repository, in order of preference",
        "the models requests are routed to: the first whose rows in flight are below its limit takes each request",
    ),
    Parameter(
        "member_limits",
        parse_limits,
        {},
        "comma-separated member=rows pairs, rows >= 1",
        "rows in flight per member at most; unset: the member's instances times its max_batch_size (each of the "
        "router's instances keeps its own count, so the limits are divided among them)",
    ),
    Parameter(
        "backoff_ms",
        parse_float(1.0),
        1000.0,
        "milliseconds >= 1",
        "how long a member that answered unavailable (not ready, unloaded, out of service, queue full) is left alone "
        "before a readiness probe",
    ),
    Parameter(
        "response_mode",
        parse_enum(ResponseMode),
        ResponseMode.AUTO,
        "auto, sender or return",
        "sender: requests are answered through their response senders, execute returns at once (Triton 24.06 and "
        "later; requests pending in senders are never answered if the router's stub process dies); return: execute "
        "waits for its requests' answers (each instance routes one execute's requests at a time); auto: sender where "
        "the Triton version has it, else return",
    ),
    Parameter("metrics", parse_bool, True, "true or false", "report the router's Prometheus metrics"),
)


@dataclass(frozen=True)
class RouterSettings:
    """What the router reads at load: its parameters and its members' configs."""

    name: str
    instance_name: str
    version: str
    members: tuple[MemberFacts, ...]
    io: RouterIO
    #: each member's limit for this instance (the members' limits divided among ``instances``)
    limits: tuple[MemberLimit, ...]
    instances: int
    #: the members' limits added up, for all of the router's instances together
    total_rows: int
    backoff_s: float
    response_mode: ResponseMode
    metrics: bool

    @classmethod
    def read(cls, args: Mapping[str, str]) -> RouterSettings:
        config = json.loads(args["model_config"])
        name = str(config.get("name") or args.get("model_name", "?"))
        raw = {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}
        values = parse_parameters(raw, ROUTER_PARAMETERS, ignored=TRITON_PARAMETERS)
        if not values["members"]:
            raise ConfigError("parameter 'members' is missing: name the member models, in order of preference")
        repository = Path(args.get("model_repository", ".")).parent
        members = tuple(member_facts(m, read_member_config(repository, m)) for m in values["members"])
        io = router_io(members, router=name)
        own = member_facts(name, config)
        check_own_io(own, io)
        limits = tuple(member_limits(members, values["member_limits"], own.instances))
        total = sum(m.limit for m in member_limits(members, values["member_limits"]))
        return cls(
            name=name,
            instance_name=args.get("model_instance_name", name),
            version=args.get("model_version", "1"),
            members=members,
            io=io,
            limits=limits,
            instances=own.instances,
            total_rows=total,
            backoff_s=values["backoff_ms"] / 1000.0,
            response_mode=values["response_mode"],
            metrics=values["metrics"],
        )


def read_member_config(repository: Path, member: str) -> dict[str, Any]:
    """Member ``member``'s config (Triton's JSON form) from ``repository/member/config.pbtxt``."""
    path = repository / member / "config.pbtxt"
    if not path.is_file():
        raise ConfigError(
            f"member {member!r}: no {path}; members are models of the router's own repository, with a config.pbtxt "
            "that declares their inputs and outputs"
        )
    return config_dict(read_config_file(path), member)


def check_own_io(own: MemberFacts, io: RouterIO) -> None:
    """The router's config must declare what its members share (``generate --template router`` writes it)."""
    for kind in ("inputs", "outputs"):
        mine = {t.name: t for t in getattr(own, kind)}
        theirs: dict[str, TensorFacts] = {t.name: t for t in getattr(io, kind)}
        for name in sorted(set(mine) | set(theirs)):
            if mine.get(name) != theirs.get(name):
                have = mine[name].describe() if name in mine else "nothing"
                want = theirs[name].describe() if name in theirs else "nothing"
                raise ConfigError(
                    f"{kind[:-1]} {name!r}: the router's config has {have}, its members have {want}; the router's "
                    "inputs and outputs are its members' (regenerate it: ge-triton generate --template router)"
                )
    if own.max_batch_size > io.max_batch_size or (own.max_batch_size > 0) != (io.max_batch_size > 0):
        raise ConfigError(
            f"max_batch_size {own.max_batch_size}: the router's largest batch must be one every member takes "
            f"({io.max_batch_size}, the smallest of its members')"
        )


def bls_threads(server_pid: int) -> int:
    """The server's BLS threads per model instance: its ``thread-pool-size`` backend setting."""
    try:
        arguments = Path(f"/proc/{server_pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return DEFAULT_BLS_THREADS
    for argument in arguments:
        if argument.startswith("--backend-config=python,") and _POOL_FLAG in argument:
            value = argument.split(_POOL_FLAG, 1)[1]
            if value.isdigit():
                return int(value)
    return DEFAULT_BLS_THREADS


def return_mode_instances(settings: RouterSettings) -> int | None:
    """With answers returned from execute an instance has at most one execute's rows in flight
    (``max_batch_size``): the instance count that lets the members' limits fill, when the router
    has fewer; None when it has enough."""
    per_execute = max(settings.io.max_batch_size, 1)
    wanted = -(-settings.total_rows // per_execute)
    return wanted if settings.instances < wanted else None
