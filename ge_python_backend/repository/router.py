"""The router's model folder (templates with ``source: members``): its config, from its members'.

The router (``triton/router.py``) serves the inputs and outputs its members share, with the
largest batch every member takes; its members are read, checked and limited by the same functions
its load uses (``modelconfig/members.py``, ``triton/router_settings.py``), so a folder written here
loads, and one whose members changed since is refused at load with the same message.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ge_python_backend.errors import ConfigError
from ge_python_backend.modelconfig.members import (
    MemberFacts,
    TensorFacts,
    member_facts,
    member_limits,
    parse_limits,
    router_io,
)
from ge_python_backend.params import parse_list
from ge_python_backend.repository.config import ModelConfig, mc
from ge_python_backend.triton.router_settings import DEFAULT_BLS_THREADS, read_member_config


def read_members(repository: Path, names_text: str) -> list[MemberFacts]:
    """The members option (comma-separated model names) as the members' facts, in order."""
    try:
        names = parse_list(str)(names_text)
    except ValueError:
        raise ConfigError(
            f"option members is {names_text!r}: name the member models, comma-separated (--set members=A,B)"
        ) from None
    return [member_facts(name, read_member_config(repository, name)) for name in names]


def _add_tensors(entries: Any, tensors: Sequence[TensorFacts]) -> None:
    for tensor in tensors:
        entry = entries.add()
        entry.name = tensor.name
        entry.data_type = mc.DataType.Value(tensor.data_type)
        entry.dims.extend(tensor.dims)
        if tensor.optional:
            entry.optional = True


def router_config(
    repository: Path, name: str, members_text: str, limits_text: str, instances: int
) -> tuple[Any, list[str]]:
    """The router's ModelConfig over the members ``members_text`` names, and notes for the user."""
    members = read_members(repository, members_text)
    io = router_io(members, router=name)
    try:
        given = parse_limits(limits_text)
    except ValueError as exc:
        raise ConfigError(f"option limits: {exc}") from None
    limits = member_limits(members, given, instances)
    config = ModelConfig(name=name, backend="python", max_batch_size=io.max_batch_size)
    _add_tensors(config.input, io.inputs)
    _add_tensors(config.output, io.outputs)
    if io.max_batch_size > 0:
        config.dynamic_batching.SetInParent()  # no delay: the router forms no device batches, its members do
    group = config.instance_group.add()
    group.kind = mc.ModelInstanceGroup.KIND_CPU
    group.count = instances
    notes = [
        "routes to "
        + ", ".join(
            f"{m.name} (up to {limit.limit} rows in flight"
            + ("" if m.name in given else f": {m.instances} instance(s) x max_batch_size {max(m.max_batch_size, 1)}")
            + ")"
            for m, limit in zip(members, limits)
        )
    ]
    batches = {m.name: m.max_batch_size for m in members}
    if len(set(batches.values())) > 1:
        each = ", ".join(f"{n} {b}" for n, b in batches.items())
        notes.append(f"max_batch_size {io.max_batch_size}: the smallest of the members' ({each})")
    total = sum(limit.limit for limit in member_limits(members, given))
    per_execute = max(io.max_batch_size, 1)
    if instances * per_execute < total:
        notes.append(
            f"on Triton 24.02-24.05 (no response senders: answers are returned from execute) each router instance has "
            f"at most {per_execute} rows in flight: give it --instances {-(-total // per_execute)} there to fill the "
            f"members' {total}"
        )
    if total > DEFAULT_BLS_THREADS:
        notes.append(
            f"the limits add up to {total} rows in flight: start tritonserver with "
            f"--backend-config=python,thread-pool-size={total} (it runs {DEFAULT_BLS_THREADS} BLS requests of a model "
            "instance at once by default)"
        )
    return config, notes
