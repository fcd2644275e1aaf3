"""The tritonserver the end-to-end tests run against.

By default the bundled one (``nvidia-pytriton`` 0.7.0: tritonserver 2.51.0, Triton 24.10). With
``--tritonserver=24.02`` (``tools/test.sh --tritonserver=24.02 -m contract``, the 24.02 lane of
``.ci/run``) the whole session runs on tritonserver 2.43.0 (Triton 24.02, the release CANN's own GE
backend image runs): the server files of ``nvidia-pytriton`` 0.5.3 that ``tools/bootstrap.sh``
unpacks into ``.venv/tritonserver-24.02``. Its ``bin`` goes first on ``PATH``, so every server a test
starts (``TritonServer``, ``ge-triton serve``, ``tools/demo.sh``) is that one: ``find_tritonserver``
takes the ``tritonserver`` on ``PATH`` first.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from ge_python_backend.ops.server import pytriton_install

#: where tools/bootstrap.sh unpacks nvidia-pytriton 0.5.3's server files (beside this venv's own 2.51)
TRITON_2402_ROOT = Path(sys.prefix) / "tritonserver-24.02"


@dataclass(frozen=True)
class Release:
    """A Triton release the tests can run against, and what its Python backend offers GEModel."""

    name: str  # Triton's release: "24.10"
    server: str  # tritonserver's version: "2.51.0"
    #: a non-decoupled request's response sender (python_backend r24.06, triton/capabilities.py)
    response_senders: bool
    #: the core refuses a tensor whose data is not the size its shape and type make ("input byte
    #: size mismatch": core r24.06, commit 9ce98b5, src/infer_request.cc); before, the Python
    #: backend hands the model whatever the shape says, over whatever memory follows the data
    checks_input_sizes: bool
    #: nv_inference_count counts the rows of requests the model refused too (observed on 2.51;
    #: 2.43 counts answered requests' rows only, executions alike on both)
    counts_refused_rows: bool
    #: tritonserver lives on when a stub dies with requests in flight (2.43 crashes: observed,
    #: SIGSEGV in libtriton_python.so's TRITONBACKEND_ModelInstanceExecute)
    survives_stub_death: bool


BUNDLED = Release(
    "24.10",
    "2.51.0",
    response_senders=True,
    checks_input_sizes=True,
    counts_refused_rows=True,
    survives_stub_death=True,
)
TRITON_2402 = Release(
    "24.02",
    "2.43.0",
    response_senders=False,
    checks_input_sizes=False,
    counts_refused_rows=False,
    survives_stub_death=False,
)
RELEASES = {release.name: release for release in (BUNDLED, TRITON_2402)}

_under_test = BUNDLED


def under_test() -> Release:
    """The release this session's servers are (``--tritonserver``)."""
    return _under_test


def known_gap(request: pytest.FixtureRequest, present: bool, reason: str) -> None:
    """On a release without a server capability (``present`` False) the test must fail, as
    docs/platforms.md says it does there (a strict xfail: a release that gains it fails the test)."""
    if not present:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"Triton {_under_test.name}: {reason}"))


def select(name: str) -> None:
    """Run the session's servers on release ``name`` (called once, by the ``--tritonserver`` option)."""
    global _under_test
    release = RELEASES[name]
    if release is TRITON_2402:
        if not (TRITON_2402_ROOT / ".complete").is_file():
            raise pytest.UsageError(
                f"--tritonserver=24.02: no tritonserver 2.43.0 in {TRITON_2402_ROOT}; run bash tools/bootstrap.sh "
                "(it unpacks nvidia-pytriton 0.5.3's server files there) and see its message"
            )
        binary = pytriton_install(TRITON_2402_ROOT).binary
        os.environ["PATH"] = os.pathsep.join([str(binary.parent), os.environ.get("PATH", "")])
    _under_test = release
