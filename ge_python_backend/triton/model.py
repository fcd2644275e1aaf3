"""GEModel: a reusable TritonPythonModel. Triton glue only.

It reads each request's tensors once, and what the request path needs of it (its id, sequence
fields, parameters and requested outputs only where a hook, sequence state, the engine or several
outputs read them), and hands the requests to the ``Runner`` (which validates, batches, runs the
engine and answers each request). Answers are returned from ``execute`` in one reply; batches of
several executes overlap across instances. Subclasses override ``preprocess`` and ``postprocess``
(per request) or ``preprocess_batch`` and ``postprocess_batch`` (per batch).
"""

from __future__ import annotations

import atexit
import json
import logging
import subprocess
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from ge_python_backend.ascend.atc import ConfigFacts
from ge_python_backend.engines import Engine, engine_info, open_engine, resolve_auto
from ge_python_backend.engines.base import RequestSettings
from ge_python_backend.engines.compile import compile_for
from ge_python_backend.engines.registry import AUTO, COMPILE_SOURCES
from ge_python_backend.errors import ConfigError, EngineError, GEError, InputError
from ge_python_backend.modelconfig.matching import compare_io, layout_problems, refine_spec
from ge_python_backend.params import Parameter
from ge_python_backend.serving.bls_errors import asks_for_code, tag_error
from ge_python_backend.serving.observers import FailureKind, Observer
from ge_python_backend.serving.requests import HOOKS, NO_INFO, Arrays, EachRequest, Request, RequestInfo
from ge_python_backend.serving.runner import Runner
from ge_python_backend.serving.sequences import SequenceStates
from ge_python_backend.specs import ModelSpec, Tensor, format_shape
from ge_python_backend.triton import capabilities, lifeline, logbridge
from ge_python_backend.triton.loading import load_or_refuse
from ge_python_backend.triton.metrics import TritonMetrics
from ge_python_backend.triton.settings import ModelSettings, auto_complete, declared_outputs, read_settings

LOG = logging.getLogger(__name__)


