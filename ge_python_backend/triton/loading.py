"""How every ``TritonPythonModel`` of the package fails a load: one line to tritonserver.

A ``GEError`` is the user's to fix and its message says what, so it goes to the load's error as
it is; anything else is a bug, whose traceback goes to the log once before the same one line.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

import triton_python_backend_utils as pb_utils

from ge_python_backend.errors import GEError

LOG = logging.getLogger(__name__)


def _nothing() -> None:
    return None


@contextlib.contextmanager
def load_or_refuse(model: str, release: Callable[[], None] = _nothing) -> Iterator[None]:
    """Run an ``initialize`` body; on failure ``release`` what it took and raise
    ``TritonModelException`` naming ``model``."""
    try:
        yield
    except GEError as exc:
        release()
        raise pb_utils.TritonModelException(f"model {model!r}: {exc}") from None
    except Exception as exc:
        LOG.exception("loading model %r failed", model)
        release()
        raise pb_utils.TritonModelException(f"model {model!r}: {type(exc).__name__}: {exc}") from None
