"""``check`` finds what the load refuses, and only that: every folder of the corpus
(tests/support/refusals.py) is loaded by a real tritonserver, one server for the module, and for
every folder the offline ``check`` has an error if and only if the load refuses it; where it
refuses, check's error and the load's message name the same cause.

So that the corpus proves something, each folder says which way it goes (``check_says``), and the
server must agree: the offline side alone (tests/unit/test_gear_boundaries.py) cannot tell a
folder the load takes from one it refuses. deploy's init container runs the same offline check, so
these pods no longer crash-loop, and a folder that loads is not refused by deploy.
"""

from __future__ import annotations

import pytest

from ge_python_backend.ops.loadcheck import load_models
from ge_python_backend.repository.check import check_repository
from tests.support import refusals

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    root = tmp_path_factory.mktemp("refusals")
    repo, cases = refusals.build(root)
    results = {r.model: r for r in load_models(repo, sorted(cases), load_timeout=120)}
    return repo, cases, results, root


def test_the_server_refuses_the_folders_with_a_cause_and_takes_the_others(loaded):
    _, cases, results, _ = loaded
    assert set(results) == set(cases)
    wrong = sorted(
        f"{name}: {'loaded' if result.loaded else 'refused: ' + result.message}"
        for name, result in results.items()
        if result.loaded != (cases[name].check_says is None)
    )
    assert wrong == [], "\n".join(wrong)


def test_offline_check_errs_on_a_folder_if_and_only_if_the_load_refuses_it(loaded):
    repo, cases, results, root = loaded
    disagree = []
    for name in sorted(cases):
        errors = [p.message for p in check_repository(repo / name, backends=root, ge_backend_ready=True).errors]
        if bool(errors) == results[name].loaded:
            disagree.append(f"{name}: load {'took' if results[name].loaded else 'refused'} it, check says {errors}")
    assert disagree == [], "\n".join(disagree)


@pytest.mark.parametrize("case", refusals.REFUSED, ids=[c.name for c in refusals.REFUSED])
def test_check_and_the_load_name_the_same_cause(loaded, case):
    repo, _, results, root = loaded
    result = results[case.name]
    if result.loaded:
        pytest.fail(f"{case.name} loaded")  # reported by the test above; nothing to compare
    errors = [p.message for p in check_repository(repo / case.name, backends=root, ge_backend_ready=True).errors]
    assert any(case.check_says in message for message in errors), errors
    assert case.check_says in result.message, result.message  # the load's own words name the same cause
