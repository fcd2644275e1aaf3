"""Standard ``logging`` inside the stub, bridged to tritonserver's log through ``pb_utils.Logger``.

The request path, the engines and the simulator log with ``logging.getLogger(__name__)``; inside
a Python-backend stub nothing would show them. ``install`` adds one handler to the package's
logger that forwards each record (with its logger name, and its traceback when there is one)
to the matching ``pb_utils.Logger`` level: DEBUG -> verbose, INFO -> info, WARNING -> warn,
ERROR and above -> error. Verbose lines show with ``tritonserver --log-verbose 1``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ge_python_backend.triton import lifeline

PACKAGE_LOGGER = "ge_python_backend"

_lock = threading.Lock()


class TritonLogHandler(logging.Handler):
    """Forwards log records to ``pb_utils.Logger``."""

    def __init__(self, pb_utils: Any) -> None:
        super().__init__()
        self._logger = pb_utils.Logger

    def name_instance(self, instance_name: str) -> None:
        """Prefix every line with the model instance (a stub process serves one)."""
        prefix = f"[{instance_name}] " if instance_name else ""
        self.setFormatter(logging.Formatter(f"{prefix}%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if not lifeline.server_alive():  # the line would wait forever for a dead server to take it
            return
        try:
            message = self.format(record)
            if record.levelno >= logging.ERROR:
                self._logger.log_error(message)
            elif record.levelno >= logging.WARNING:
                self._logger.log_warn(message)
            elif record.levelno >= logging.INFO:
                self._logger.log_info(message)
            else:
                self._logger.log_verbose(message)
        except Exception:  # never let logging break the request path
            self.handleError(record)


def install(pb_utils: Any, instance_name: str, verbose: bool) -> TritonLogHandler:
    """Bridge the package's logger to ``pb_utils.Logger``: one handler per process, named after
    the latest instance; the level only goes down (DEBUG once any instance is ``verbose``)."""
    logger = logging.getLogger(PACKAGE_LOGGER)
    with _lock:
        handler = next((h for h in logger.handlers if isinstance(h, TritonLogHandler)), None)
        if handler is None:
            handler = TritonLogHandler(pb_utils)
            logger.addHandler(handler)
        handler.name_instance(instance_name)
        level = logging.DEBUG if verbose else logging.INFO
        if logger.level == logging.NOTSET or level < logger.level:
            logger.setLevel(level)
    return handler
