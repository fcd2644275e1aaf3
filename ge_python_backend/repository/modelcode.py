"""What a model folder's model.py declares, read with ``ast`` (never imported or run).

Conservative on purpose: when the file does something the reader cannot follow, the answer is
"unknown" (hooks count as overridden, extra parameters as unreadable, a parser of its own as one
that takes any value), so a check built on it never reports a false error.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ge_python_backend.params import Parameter
from ge_python_backend.serving.requests import HOOKS

_PACKAGE = "ge_python_backend"
#: The base class of a pipeline step (ge_python_backend.triton.step)
STEP_CLASS = "PipelineStep"


@dataclass(frozen=True)
class ModelCode:
    """``uses_package``: the file imports ge_python_backend. ``overrides``: the sides its hooks
    make (``preprocess``: the engine's inputs, ``postprocess``: the answers; by a per-request or a
    batch hook; all of them when unknown, e.g. when TritonPythonModel does not derive from GEModel directly).
    ``extra_parameters``: its declared parameters, None when they cannot be read statically.
    ``problem``: why Triton could not load the file. ``imported``: the names it imports from
    ge_python_backend (``ImageClassifier`` tells ``check`` to run the classifier's checks).
    ``step``: its class is a ``PipelineStep`` (no model file, no engine: only generic checks).
    ``auto_completes``: its class is GEModel's own auto-complete (it derives from GEModel and
    does not define ``auto_complete_config``), so the server completes the config with it.
    ``router``: its class derives from RouterModel (``triton/router.py``)."""

    path: Path
    uses_package: bool
    overrides: frozenset[str]
    extra_parameters: tuple[Parameter, ...] | None
    problem: str | None = None
    imported: frozenset[str] = frozenset()
    auto_completes: bool = False
    #: a pipeline step (``triton.step.PipelineStep``): a Python model without an engine of its own
    step: bool = False
    router: bool = False


def read_model_code(path: Path) -> ModelCode:
    path = Path(path)
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        return _unknown(path, False, f"line {exc.lineno}: SyntaxError: {exc.msg}")
    except (OSError, ValueError) as exc:
        return _unknown(path, False, f"cannot read it: {exc}")
    uses_package = _uses_package(tree)
    model_class = _model_class(tree)
    if model_class is None:
        if any(_assigned(node, "TritonPythonModel") is not None for node in tree.body):
            return _unknown(path, uses_package)
        return _unknown(path, uses_package, "defines no class TritonPythonModel, which Triton's Python backend loads")
    if any(_last_name(base) == STEP_CLASS for base in model_class.bases):
        return ModelCode(path, False, frozenset(), (), imported=frozenset(_imported(tree)), step=True)
    if any(_last_name(base) == "RouterModel" for base in model_class.bases):
        return ModelCode(path, uses_package, frozenset(), (), router=True)
    if not any(_last_name(base) == "GEModel" for base in model_class.bases):
        return _unknown(path, uses_package)
    methods = {node.name for node in model_class.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    declared = [value for node in model_class.body if (value := _assigned(node, "extra_parameters")) is not None]
    extras: tuple[Parameter, ...] | None = ()
    if declared:
        extras = _extra_parameters(declared[-1], _package_imports(tree))
    imported = frozenset(_imported(tree))
    completes = "auto_complete_config" not in methods
    sides = frozenset(side for side, names in HOOKS.items() if methods.intersection(names))
    return ModelCode(path, uses_package, sides, extras, imported=imported, auto_completes=completes)


def _imported(tree: ast.Module) -> list[str]:
    return [attribute for _, attribute in _package_imports(tree).values()]


def _unknown(path: Path, uses_package: bool, problem: str | None = None) -> ModelCode:
    return ModelCode(path, uses_package, frozenset(HOOKS), None, problem)


def _uses_package(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == _PACKAGE:
            return True
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == _PACKAGE for a in node.names):
            return True
    return False


def _model_class(tree: ast.Module) -> ast.ClassDef | None:
    found = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "TritonPythonModel"]
    return found[-1] if found else None


def _assigned(node: ast.stmt, name: str) -> ast.expr | None:
    """The value ``node`` assigns to ``name`` (``name = ...`` or ``name: T = ...``); None if it assigns none."""
    if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
        return node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
        return node.value
    return None


def _last_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _package_imports(tree: ast.Module) -> dict[str, tuple[str, str]]:
    """Local name -> (module, attribute) for ``from ge_python_backend... import x [as y]``."""
    names: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.split(".")[0] == _PACKAGE
        ):
            for alias in node.names:
                names[alias.asname or alias.name] = (node.module, alias.name)
    return names


def _extra_parameters(value: ast.expr, imports: dict[str, tuple[str, str]]) -> tuple[Parameter, ...] | None:
    """Parameters from a tuple/list of ``Parameter("name", ...)`` calls and starred or plain
    names imported from ge_python_backend; None for anything else."""
    if isinstance(value, ast.Name):
        return _imported_parameters(value.id, imports)
    if not isinstance(value, (ast.Tuple, ast.List)):
        return None
    found: list[Parameter] = []
    for element in value.elts:
        if isinstance(element, ast.Starred) and isinstance(element.value, ast.Name):
            imported = _imported_parameters(element.value.id, imports)
            if imported is None:
                return None
            found.extend(imported)
        elif (
            isinstance(element, ast.Call)
            and _last_name(element.func) == "Parameter"
            and element.args
            and isinstance(element.args[0], ast.Constant)
            and isinstance(element.args[0].value, str)
        ):
            found.append(_declared_parameter(element.args[0].value, element, imports))
        else:
            return None
    return tuple(found)


def _declared_parameter(name: str, call: ast.Call, imports: dict[str, tuple[str, str]]) -> Parameter:
    """``Parameter("name", parse, default, accepted, ...)`` as model.py declares it. Its parser is
    rebuilt where the file spells it with the package's own parsers (``parse_int(1)``,
    ``parse_list(parse_float())``, ``parse_bool``; ``ge_python_backend.params``) or ``int``/``float``/
    ``str`` and literal arguments, so ``check`` refuses the values the load refuses; any other parser
    (the file's own function) runs only at load, and the value is taken as it is."""
    arguments = dict(zip(("parse", "default", "accepted", "help"), call.args[1:]))
    arguments.update((k.arg, k.value) for k in call.keywords if k.arg)
    parse = _parser(arguments["parse"], imports) if "parse" in arguments else None
    accepted = arguments.get("accepted")
    described = accepted.value if isinstance(accepted, ast.Constant) and isinstance(accepted.value, str) else ""
    if parse is None:
        return Parameter(name, str, "", "declared in model.py (its parser runs at load only)", "")
    return Parameter(name, parse, None, described or "what model.py's parser accepts", "")


#: builtins model.py may name as a parser
_BUILTIN_PARSERS = {"int": int, "float": float, "str": str}


def _parser(node: ast.expr, imports: dict[str, tuple[str, str]]) -> Callable[[str], Any] | None:
    """The parser ``node`` spells: a builtin, a function of the package, or a call of one with
    literal (or parser) arguments; None when the file spells anything else."""
    if isinstance(node, ast.Name):
        if node.id in _BUILTIN_PARSERS:
            return _BUILTIN_PARSERS[node.id]
        found = _package_function(node.id, imports)
        return found if found is not None and not _is_factory(found) else None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.keywords:
        return None
    factory = _package_function(node.func.id, imports)
    if factory is None or not _is_factory(factory):
        return None
    values: list[Any] = []
    for argument in node.args:
        if isinstance(argument, ast.Constant):
            values.append(argument.value)
            continue
        inner = _parser(argument, imports)
        if inner is None:
            return None
        values.append(inner)
    try:
        made = factory(*values)
    except (TypeError, ValueError):
        return None
    return made if callable(made) else None


def _package_function(name: str, imports: dict[str, tuple[str, str]]) -> Callable[..., Any] | None:
    """A function of ``ge_python_backend.params`` that model.py imports as ``name``."""
    module_name, attribute = imports.get(name, ("", ""))
    if module_name != _PARSERS_MODULE:
        return None
    value = getattr(importlib.import_module(module_name), attribute, None)
    return value if callable(value) and getattr(value, "__module__", "") == _PARSERS_MODULE else None


def _is_factory(function: Callable[..., Any]) -> bool:
    """A parser factory (``parse_int(minimum)`` returns the parser) rather than a parser itself."""
    return function.__name__ in _PARSER_FACTORIES


_PARSERS_MODULE = "ge_python_backend.params"
_PARSER_FACTORIES = frozenset({"parse_int", "parse_float", "parse_choice", "parse_list"})


def _imported_parameters(name: str, imports: dict[str, tuple[str, str]]) -> tuple[Parameter, ...] | None:
    if name not in imports:
        return None
    module_name, attribute = imports[name]
    try:
        value = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError):
        return None
    if isinstance(value, (tuple, list)) and all(isinstance(p, Parameter) for p in value):
        return tuple(value)
    return None
