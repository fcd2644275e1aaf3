"""A one-line progress bar on stderr (no dependency)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``update(done, note)`` redraws ``[#####.....]  45%  note`` at most ``hz`` times a second;
    ``close()`` ends the line. Silent when ``enabled`` is False."""

    def __init__(
        self, total: float, *, width: int = 30, stream: TextIO | None = None, enabled: bool = True, hz: float = 4.0
    ):
        self.total = max(total, 1e-9)
        self.width = width
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self._interval = 1.0 / hz
        self._last = 0.0
        self._shown = False

    def render(self, done: float, note: str = "") -> str:
        fraction = min(max(done / self.total, 0.0), 1.0)
        filled = int(round(fraction * self.width))
        return f"[{'#' * filled}{'.' * (self.width - filled)}] {fraction * 100:3.0f}%  {note}"

    def update(self, done: float, note: str = "", *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < self._interval:
            return
        self._last = now
        self.stream.write("\r" + self.render(done, note).ljust(self.width + 60)[: self.width + 80])
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self.enabled and self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False
