"""What ``ge-triton doctor`` reports: one finding per check, ok / warn / error, with the fix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Level(str, Enum):
    OK = "ok"
    WARN = "warn"
    ERROR = "error"


@dataclass(frozen=True)
class Finding:
    """One check's outcome. ``check`` is a stable name (``stub-acl``, ``device-0``, ``model:resnet:soc``);
    ``facts`` are the values it read, for the JSON report."""

    check: str
    level: Level
    message: str
    fix: str = ""
    facts: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "level": self.level.value,
            "message": self.message,
            "fix": self.fix,
            **({"facts": dict(self.facts)} if self.facts else {}),
        }


def ok(check: str, message: str, **facts: Any) -> Finding:
    return Finding(check, Level.OK, message, facts=facts)


def warn(check: str, message: str, fix: str = "", **facts: Any) -> Finding:
    return Finding(check, Level.WARN, message, fix, facts)


def error(check: str, message: str, fix: str = "", **facts: Any) -> Finding:
    return Finding(check, Level.ERROR, message, fix, facts)


@dataclass
class DoctorReport:
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level is Level.ERROR]

    def to_json(self) -> dict[str, Any]:
        counts = {level.value: sum(f.level is level for f in self.findings) for level in Level}
        return {"summary": counts, "findings": [f.to_json() for f in self.findings]}

    def text(self) -> str:
        """One line per finding (its fix indented under it)."""
        lines = []
        for finding in self.findings:
            lines.append(f"{finding.level.value.upper():5} {finding.check}: {finding.message}")
            if finding.fix and finding.level is not Level.OK:
                lines.append(f"      fix: {finding.fix}")
        counts = self.to_json()["summary"]
        lines.append(f"{counts['ok']} ok, {counts['warn']} warning(s), {counts['error']} error(s)")
        return "\n".join(lines)
