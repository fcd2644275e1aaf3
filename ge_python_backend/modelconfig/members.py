"""What a router needs of its members' configs: their shared inputs and outputs, and their limits.

``member_facts`` and ``router_io`` read members' configs (the JSON form Triton gives
``initialize``): the shared inputs and outputs, refused with the member and tensor named when the
members disagree, and members that cannot be routed to (sequence batching: a sequence's state
would split between members; decoupled models) refused. ``generate``, ``check`` and the router's
load use the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ge_python_backend.errors import ConfigError
from ge_python_backend.serving.routing import MemberLimit


@dataclass(frozen=True)
class TensorFacts:
    """What a client sees of one config input or output."""

    name: str
    data_type: str
    dims: tuple[int, ...]
    optional: bool = False

    def describe(self) -> str:
        return f"{self.data_type} {list(self.dims)}" + (" optional" if self.optional else "")


@dataclass(frozen=True)
class MemberFacts:
    """What the router needs of one member's config."""

    name: str
    max_batch_size: int
    inputs: tuple[TensorFacts, ...]
    outputs: tuple[TensorFacts, ...]
    instances: int
    sequence_batching: bool
    decoupled: bool
    platform: str

    @property
    def default_limit(self) -> int:
        """Rows in flight the member can run at once: its instances times its largest batch."""
        return self.instances * max(self.max_batch_size, 1)


@dataclass(frozen=True)
class RouterIO:
    """The router's own inputs, outputs and largest batch, as every member accepts them."""

    max_batch_size: int
    inputs: tuple[TensorFacts, ...]
    outputs: tuple[TensorFacts, ...]


def _tensors(entries: Any, member: str, kind: str) -> tuple[TensorFacts, ...]:
    facts = []
    for entry in entries or ():
        try:
            facts.append(
                TensorFacts(
                    str(entry["name"]),
                    str(entry.get("data_type", "TYPE_INVALID")),
                    tuple(int(d) for d in entry.get("dims", ())),
                    bool(entry.get("optional", False)),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"member {member!r}: an {kind} entry of its config is malformed ({exc})") from None
    return tuple(facts)


def member_facts(name: str, config: Mapping[str, Any]) -> MemberFacts:
    """``MemberFacts`` of member ``name`` from its config (Triton's JSON form)."""
    groups = config.get("instance_group") or [{}]
    try:
        instances = sum(int(g.get("count", 1)) for g in groups)
        max_batch_size = int(config.get("max_batch_size", 0))
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"member {name!r}: instance_group or max_batch_size of its config is malformed ({exc})"
        ) from None
    policy = config.get("model_transaction_policy") or {}
    return MemberFacts(
        name=name,
        max_batch_size=max_batch_size,
        inputs=_tensors(config.get("input"), name, "input"),
        outputs=_tensors(config.get("output"), name, "output"),
        instances=max(instances, 1),
        sequence_batching="sequence_batching" in config,
        decoupled=bool(policy.get("decoupled", False)),
        platform=str(config.get("platform") or config.get("backend") or ""),
    )


def _routable(member: MemberFacts) -> None:
    if member.sequence_batching:
        raise ConfigError(
            f"member {member.name!r} uses sequence batching: a router sends each request to whichever member has "
            "room, so a sequence's state would split between members; serve stateful models directly"
        )
    if member.decoupled:
        raise ConfigError(
            f"member {member.name!r} is decoupled (model_transaction_policy): the router answers each request with "
            "exactly one response and cannot forward a stream of them"
        )
    if not member.inputs or not member.outputs:
        missing = "inputs" if not member.inputs else "outputs"
        raise ConfigError(
            f"member {member.name!r}: its config.pbtxt declares no {missing} (auto-complete fills them only at load); "
            "write them into its config (ge-triton generate does)"
        )


def _same_tensors(first: MemberFacts, other: MemberFacts, kind: str) -> None:
    mine = {t.name: t for t in getattr(first, kind)}
    theirs = {t.name: t for t in getattr(other, kind)}
    for name in sorted(set(mine) | set(theirs)):
        if name not in theirs or name not in mine:
            has, lacks = (first, other) if name in mine else (other, first)
            raise ConfigError(f"members disagree: {kind[:-1]} {name!r} of {has.name!r} is missing from {lacks.name!r}")
        if mine[name] != theirs[name]:
            raise ConfigError(
                f"members disagree on {kind[:-1]} {name!r}: {first.name!r} has {mine[name].describe()}, "
                f"{other.name!r} has {theirs[name].describe()}"
            )


def router_io(members: Sequence[MemberFacts], router: str = "") -> RouterIO:
    """The inputs and outputs every member shares, and the largest batch they all take; ConfigError
    naming the member (and tensor) that cannot be routed to or disagrees with the first."""
    if not members:
        raise ConfigError("a router needs at least one member")
    names = [m.name for m in members]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"member {repeated[0]!r} is named twice; each member once, in order of preference")
    if router and router in names:
        raise ConfigError(f"the router {router!r} cannot be its own member")
    for member in members:
        _routable(member)
    first = members[0]
    for other in members[1:]:
        _same_tensors(first, other, "inputs")
        _same_tensors(first, other, "outputs")
        if (first.max_batch_size > 0) != (other.max_batch_size > 0):
            batching, plain = (first, other) if first.max_batch_size > 0 else (other, first)
            raise ConfigError(
                f"members disagree on batching: {batching.name!r} has max_batch_size {batching.max_batch_size} "
                f"(a batch axis the client leaves out of dims), {plain.name!r} has 0 (dims are the whole shape)"
            )
    return RouterIO(min(m.max_batch_size for m in members), first.inputs, first.outputs)


def parse_limits(text: str) -> dict[str, int]:
    """``member=rows,...`` (parameter ``member_limits``) into a dict."""
    limits: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"{item!r} is not member=rows with rows >= 1")
        limits[name.strip()] = int(value)
    return limits


def member_limits(members: Sequence[MemberFacts], given: Mapping[str, int], instances: int = 1) -> list[MemberLimit]:
    """Each member's limit: given, else its instances times its largest batch; divided among the
    router's ``instances`` (each keeps its own counts), rounded up."""
    unknown = sorted(set(given) - {m.name for m in members})
    if unknown:
        raise ConfigError(
            f"member_limits names {unknown[0]!r}, which is not a member; members: {', '.join(m.name for m in members)}"
        )
    return [MemberLimit(m.name, -(-given.get(m.name, m.default_limit) // instances)) for m in members]
