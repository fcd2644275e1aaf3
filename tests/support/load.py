"""Client threads that keep one served model busy and record every answer, checked against an
independent reference (ONNX Runtime called directly): for the tests that kill, hang or break a
model under load (test_stub_death.py, test_self_healing.py)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from ge_python_backend.ops.processes import stubs_of

THREADS = 16
CLIENT_TIMEOUT_S = 30.0
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)

#: rng -> (inputs, expected outputs)
Requests = Callable[[np.random.Generator], tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]


def linear_requests(onnx_file: Path) -> Requests:
    """Random [1..4, 4] FP32 rows for tests.support's linear model; expected: its probs."""
    session = ort.InferenceSession(str(onnx_file))

    def make(rng: np.random.Generator):
        x = rng.standard_normal((int(rng.integers(1, 5)), 4)).astype(np.float32)
        return {"x": x}, {"probs": session.run(None, {"x": x})[1]}

    return make


def classifier_requests(onnx_file: Path, size: int, labels: tuple[str, ...]) -> Requests:
    """Random raw RGB images for the classification template (top 3); expected: the labels of the
    3 largest logits of the ONNX model on the normalised images, computed here."""
    session = ort.InferenceSession(str(onnx_file))

    def make(rng: np.random.Generator):
        images = rng.integers(0, 256, (int(rng.integers(1, 4)), size, size, 3), dtype=np.uint8)
        normalised = ((images.astype(np.float32) / 255 - MEAN) / STD).transpose(0, 3, 1, 2)
        (logits,) = session.run(None, {"image": np.ascontiguousarray(normalised)})
        order = np.argsort(-logits, axis=1, kind="stable")[:, :3]
        expected = np.array([[labels[i].encode() for i in row] for row in order], dtype=np.object_)
        return {"IMAGE": np.array([[i.tobytes()] for i in images], dtype=np.object_)}, {"LABELS": expected}

    return make


@dataclass
class Load:
    """THREADS clients sending requests to ``model`` on ``http_address`` until stopped."""

    http_address: str
    model: str
    requests: Requests
    #: (sent, answered, outcome): "ok", "wrong", "error: <message>" or "no answer: <exception>"
    records: list[tuple[float, float, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    #: where the last lines of the server's log come from when an expectation fails
    log_tail: Callable[[], str] = lambda: ""

    def __enter__(self) -> Load:
        self.threads = [threading.Thread(target=self._run, args=(seed,)) for seed in range(THREADS)]
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def _run(self, seed: int) -> None:
        with contextlib.closing(
            httpclient.InferenceServerClient(self.http_address, network_timeout=CLIENT_TIMEOUT_S)
        ) as client:
            self._send(client, seed)

    def _send(self, client: httpclient.InferenceServerClient, seed: int) -> None:
        rng = np.random.default_rng(seed)
        while not self.stop.is_set():
            inputs, expected = self.requests(rng)
            tensors = []
            for name, value in inputs.items():
                tensor = httpclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
                tensor.set_data_from_numpy(value)
                tensors.append(tensor)
            sent = time.monotonic()
            try:
                result = client.infer(self.model, tensors)
                right = all(_same(result.as_numpy(name), want) for name, want in expected.items())
                outcome = "ok" if right else "wrong"
            except InferenceServerException as exc:
                outcome = f"error: {exc.message()}"
            except TimeoutError:  # the client's own deadline: a request never answered
                self.records.append((sent, time.monotonic(), "no answer: TimeoutError"))
                return
            except Exception as exc:  # the server closed or refused the connection (it died): answered, with an error
                outcome = f"error: connection: {type(exc).__name__}"
                time.sleep(0.05)
            self.records.append((sent, time.monotonic(), outcome))

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.records if r[2].startswith(outcome))

    def wait_for(self, outcome: str, count: int = 1, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.count(outcome) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        # the server's own last lines say why when it is tritonserver that went away
        assert self.count(outcome) >= count, (outcome, self.outcomes(), self.log_tail())

    def outcomes(self) -> set[str]:
        return {r[2] for r in self.records}

    def unanswered_or_wrong(self) -> list[tuple[float, float, str]]:
        return [r for r in self.records if r[2].startswith("no answer") or r[2] == "wrong"]

    def healed_after(self, since: float) -> float | None:
        """Seconds after ``since`` from which every request sent succeeded; None if the last failed."""
        failed = [r[0] for r in self.records if r[2] != "ok" and r[0] >= since]
        if not failed:
            return 0.0
        later = [r[0] for r in self.records if r[0] > max(failed)]
        return min(later) - since if later else None


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    if want.dtype == np.object_:
        return got.tolist() == want.tolist()
    return got.shape == want.shape and bool(np.allclose(got, want, atol=1e-5))


def stub_pids(server_pid: int, model: str) -> list[int]:
    """The stubs of ``server_pid`` that serve ``model``."""
    return [stub.pid for stub in stubs_of(server_pid) if stub.model == model]
