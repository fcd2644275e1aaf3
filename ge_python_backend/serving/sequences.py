"""Per-sequence state for stateful models under Triton's sequence batcher.

A state pair ``input=output`` feeds a model input from the output of the same sequence's
previous step. ``SequenceStates`` keeps one set of state tensors per correlation ID: the
initial value (zeros by default) on a request flagged START, the stored value on later steps,
dropped on END and after an idle timeout (``Runner`` runs a timer for it). Nothing here knows
Triton: flags use Triton's bit values (START=1, END=2).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ge_python_backend.errors import ConfigError, InputError

SEQUENCE_START = 1
SEQUENCE_END = 2
#: failed sequences whose failure the next step's error names (the oldest are forgotten first)
FAILURES_REMEMBERED = 4096


@dataclass(frozen=True)
class StatePair:
    """Model input ``input`` takes the previous step's model output ``output``."""

    input: str
    output: str


def _name_value_pairs(text: str, what: str) -> list[tuple[str, str]]:
    """``"a=b, c=d"`` -> [("a", "b"), ("c", "d")]; ``what`` describes an item for errors."""
    pairs = []
    for item in text.split(","):
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not name or not value:
            raise ValueError(f"{item.strip()!r} is not {what}")
        pairs.append((name, value))
    return pairs


def parse_state_pairs(text: str) -> tuple[StatePair, ...]:
    """``"h_in=h_out,c_in=c_out"`` -> state pairs."""
    return tuple(StatePair(name, value) for name, value in _name_value_pairs(text, "input_name=output_name"))


def parse_initial_values(text: str) -> dict[str, float]:
    """``"h_in=0,c_in=0.5"`` -> constant initial value per state input."""
    return {name: float(value) for name, value in _name_value_pairs(text, "input_name=number")}


class SequenceStates:
    """State tensors per correlation ID. Thread-safe."""

    def __init__(
        self,
        pairs: tuple[StatePair, ...],
        initial: Mapping[str, np.ndarray],
        idle_timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        missing = [p.input for p in pairs if p.input not in initial]
        if missing:
            raise ConfigError(f"no initial value for state input {missing[0]!r}")
        self.pairs = pairs
        self._initial = {name: np.array(value) for name, value in initial.items()}
        self._idle_timeout = idle_timeout
        self._clock = clock
        self._states: dict[int | str, tuple[dict[str, np.ndarray], float]] = {}
        #: why recent sequences lost their state (a failed step), for their next step's error
        self._failed: dict[int | str, str] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._states)

    def inject(self, correlation_id: int | str, flags: int, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``inputs`` plus this sequence's state inputs for its next step."""
        if correlation_id in (0, ""):
            raise InputError("the request carries no sequence correlation ID; a stateful model needs one")
        if flags & SEQUENCE_START:
            state = self._initial  # read only: the runner copies it into the engine's buffers
            if self._failed:
                with self._lock:
                    self._failed.pop(correlation_id, None)
        else:
            with self._lock:
                entry = self._states.get(correlation_id)
                if entry is None:
                    failed = self._failed.get(correlation_id)
                    raise InputError(
                        f"sequence {correlation_id!r} has no state: "
                        + (
                            f"its previous step failed ({failed}); start it again with the START flag"
                            if failed is not None
                            else "its first request must carry the START flag, or the sequence was ended or idle "
                            "too long"
                        )
                    )
                state = entry[0]
                self._states[correlation_id] = (state, self._clock())
        return {**inputs, **state}

    def capture(self, correlation_id: int | str, flags: int, outputs: Mapping[str, np.ndarray]) -> None:
        """Keep this step's state outputs for the next step (or drop the sequence on END)."""
        with self._lock:
            if flags & SEQUENCE_END:
                self._states.pop(correlation_id, None)
                return
            self._states[correlation_id] = (
                {pair.input: np.array(outputs[pair.output], copy=True) for pair in self.pairs},
                self._clock(),
            )

    def forget(self, correlation_id: int | str, reason: str) -> None:
        """Drop a sequence whose step failed because of ``reason``: its next request must start over,
        and its error says why (for the last ``FAILURES_REMEMBERED`` failed sequences)."""
        with self._lock:
            self._states.pop(correlation_id, None)
            self._failed.pop(correlation_id, None)
            self._failed[correlation_id] = reason
            while len(self._failed) > FAILURES_REMEMBERED:
                del self._failed[next(iter(self._failed))]

    def until_expiry(self) -> float | None:
        """Seconds until the longest-idle sequence's state expires (0 when it has), or None
        without sequences."""
        with self._lock:
            if not self._states:
                return None
            oldest = min(seen for _, seen in self._states.values())
        return max(oldest + self._idle_timeout - self._clock(), 0.0)

    @property
    def idle_timeout(self) -> float:
        return self._idle_timeout

    def expire(self) -> int:
        """Drop sequences idle longer than the timeout; return how many were dropped."""
        now = self._clock()
        with self._lock:
            stale = [cid for cid, (_, seen) in self._states.items() if now - seen > self._idle_timeout]
            for cid in stale:
                del self._states[cid]
        return len(stale)
