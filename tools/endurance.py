"""Hours of load with nothing growing: the endurance soak, per engine, held to its bounds.

    .venv/bin/python tools/endurance.py                          # the long run (hours): 200,000 requests,
                                                                 # 100 unload/load/reload cycles, 20 kills per engine
    .venv/bin/python tools/endurance.py --requests 6000 --cycles 3 --kills 2   # what CI runs (minutes)

Builds three models, one per kind a user serves: a linear ONNX model on engine onnxruntime, the
same model compiled to a simulated .om in the folder ``generate`` writes by default (engine
acl-sim, two instances), and a small image classifier in the classification template (hooks:
raw image bytes in, label strings out). Serves them with one tritonserver under serve's
supervisor (ops/supervised.py), with the simulator's ledger file on, and runs
``ops.endurance.run_endurance`` on each in turn: requests (10 % bad), unload/load/reload
cycles under load, stub kills under load. Prints each phase's answers and every bound
(ops/endurance.py says which), and exits 1 when any is broken.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from ge_python_backend.ops.endurance import Bounds, EndurancePlan, EnduranceReport, run_endurance
from ge_python_backend.ops.server import TritonServer
from ge_python_backend.ops.soak import ClassifierReference, OnnxReference, Reference
from ge_python_backend.ops.supervised import SupervisedServer
from ge_python_backend.ops.supervisor import RecoveryPolicy
from ge_python_backend.repository.generate import GenerateOptions, generate
from ge_python_backend.sim import LEDGER_ENV, sim_compile
from ge_python_backend.testing import models

#: engine -> the model that stands for it
MODELS = {"onnxruntime": "linear_onnxruntime", "acl-sim": "linear_acl_sim", "classification": "classifier"}
IMAGE_SIZE = 16
LABELS = tuple(f"class {i}" for i in range(10))


def build_repository(folder: Path, engines: Sequence[str] = tuple(MODELS)) -> tuple[Path, dict[str, Reference]]:
    """(model repository, model name -> its reference)."""
    repo = folder / "repo"
    linear = models.linear(folder / "linear.onnx", features=16, classes=10)
    references: dict[str, Reference] = {}
    if "onnxruntime" in engines:
        generate(linear, repo, GenerateOptions(name=MODELS["onnxruntime"]))
        references[MODELS["onnxruntime"]] = OnnxReference(linear)
    if "acl-sim" in engines:
        sim_compile(linear, folder / "linear.om", batch_gears=(1, 2, 4, 8))
        generate(folder / "linear.om", repo, GenerateOptions(name=MODELS["acl-sim"]))
        references[MODELS["acl-sim"]] = OnnxReference(linear)
    if "classification" in engines:
        classifier = models.image_classifier(folder / "classifier.onnx", size=IMAGE_SIZE, channels=(4, 8), classes=10)
        labels = folder / "labels.txt"
        labels.write_text("".join(f"{label}\n" for label in LABELS), encoding="utf-8")
        options = {"labels": str(labels), "top_k": "3"}
        generate(
            classifier,
            repo,
            GenerateOptions(name=MODELS["classification"], template="classification", template_options=options),
        )
        references[MODELS["classification"]] = ClassifierReference(classifier, LABELS, IMAGE_SIZE, 3)
    return repo, references


#: serve's policy, but a model that serves 5 s after a recovery has recovered (the kills are spaced
#: past it: each is a first failure, not one more in a row)
POLICY = RecoveryPolicy(settle_s=5.0)


def endure(
    plan: EndurancePlan,
    engines: Sequence[str] = tuple(MODELS),
    log: Callable[[str], None] = print,
    policy: RecoveryPolicy = POLICY,
    bounds: Bounds | None = None,
) -> list[EnduranceReport]:
    """Build the models, serve them supervised and run the endurance soak on each; the reports."""
    reports = []
    with tempfile.TemporaryDirectory(prefix="ge-endurance-") as scratch:
        repo, references = build_repository(Path(scratch), engines)
        ledger = Path(scratch) / "acl-sim-ledger.jsonl"
        server = TritonServer(
            repo,
            model_control_mode="explicit",
            load_models=["*"],
            front_metrics=True,
            env={LEDGER_ENV: str(ledger)},
            log_path=Path(scratch) / "tritonserver.log",
        )
        with SupervisedServer(server, policy) as served:
            log(
                f"tritonserver {server.grpc_address}: per model {plan.requests} requests ({plan.bad_share:.0%} bad, "
                f"{plan.concurrency} in flight), {plan.cycles} unload/load/reload cycles and {plan.kills} stub kills "
                f"under {plan.background} requests in flight (dead-stub budget {policy.dead_stub_budget})"
            )
            for model, reference in references.items():
                # only the simulator's stubs write the ledger
                device = model == MODELS["acl-sim"]
                model_plan = replace(
                    plan, ledger=ledger if device else None, device=device, kill_pause_s=policy.settle_s + 0.5
                )
                report = run_endurance(served, model, reference, model_plan, bounds or Bounds(), log)
                log(report.describe())
                reports.append(report)
    return reports


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = EndurancePlan()
    parser.add_argument("--requests", type=int, default=default.requests, help="requests per model (%(default)s)")
    parser.add_argument("--cycles", type=int, default=default.cycles, help="unload/load/reload cycles per model")
    parser.add_argument("--kills", type=int, default=default.kills, help="stub kills per model")
    parser.add_argument("--bad-share", type=float, default=default.bad_share, help="fraction of bad requests")
    parser.add_argument("--concurrency", type=int, default=default.concurrency, help="requests in flight")
    parser.add_argument("--engine", action="append", choices=tuple(MODELS), help="engine(s) (default: all)")
    parser.add_argument(
        "--dead-stub-budget",
        type=int,
        default=POLICY.dead_stub_budget,
        help="stubs lost before serve restarts tritonserver (%(default)s, serve's default)",
    )
    args = parser.parse_args(argv)
    plan = EndurancePlan(
        requests=args.requests,
        cycles=args.cycles,
        kills=args.kills,
        bad_share=args.bad_share,
        concurrency=args.concurrency,
    )
    reports = endure(plan, args.engine or tuple(MODELS), policy=replace(POLICY, dead_stub_budget=args.dead_stub_budget))
    return 0 if all(report.ok for report in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
