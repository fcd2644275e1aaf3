"""Gather + pad + scatter (ge_python_backend.serving.batching) against a plain memcpy of the same bytes.

Requests of FP32 3x224x224 (batch 1 each) are planned into one engine batch, gathered into a
reused input buffer (zeroing any padding rows) and the batch's outputs (FP32 x1000) scattered
back per request, as the runner does for every batch. The reference is one ``np.copyto`` of a
contiguous array holding exactly the requests' bytes into a reused buffer. Medians of
alternating blocks of both; in-process, no server.
"""

from __future__ import annotations

import time

import numpy as np

from tools.bench.runner import Bench, Ratio, Report, Table, ratio_table

SUMMARY = "gather + pad + scatter of a batch against a memcpy of the same bytes (in-process)"
SHAPE = (3, 224, 224)
CLASSES = 1000


def add_arguments(parser) -> None:
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per case")


def paired_medians(first, second, seconds: float, inner: int = 20) -> tuple[float, float]:
    """Median time of one call of ``first`` and of ``second``, measured in alternating blocks of
    ``inner`` calls for about ``seconds`` (so drift and neighbours' load hit both alike)."""
    for _ in range(inner):
        first()
        second()
    blocks: tuple[list[float], list[float]] = ([], [])
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(blocks[0]) < 5:
        for call, times in zip((first, second), blocks):
            started = time.perf_counter()
            for _ in range(inner):
                call()
            times.append((time.perf_counter() - started) / inner)
    return float(np.median(blocks[0])), float(np.median(blocks[1]))


def case(
    requests: int,
    gears: tuple[int, ...],
    seconds: float,
    shape: tuple[int, ...] = SHAPE,
    dtype: str = "float32",
    scatter_outputs: bool = True,
) -> dict[str, float]:
    """``requests`` batch-1 requests of ``shape`` planned into one engine batch and gathered into
    a reused slot buffer (and, with ``scatter_outputs``, a 1000-class output scattered back),
    against one memcpy of the requests' bytes; also the bandwidths of both (GB/s of request bytes)."""
    from ge_python_backend.serving.batching import Profile, gather, plan_group, scatter

    rng = np.random.default_rng(requests)
    items = [{"image": (rng.random((1,) + shape) * 200).astype(dtype)} for _ in range(requests)]
    profile = Profile(gears, max(gears), {"image": shape})
    (chunk,) = plan_group(list(range(requests)), [1] * requests, {"image": shape}, profile)
    buffer = {"image": np.empty(chunk.shapes["image"], dtype)}
    outputs = {"logits": rng.standard_normal((chunk.shapes["image"][0], CLASSES)).astype(np.float32)}

    def gather_pad_scatter() -> None:
        (planned,) = plan_group(list(range(requests)), [1] * requests, {"image": shape}, profile)
        gather(planned, items, buffer)
        if scatter_outputs:
            scatter(planned, outputs)

    source = np.concatenate([item["image"] for item in items])
    target = np.empty_like(source)
    memcpy, ours = paired_medians(lambda: np.copyto(target, source), gather_pad_scatter, seconds)
    gathered = np.concatenate([item["image"] for item in items])
    gather_pad_scatter()
    assert np.array_equal(buffer["image"][:requests], gathered) and not buffer["image"][requests:].any()
    return {
        "requests": requests,
        "batch": chunk.shapes["image"][0],
        "bytes": source.nbytes,
        "memcpy_ms": memcpy * 1000,
        "gather_pad_scatter_ms": ours * 1000,
        "ratio": ours / memcpy,
        "memcpy_gb_per_s": source.nbytes / memcpy / 1e9,
        "gather_gb_per_s": source.nbytes / ours / 1e9,
    }


def case_header(what: str) -> tuple[str, ...]:
    """The columns of ``case_cells``; ``what``: what was timed against the memcpy."""
    return ("MB", "memcpy ms", f"{what} ms", "ratio", "memcpy GB/s", f"{what} GB/s")


def case_cells(c: dict[str, float]) -> list[str]:
    """A case's bytes, times, ratio and bandwidths, as table cells."""
    return [
        f"{c['bytes'] / 1e6:.2f}",
        f"{c['memcpy_ms']:.3f}",
        f"{c['gather_pad_scatter_ms']:.3f}",
        f"{c['ratio']:.2f}",
        f"{c['memcpy_gb_per_s']:.1f}",
        f"{c['gather_gb_per_s']:.1f}",
    ]


def run(bench: Bench) -> Report:
    seconds = bench.args.seconds
    cases = []
    for requests, gears in ((8, (1, 2, 4, 8)), (7, (1, 2, 4, 8)), (5, (8,))):
        bench.quiet(f"{requests} requests")
        cases.append(case(requests, gears, seconds))
    rows = [[str(c["requests"]), str(c["batch"]), *case_cells(c)] for c in cases]
    header = ("requests", "engine batch", *case_header("gather+pad+scatter"))
    ratios = [
        Ratio("gather+pad+scatter / memcpy, 8 requests -> batch 8", [cases[0]["ratio"]], 1.5, False),
        Ratio("gather+pad+scatter / memcpy, 7 requests -> batch 8 (1 row padded)", [cases[1]["ratio"]]),
        Ratio("gather+pad+scatter / memcpy, 5 requests -> batch 8 (3 rows padded)", [cases[2]["ratio"]]),
    ]
    return Report(
        summary=ratio_table(ratios, "ratios"),
        tables=[Table("per case (medians of alternating blocks):", header, rows)],
        data={"cases": cases},
    )
