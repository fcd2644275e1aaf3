"""Every row of docs/fidelity.md names the conformance probes that check it on a device, or says
why it cannot be automated; and the probes and the rows agree on each other."""

from __future__ import annotations

import re
from pathlib import Path

from ge_python_backend.ops.conformance import PROBES

FIDELITY = Path(__file__).parents[2] / "docs" / "fidelity.md"
PROBE_ID = re.compile(r"^`([PK]-[a-z0-9-]+)`$")
REASON = "not automated: "


def table_rows(text: str) -> list[tuple[int, str, str, list[str], list[str]]]:
    """(line, section, row number, header cells, cells) of every row of the tables whose header
    starts with ``| # |``: the numbered fidelity rows."""
    found = []
    header: list[str] | None = None
    section = ""
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            section = line[3:]
        if line.startswith("| # |"):
            header = [c.strip() for c in line.strip().strip("|").split(" | ")]
            continue
        if header is not None and re.match(r"^\| \d+[a-z]? \|", line):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            found.append((number, section, cells[0], header, cells))
        elif not line.startswith("|"):
            header = None
    return found


def probe_problems(text: str) -> list[str]:
    """What each row lacks: its "probe" cell with probe IDs of the registry or a reason."""
    known = {p.id for p in PROBES}
    problems = []
    for line, section, row, header, cells in table_rows(text):
        where = f"docs/fidelity.md:{line}: row {row} ({section})"
        if "probe" not in header:
            problems.append(f"{where}: its table has no 'probe' column")
            continue
        if len(cells) != len(header):
            problems.append(
                f"{where} has {len(cells)} cells, its table {len(header)} columns: add the row's probe cell "
                "(probe IDs such as `P-init-repeat`, or 'not automated: <why>')"
            )
            continue
        cell = cells[header.index("probe")]
        if cell.startswith(REASON):
            if len(cell) - len(REASON) < 10:
                problems.append(f"{where}: 'not automated:' without a reason")
            continue
        ids = [PROBE_ID.match(part.strip()) for part in cell.split(";")] if cell else [None]
        if not all(ids):
            problems.append(f"{where} has neither a probe ID nor a reason in its 'probe' column: {cell!r}")
            continue
        unknown = sorted({m.group(1) for m in ids if m} - known)
        if unknown:
            problems.append(f"{where} names probes that do not exist: {', '.join(unknown)}")
    return problems


def test_every_row_has_a_probe_or_a_reason():
    problems = probe_problems(FIDELITY.read_text())
    assert problems == [], "\n".join(problems)


def test_the_probes_and_the_rows_name_each_other():
    """A probe's rows list it in their probe cell, and a row lists only probes that say they check it."""
    rows = {row: cells[header.index("probe")] for _, _, row, header, cells in table_rows(FIDELITY.read_text())}
    wrong = []
    for probe in PROBES:
        for row in probe.rows:
            if row not in rows:
                wrong.append(f"{probe.id} checks row {row}, which docs/fidelity.md does not have")
            elif f"`{probe.id}`" not in rows[row]:
                wrong.append(f"{probe.id} checks row {row}, whose probe cell does not name it: {rows[row]!r}")
    named = {(row, m) for row, cell in rows.items() for m in re.findall(r"`([PK]-[a-z0-9-]+)`", cell)}
    for row, probe_id in sorted(named):
        if not any(p.id == probe_id and row in p.rows for p in PROBES):
            wrong.append(f"row {row} names {probe_id}, which does not list row {row}")
    assert wrong == [], "\n".join(wrong)


def test_the_check_names_the_row_a_new_row_in_the_old_format_lacks():
    """Rows another change adds without the column (the old seven cells) are named, with the fix."""
    text = FIDELITY.read_text()
    old_format = "| 999 | init | a rule | `sim/api.py` | RT `x.cpp:1` | `unit/test_x.py::t` | n/a. |"
    first_row = next(line for line in text.splitlines() if line.startswith("| 1 |"))
    problems = probe_problems(text.replace(first_row, first_row + "\n" + old_format, 1))
    assert len(problems) == 1
    assert "row 999 (1. Process init and finalize, acl.json) has 7 cells, its table 8 columns" in problems[0]
    blank = probe_problems(text.replace(first_row, first_row.rsplit("|", 2)[0] + "| |", 1))
    assert len(blank) == 1 and "row 1 " in blank[0] and "neither a probe ID nor a reason" in blank[0]