class GEModel:
    """Base class for Triton Python models served by a ge_python_backend engine.

    Use it directly (``class TritonPythonModel(GEModel): pass``) or override the hooks::

        class TritonPythonModel(GEModel):
            def preprocess(self, inputs, request):
                return {"x": decode(inputs["IMAGE"])}

            def postprocess(self, outputs, request):
                return {"LABEL": top1(outputs["logits"])}

    ``request.context`` carries what ``preprocess`` leaves for ``postprocess`` of the same request.
    ``preprocess_batch``/``postprocess_batch`` take the place of a side's per-request hook where
    its work is done once per batch (numpy over all the images, one BLS call).

    Subclasses may declare their own config parameters in ``extra_parameters``; their parsed
    values are in ``self.settings.extra``.
    """

    #: Config parameters a subclass accepts besides the built-in ones.
    extra_parameters: tuple[Parameter, ...] = ()
    #: The tensors clients send, for a subclass whose ``preprocess`` makes the engine's inputs, and
    #: the tensors they get, for one whose ``postprocess`` makes the answers: auto-complete writes
    #: them into a config that declares none (as PyTriton's ``inputs=``/``outputs=``).
    inputs: tuple[Tensor, ...] = ()
    outputs: tuple[Tensor, ...] = ()

    settings: ModelSettings
    engine: Engine
    runner: Runner

    # -- Triton entry points ------------------------------------------------------------

    @classmethod
    def auto_complete_config(cls, auto_complete_model_config: Any) -> Any:
        """Triton's auto-complete (run before ``initialize``, in a process of its own, unless the
        server has ``--disable-auto-complete-config``): fill ``max_batch_size``, inputs, outputs
        and ``dynamic_batching`` from the model file, with the values ``ge-triton generate``
        writes; declared values are kept, and a contradiction fails the load naming the field,
        the model's value and the config's. A class method, so the hooks a subclass overrides
        leave their side of the I/O to its config (the stub calls it on the class:
        python_backend r24.10 ``src/pb_stub.cc:499-502``)."""
        config = auto_complete_model_config.as_dict()
        name = config.get("name", "?")
        version_dir = Path(pb_utils.get_model_dir())
        try:
            cls.adapt_config(config, version_dir)
            filled = auto_complete(config, version_dir, cls.extra_parameters, cls._overridden())
            filled += cls._declared_io(config)  # after: declared inputs alone would mean max_batch_size 0
        except GEError as exc:  # what the user must fix: the message says what
            raise pb_utils.TritonModelException(f"model {name!r}: auto-complete: {exc}") from None
        except Exception as exc:  # a bug: one line for the load error, the stub logs the traceback
            raise pb_utils.TritonModelException(f"model {name!r}: auto-complete: {type(exc).__name__}: {exc}") from exc
        if filled:
            pb_utils.Logger.log_info(f"model {name!r}: auto-complete filled " + "; ".join(filled))
        return auto_complete_model_config

    def initialize(self, args: dict[str, str]) -> None:
        self._engine: Engine | None = None
        self._runner: Runner | None = None
        self.metrics: TritonMetrics | None = None
        self._watch: lifeline.ServerWatch | None = None
        self._lifeline: subprocess.Popen | None = None
        name = args.get("model_name", "?")
        with load_or_refuse(name, self._release):
            capabilities.check_apis(pb_utils)  # before anything calls them
            logbridge.install(pb_utils, args.get("model_instance_name", ""), verbose=_wants_verbose(args))
            self.settings = read_settings(self._adapted(args), self.extra_parameters)
            self._open()
        if lifeline.in_stub():  # never outlive the server (lifeline.py says why a stub could)
            self._watch = lifeline.ServerWatch(self._abandon)
            self._lifeline = lifeline.start_lifeline()
        self.log_info(
            f"{self.settings.instance_name}: {self.engine.describe()}, device {self.settings.device_id}, "
            f"max_batch_size {self.settings.max_batch_size}; answers "
            + "returned from execute"
            + "; runs "
            + "; ".join(p.describe() for p in self.runner.profiles)
        )

    def execute(self, requests: list) -> list:
        """Hand the requests to the runner and return their answers, one IPC message for the whole
        batch (response senders were measured to serve no more on a shared NPU and lose requests when a
        stub dies: docs/reliability.md)."""
        responses: list = [None] * len(requests)
        readable = []
        # the hot path: a plain request (no field read, or only parameters it has none of) costs its
        # tensors, a shared NO_INFO and its answer's callback; anything else takes _info/_padding
        full_info = self._reads_sequence or self._reads_requested
        parameters = self._reads_parameters
        padding = self.settings.sequence_batching
        for index, request in enumerate(requests):
            respond = partial(_respond_into, responses, index, request)
            if full_info:
                info = self._info(request, request.parameters() if parameters else "")
            elif parameters and (given := request.parameters()) and given != "{}":
                info = self._info(request, given)
            else:
                info = NO_INFO
            try:
                inputs = {t.name(): t.as_numpy() for t in request.inputs()}
            except Exception as exc:  # e.g. BF16 tensors have no numpy view
                respond(None, InputError(f"could not read the request's inputs: {exc}"))
                continue
            if padding and self._padding(info, inputs):
                respond({}, None)  # an empty response: Triton discards a padding slot's answer
                continue
            readable.append(Request(info, inputs, respond))
        if self.settings.log_verbosity >= 1:
            pb_utils.Logger.log_verbose(f"{self.settings.instance_name}: {len(requests)} request(s)")
        self.runner.submit(readable, wait=True)
        return responses

    def is_ready(self) -> bool:
        """Asked by Triton r26.03 and later on ``/v2/models/<model>/ready``: False once a fatal engine
        failure took the model out of service, so load balancers stop sending to this instance.
        Earlier versions never ask; there each request gets 503 and ``ge_engine_healthy`` is 0."""
        runner = self._runner
        return runner is not None and runner.out_of_service is None

    def finalize(self) -> None:
        self._release()
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        lifeline.stop_lifeline(self._lifeline)
        self._lifeline = None

    # -- hooks for subclasses -----------------------------------------------------------

    @classmethod
    def adapt_config(cls, config: dict[str, Any], version_dir: Path) -> list[str]:
        """Turn a model config written for another backend into this one's (in place), before
        anything reads it; returns what it did, one line each. Default: nothing. Only the
        parameters may change: they do not survive auto-complete (CORE r24.10
        ``backend_model.cc:741-793``), so the server's copy keeps the user's."""
        return []

    def preprocess(self, inputs: dict[str, np.ndarray], request: RequestInfo) -> Mapping[str, np.ndarray]:
        """Turn one request's input tensors into the engine's inputs. Default: unchanged.

        Raise ``InputError`` to refuse the request with a clear message (Triton INVALID_ARG).
        What ``postprocess`` needs to know of this request goes in ``request.context``.
        """
        return inputs

    def postprocess(self, outputs: dict[str, np.ndarray], request: RequestInfo) -> Mapping[str, np.ndarray]:
        """Turn one request's slice of the engine's outputs into its response tensors.

        Default: unchanged. May run on a slot's worker thread: keep it thread-safe.
        """
        return outputs

    def preprocess_batch(
        self, inputs: list[dict[str, np.ndarray]], requests: list[RequestInfo]
    ) -> Sequence[Mapping[str, np.ndarray] | Exception]:
        """The requests of one ``execute`` at once: each one's input tensors -> its engine inputs,
        or the exception that refuses it alone (``InputError``: the client's fault), one per
        request, in order. Raising fails them all. Default: ``preprocess`` on each request."""
        return EachRequest(self.preprocess)(inputs, requests)  # type: ignore[return-value]

    def postprocess_batch(
        self, outputs: list[dict[str, np.ndarray]], requests: list[RequestInfo]
    ) -> Sequence[Mapping[str, np.ndarray] | Exception]:
        """The requests one engine batch answers (a request split between batches comes with its
        last), at once: each one's rows of the engine's outputs -> its response tensors, or the
        exception that fails it alone, one per request, in order. Raising fails them all. Runs on
        a slot's worker thread, beside other batches' calls: keep it thread-safe. Default:
        ``postprocess`` on each request."""
        return EachRequest(self.postprocess)(outputs, requests)  # type: ignore[return-value]

    # -- helpers ------------------------------------------------------------------------

    def log_info(self, message: str) -> None:
        pb_utils.Logger.log_info(message)

    def log_warn(self, message: str) -> None:
        pb_utils.Logger.log_warn(message)

    def log_error(self, message: str) -> None:
        pb_utils.Logger.log_error(message)

    def _adapted(self, args: dict[str, str]) -> dict[str, str]:
        """``args`` with the model config through ``adapt_config`` (its lines logged)."""
        try:
            config = json.loads(args["model_config"])
        except (KeyError, json.JSONDecodeError):
            return args  # read_settings says what is wrong
        version_dir = Path(args.get("model_repository", ".")) / args.get("model_version", "1")
        for line in self.adapt_config(config, version_dir):
            self.log_info(f"{args.get('model_instance_name', config.get('name', '?'))}: {line}")
        return dict(args, model_config=json.dumps(config))

    def _engine_options(self) -> dict[str, Any]:
        """The config's engine parameters; device timing events only when metrics report them."""
        options = dict(self.settings.engine_options)
        options.setdefault("acl_timing_events", self.settings.metrics)
        return options

    def _open(self) -> None:
        settings = self.settings
        if settings.engine == AUTO:
            info = resolve_auto(
                settings.version_dir,
                lambda line: self.log_info(f"{settings.instance_name}: {line}"),
                settings.model_file,
                settings.engine_options,
            )
        else:
            info = engine_info(settings.engine)
        path, compiled = info.model_source(settings.version_dir, settings.model_file)
        if not path.is_file():
            problem = "is a directory, not a file" if path.is_dir() else "does not exist"
            sources = f", nor {' or '.join(COMPILE_SOURCES)} to compile" if info.atc and not settings.model_file else ""
            raise ConfigError(f"model file {path} {problem} (parameter model_file, engine {info.name}){sources}")
        if compiled:
            facts = ConfigFacts.from_json(settings.config, "the model config", served=True)
            instance = settings.instance_name
            path = compile_for(
                info,
                path,
                facts,
                settings.engine_options,
                lambda line: self.log_info(f"{instance}: {line}"),
                settings.version_dir,
            )
        try:
            self.engine = self._engine = open_engine(
                info.name,
                path,
                device_id=settings.device_id,
                slots=settings.slots,
                options=self._engine_options(),
                peers=settings.instances_on_device,
                version_dir=settings.version_dir,
            )
        except GEError as exc:
            if not compiled:
                raise
            raise EngineError(
                f"{exc} (the model was compiled at load into {path.parent}: if that file is damaged, delete the "
                "folder and the next load compiles it again)"
            ) from None
        settings.layout.check(self.engine.spec)  # names the state/unbatched tensors the model lacks
        spec = refine_spec(
            self.engine.spec, settings.inputs, settings.outputs, batching=settings.batching, layout=settings.layout
        )
        self._check_io(spec)
        hooked = bool(self._hooks())
        self._reads_sequence = hooked or settings.sequence_batching or bool(settings.sequence_state)
        self._reads_requested = hooked or len(settings.outputs) > 1
        self._reads_parameters = hooked or self.engine.request_settings is not RequestSettings.NONE
        if settings.metrics:
            npu = engine_info(self.engine.name).npu
            self.metrics = TritonMetrics(
                pb_utils,
                {"model": settings.model_name, "version": settings.model_version, "instance": settings.instance_name},
                device_memory=self.engine.device_memory if npu else None,
                device=str(settings.device_id),
            )
        self.runner = self._runner = Runner(
            self.engine,
            batching=settings.batching,
            max_batch_size=settings.max_batch_size,
            outputs=declared_outputs(settings.config),
            # the default hooks change nothing: the runner skips them (and the dict copies they get)
            **self._hooks(),
            layout=settings.layout,
            sequences=self._sequence_states(),
            reject_nonfinite=settings.reject_nonfinite,
            observers=self._observers(),
            spec=spec,
        )

    def _observers(self) -> list[Observer]:
        observers: list[Observer] = [self.metrics] if self.metrics is not None else []
        if self.settings.log_verbosity >= 2:
            observers.append(_VerboseLog(self.settings.instance_name))
        return observers

    def _sequence_states(self) -> SequenceStates | None:
        settings = self.settings
        if not settings.sequence_state:
            return None
        initial = {}
        axis = settings.sequence_state_batch_axis
        for pair in settings.sequence_state:  # names and ranks already checked by the layout
            tensor = self.engine.spec.input(pair.input)
            shape = list(tensor.shape)
            shape[axis] = 1
            if any(d < 0 for d in shape):
                raise ConfigError(
                    f"state input {pair.input!r} has shape {format_shape(tensor.shape)}: every axis but the batch "
                    f"axis ({axis}) must be fixed to build its initial value"
                )
            value = settings.sequence_state_initial.get(pair.input, 0.0)
            initial[pair.input] = np.full(shape, value, dtype=tensor.numpy_dtype)
        return SequenceStates(settings.sequence_state, initial, settings.sequence_idle_timeout)

    @classmethod
    def _declared_io(cls, config: dict[str, Any]) -> list[str]:
        """The class's ``inputs``/``outputs`` written into ``config`` (Triton's JSON form) where
        it has none and the hook that makes that side is overridden; one line each."""
        filled = []
        overridden = cls._overridden()
        for side, hook, tensors in (("input", "preprocess", cls.inputs), ("output", "postprocess", cls.outputs)):
            if tensors and hook in overridden and not config.get(side):
                config[side] = [tensor.config_entry() for tensor in tensors]
                filled.append(f"{side}s {', '.join(t.name for t in tensors)} as the class declares them")
        return filled

    @classmethod
    def _overridden(cls) -> frozenset[str]:
        """The sides of the model (``preprocess``: the engine's inputs, ``postprocess``: the
        answers) a hook of this class makes, per request or per batch."""
        return frozenset(
            side
            for side, names in HOOKS.items()
            if any(getattr(cls, name) is not getattr(GEModel, name) for name in names)
        )

    def _hooks(self) -> dict[str, Any]:
        """The runner's hooks: per side, the batch hook where the class (or this instance) sets
        one, else the per-request hook where it sets that; none where the defaults change nothing."""
        hooks: dict[str, Any] = {}
        for each, batch in HOOKS.values():
            for name in (batch, each):
                if getattr(type(self), name) is not getattr(GEModel, name) or name in vars(self):
                    hooks[name] = getattr(self, name)
                    break
        return hooks

    def _check_io(self, spec: ModelSpec) -> None:
        """Without hooks, the config must describe the model's own tensors (state tensors are
        the model's business, not the client's), and a batching config must fit where the model
        keeps each tensor's batch."""
        settings = self.settings
        overridden = self._overridden()
        for side, hook, declared in (
            ("input", "preprocess", settings.inputs),
            ("output", "postprocess", settings.outputs),
        ):
            if hook in overridden and not declared:
                raise ConfigError(
                    f"{type(self).__name__} overrides {hook}, so the config must declare the {side}s clients "
                    f"{'send' if side == 'input' else 'get'}, and it declares none: add them to config.pbtxt "
                    f'({side} {{ name: "..." data_type: TYPE_... dims: [...] }}), or declare them on the class '
                    f'({side}s = (Tensor("NAME", "FP32", (dims,)),), from ge_python_backend import Tensor) for '
                    "auto-complete to write"
                )
        states = frozenset(name for pair in settings.sequence_state for name in (pair.input, pair.output))
        problems = compare_io(
            spec,
            settings.inputs,
            settings.outputs,
            batching=settings.batching,
            layout=settings.layout,
            states=states,
            overrides=overridden,
        )
        problems += layout_problems(spec, settings.layout, max_batch_size=settings.max_batch_size)
        if problems:
            raise ConfigError("; ".join(problems))

    def _info(self, request: Any, parameters: str) -> RequestInfo:
        """What the request path and the hooks know of a request (``parameters``: its JSON, "" when
        nothing reads them). Fields nobody reads are not fetched from Triton (the hot path):
        correlation ID and flags serve sequences and hooks, the requested outputs a model with
        several outputs or hooks, the parameters hooks and an engine with settings per request
        (``execute`` gives a plain model's requests, and those without parameters to an engine that
        reads only them, the shared ``NO_INFO`` without calling this)."""
        return RequestInfo(
            request.request_id(),
            request.correlation_id() if self._reads_sequence else 0,
            request.flags() if self._reads_sequence else 0,
            {} if not parameters or parameters == "{}" else json.loads(parameters),
            tuple(request.requested_output_names()) if self._reads_requested else (),
        )

    def _padding(self, info: RequestInfo, inputs: Mapping[str, np.ndarray]) -> bool:
        """A slot the direct sequence batcher fills without a request: READY false, correlation
        ID 0, inputs copied uninitialised from another request (core r24.10
        sequence_batch_scheduler.cc:1738-1767, infer_request.cc:604-611). Triton's sequence
        batcher refuses a real request without a correlation ID ("must specify a non-zero or non-empty
        correlation ID", SequenceBatchScheduler::Enqueue), so ID 0 marks one too."""
        ready = self.settings.ready_control
        if ready is not None and ready.name in inputs and not ready.ready(inputs[ready.name]):
            return True
        return info.correlation_id in (0, "")

    def _abandon(self) -> None:
        """The server is gone (on the server watch's thread): let the batches in flight finish,
        close the engine and run the exit functions (pyACL's finalize); send nothing to the server,
        so the metrics are left as they are. The engine stays open when a batch still runs."""
        runner = self._runner
        if runner is not None and not runner.close(timeout=lifeline.RELEASE_TIMEOUT / 2):
            return
        if self._engine is not None:
            self._engine.close()
        atexit._run_exitfuncs()  # what a normal interpreter exit runs: pyACL's finalize (engines/acl/runtime.py)

    def _release(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None


class _VerboseLog(Observer):
    """Per-batch verbose log lines (parameter log_verbosity 2; tritonserver --log-verbose >= 1)."""

    def __init__(self, instance_name: str) -> None:
        self._name = instance_name

    def batch(self, rows: int, padding: int) -> None:
        pb_utils.Logger.log_verbose(f"{self._name}: ran a batch of {rows} row(s) + {padding} padding")

    def failure(self, kind: FailureKind) -> None:
        pb_utils.Logger.log_verbose(f"{self._name}: a request failed ({kind})")


def _wants_verbose(args: Mapping[str, str]) -> bool:
    """Parameter log_verbosity >= 1 (read before the settings, so their own errors are logged)."""
    try:
        parameters = json.loads(args.get("model_config", "{}")).get("parameters", {})
        return int(parameters.get("log_verbosity", {}).get("string_value", "0")) >= 1
    except (ValueError, TypeError, AttributeError):
        return False


def _response(outputs: Arrays | None, error: GEError | None, request: Any) -> Any:
    if error is None:
        assert outputs is not None  # Respond passes outputs or an error
        return pb_utils.InferenceResponse([pb_utils.Tensor(name, array) for name, array in outputs.items()])
    return _error_response(error, request)


def _error_response(error: GEError, request: Any) -> Any:
    """``request``'s answer when it failed: one line, with its Triton code (INVALID_ARG for the
    client's fault, UNAVAILABLE out of service, else INTERNAL), tagged for a router that asks."""
    if isinstance(error, InputError):
        code = "INVALID_ARG"
    elif isinstance(error, EngineError) and error.fatal:  # out of service: another instance may serve it
        code = "UNAVAILABLE"
    else:
        code = "INTERNAL"
    message = str(error)
    if asks_for_code(request.parameters()):  # a router forwarded it: BLS would lose the code (bls_errors.py)
        message = tag_error(code, message)
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, getattr(pb_utils.TritonError, code)))


def _respond_into(responses: list, index: int, request: Any, outputs: Arrays | None, error: GEError | None) -> None:
    """``Respond`` for answers returned from execute (the hot path: the response built right here)."""
    if error is None:
        responses[index] = pb_utils.InferenceResponse(list(map(pb_utils.Tensor, outputs, outputs.values())))  # type: ignore[arg-type, union-attr]
    else:
        responses[index] = _error_response(error, request)
