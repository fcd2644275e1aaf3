"""``check`` finds what the load refuses (issue 21, defect 5): every folder of the refusal corpus
(tests/support/refusals.py) is loaded by a real tritonserver, one server for the module, and every
folder the load refuses must have an error in the offline ``check``, naming the same cause.

So that the corpus proves something, every folder in it must be one the load refuses: the offline
side alone (tests/unit/test_gear_boundaries.py) cannot tell a folder the load takes from one it
refuses. deploy's init container runs the same offline check, so these pods no longer crash-loop.
"""

from __future__ import annotations

import pytest

from ge_python_backend.ops.loadcheck import load_models
from ge_python_backend.repository.check import check_repository
from tests.support import refusals

pytestmark = [pytest.mark.e2e, pytest.mark.contract]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    root = tmp_path_factory.mktemp("refusals")
    repo, cases = refusals.build(root)
    results = {r.model: r for r in load_models(repo, sorted(cases), load_timeout=120)}
    return repo, cases, results, root


def test_the_server_refuses_every_folder_of_the_corpus(loaded):
    _, cases, results, _ = loaded
    assert set(results) == set(cases)
    taken = sorted(name for name, result in results.items() if result.loaded)
    assert taken == [], f"the corpus holds folders the load takes: {taken}"


@pytest.mark.parametrize("case", refusals.CASES, ids=[c.name for c in refusals.CASES])
def test_check_errors_on_every_folder_the_load_refuses(loaded, case):
    repo, _, results, root = loaded
    result = results[case.name]
    if result.loaded:
        pytest.fail(f"{case.name} loaded")  # reported by the test above; nothing to compare
    errors = [p.message for p in check_repository(repo / case.name, backends=root).errors]
    assert errors, f"the load refused {case.name} ({result.message}) and check found nothing"
    assert any(case.check_says in message for message in errors), errors
    assert case.check_says in result.message, result.message  # the load's own words name the same cause
