"""Model folder templates: data, not code.

A template is a folder holding ``template.json`` and the files it names::

    {
      "description": "one line shown by `ge-triton generate --list-templates`",
      "options":    {"top_k": {"default": "5", "type": "int", "min": 1, "help": "..."},
                     "labels": {"file": true, "help": "..."}},   # given as --set key=value
      "parameters": {"top_k": "${top_k}"},                       # added to config parameters
      "atc_flags": "--input_shape=x:1,3,32~${side},32~${side}",  # optional: parameter atc_flags when compiled at load
      "inputs":  [{"name": "IMAGE", "data_type": "TYPE_STRING", "dims": [1]}],   # optional:
      "outputs": [{"name": "LABELS", "data_type": "TYPE_STRING", "dims": ["${top_k}"]}],  # replace the model's
      "files": {"{version}/model.py": "model.py.in",             # rendered with ${...}
                "{version}/labels.txt": "@labels"},              # "@option": copy the file the option names
      "model_name": "${name}_model",                             # optional: the model file's folder (default ${name})
      "models": {"${name}": {"config": "ensemble.pbtxt.in"},     # optional: more model folders beside it, each
                 "${name}_pre": {"config": "pre.pbtxt.in",       # a config.pbtxt rendered (and read with Triton's
                                 "files": {"{version}/model.py": "pre.py.in"}},   # schema) and files as above,
                 "${name}_rec": {"model": "@rec",                # or the folder of another model file option,
                                 "files": {...}, "parameters": {...},             # generated as the first one
                                 "atc_flags": "..."}},
      "source": "model"                                          # optional, see below
    }

``source`` says where the model's inputs and outputs come from: ``"model"`` (the default), the model
file ``generate`` is given; ``"members"``, the configs of the models of the output repository that
option ``members`` names (comma-separated; the router: ``repository/router.py``), with no model
file. A parameter that renders empty is left out of the config (unset). ``atc_flags`` (of the
model file, or of a ``models`` entry of another model file) applies only where that model is an
ONNX file compiled at load (engine ``acl``/``acl-sim``): it becomes parameter ``atc_flags``, and
the config describes the model ATC builds with it (e.g. its shape ranges); an ``.om`` or an engine
that runs the ONNX itself ignores it.

Text is rendered with ``string.Template``: ``${name}``, ``${source}``, ``${model_file}`` and every
option are available; in the configs of ``models`` also the model folder's ``${model_name}`` and,
for a model of one input and one output, ``${model_input}`` / ``${model_output}`` with their
``_type`` (``TYPE_FP32``) and ``_dims`` (``3, 640, 640``), and ``${max_batch_size}``. Values are
rendered for the language they land in, since ``source`` (the model file's name) and string options
are anyone's text: in a ``.py`` file placeholders may sit only in plain string literals and
comments (checked when the template loads), each value is escaped as the body of such a literal,
and the rendered file must parse to the template's own code (else nothing is written); in other
files a value with a control character is refused; values in ``parameters``, ``inputs`` and
``outputs`` go into config.pbtxt through its protobuf. An option's ``type`` ("string" by default,
"int" with an optional ``min`` and ``multiple_of``, "float", "int_list", "float_list" or "bool";
the words in its ``or`` list pass too) is checked when it is given; a ``file`` option must name an
existing file (with ``"default": ""`` it is optional: left out, nothing is copied). Target paths
stay inside the model folder and sources inside the template folder: both are checked when the
template loads, before anything is written. Adding a template needs no code change.
"""

from __future__ import annotations

import ast
import io
import json
import os
import shutil
import string
import tokenize
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ge_python_backend.errors import ConfigError
from ge_python_backend.params import parse_bool, parse_int, parse_list

#: Where templates are looked up, first match wins.
ENV_TEMPLATE_PATH = "GE_TRITON_TEMPLATE_PATH"

OPTION_TYPES = ("string", "int", "float", "int_list", "float_list", "bool")
#: where a template's inputs and outputs come from (``source``)
SOURCES = ("model", "members")
#: What a placeholder becomes while a Python template is checked: an identifier, so the template
#: tokenizes and parses wherever it sits.
_MARKER = "GE_TEMPLATE_VALUE_{}_"


def _option_parser(option: Mapping[str, Any]) -> tuple[Callable[[str], Any], str]:
    """(parser, what is accepted) for a declared template option."""
    kind = option.get("type", "string")
    if kind == "int":
        minimum, step = option.get("min"), option.get("multiple_of")
        accepted = "an integer" + (f" >= {minimum}" if minimum is not None else "")
        if step is None:
            return parse_int(minimum), accepted

        def multiple(raw: str) -> int:
            value = parse_int(minimum)(raw)
            if value % step:
                raise ValueError(f"not a multiple of {step}")
            return value

        return multiple, f"{accepted}, a multiple of {step}"
    if kind == "float":
        return float, "a number"
    if kind == "int_list":
        return parse_list(parse_int(1)), "comma-separated integers >= 1"
    if kind == "float_list":
        return parse_list(float), "comma-separated numbers"
    if kind == "bool":
        return parse_bool, "true or false"
    return str, "any text"


def template_roots() -> list[Path]:
    roots = [Path(p) for p in os.environ.get(ENV_TEMPLATE_PATH, "").split(os.pathsep) if p]
    roots.append(Path(__file__).resolve().parent / "model_templates")  # package data
    return [r for r in roots if r.is_dir()]


@dataclass(frozen=True)
class Template:
    name: str
    folder: Path
    description: str
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    parameters: Mapping[str, str] = field(default_factory=dict)
    inputs: tuple[Mapping[str, Any], ...] | None = None
    outputs: tuple[Mapping[str, Any], ...] | None = None
    files: Mapping[str, str] = field(default_factory=dict)
    model_name: str = "${name}"
    models: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    source: str = "model"
    #: ATC flags for the model file when it is compiled at load (parameter atc_flags), rendered
    atc_flags: str = ""

    def values(self, given: Mapping[str, str]) -> dict[str, str]:
        """Option values: given ones, then defaults; unknown or missing options are errors."""
        unknown = sorted(set(given) - set(self.options))
        if unknown:
            accepted = ", ".join(sorted(self.options)) or "none"
            raise ConfigError(f"template {self.name!r} has no option {unknown[0]!r}; its options: {accepted}")
        values = {}
        for key, option in self.options.items():
            if key in given:
                values[key] = self._checked(key, option, given[key])
            elif "default" in option:
                values[key] = str(option["default"])
            else:
                raise ConfigError(
                    f"template {self.name!r} needs option {key!r} (--set {key}=...): {option.get('help', '')}"
                )
        return values

    def _checked(self, key: str, option: Mapping[str, Any], value: str) -> str:
        if option.get("file"):
            if Path(value).is_dir():
                raise ConfigError(f"template {self.name!r} option {key!r}: {value} is a folder, not a file")
            if not Path(value).is_file():
                raise ConfigError(f"template {self.name!r} option {key!r}: file {value} does not exist")
            return value
        parser, accepted = _option_parser(option)
        words = tuple(option.get("or", ()))
        if value.strip() in words:
            return value
        try:
            parser(value.strip())
        except (ValueError, TypeError):
            accepted += "".join(f" or {word}" for word in words)
            raise ConfigError(f"template {self.name!r} option {key!r} is {value!r}; expected {accepted}") from None
        return value

    def render(self, text: str, values: Mapping[str, str], where: str) -> str:
        try:
            return string.Template(text).substitute(values)
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"template {self.name!r}, {where}: cannot render placeholder {exc}") from None

    def render_text(self, text: str, values: Mapping[str, str], where: str) -> str:
        """A text file of unknown language: values with control characters are refused."""
        for name in _placeholders(text):
            bad = next((c for c in values.get(name, "") if unicodedata.category(c)[0] in "CZ" and c != " "), None)
            if bad is not None:
                raise ConfigError(
                    f"template {self.name!r}, {where}: the value of ${{{name}}} holds the control character "
                    f"U+{ord(bad):04X}, which a text file cannot carry safely; rename the file or change the value"
                )
        return self.render(text, values, where)

    def render_python(self, text: str, values: Mapping[str, str], where: str) -> str:
        """A Python file: every value escaped as string-literal text; the result must be the
        template's own code with only its strings' text changed."""
        marked, names = self._python_markers(text, where)
        rendered = self.render(text, {k: _python_text(v) for k, v in values.items()}, where)
        markers = {_MARKER.format(i): values.get(name, "") for i, name in enumerate(names)}

        def filled(literal: str) -> str:
            for marker, value in markers.items():
                literal = literal.replace(marker, value)
            return literal

        expected_code, expected_strings = _code_and_strings(marked)
        code, strings = _code_and_strings(rendered)
        if code != expected_code or strings != [filled(s) for s in expected_strings]:
            raise ConfigError(
                f"template {self.name!r}, {where}: rendering changed the file's code (a value left its string); "
                "nothing was written"
            )
        return rendered

    def _python_markers(self, text: str, where: str) -> tuple[str, list[str]]:
        """``text`` with markers for its placeholders, and their names in order; ConfigError for a
        placeholder outside a plain string literal or comment."""
        names: list[str] = []

        def mark(match) -> str:
            if match.group("escaped") is not None:
                return "$"
            name = match.group("named") or match.group("braced")
            if name is None:
                raise ConfigError(f"template {self.name!r}, {where}: invalid placeholder at {match.group(0)!r}")
            names.append(name)
            return _MARKER.format(len(names) - 1)

        marked = string.Template.pattern.sub(mark, text)
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(marked).readline))
        except (tokenize.TokenError, SyntaxError) as exc:
            raise ConfigError(f"template {self.name!r}, {where}: not valid Python ({exc})") from None
        for token in tokens:
            for index, name in enumerate(names):
                if _MARKER.format(index) in token.string and not _holds_text(token):
                    raise ConfigError(
                        f"template {self.name!r}, {where} line {token.start[0]}: placeholder ${{{name}}} must sit in "
                        "a plain string literal or a comment (not in code, an f-string, a bytes or a raw string); "
                        "read values from the config parameters in code"
                    )
        return marked, names

    def render_data(self, data: Any, values: Mapping[str, str], where: str) -> Any:
        """Render every string in a JSON value; strings that become integers turn into ints."""
        if isinstance(data, str):
            text = self.render(data, values, where)
            return int(text) if text.lstrip("-").isdigit() else text
        if isinstance(data, list):
            return [self.render_data(d, values, where) for d in data]
        if isinstance(data, dict):
            return {k: self.render_data(v, values, where) for k, v in data.items()}
        return data

    def write_files(
        self, model_dir: Path, version: int, values: Mapping[str, str], files: Mapping[str, str] | None = None
    ) -> list[Path]:
        """Render or copy every file of the template (or ``files``) into ``model_dir``."""
        written = []
        for target_pattern, source in (self.files if files is None else files).items():
            target = safe_join(model_dir, target_pattern.replace("{version}", str(version)))
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.startswith("@"):
                if not values[source[1:]]:
                    continue  # an optional file option left out
                shutil.copyfile(values[source[1:]], target)
            else:
                text = safe_join(self.folder, source).read_text(encoding="utf-8")
                render = self.render_python if target.suffix == ".py" else self.render_text
                target.write_text(render(text, values, source), encoding="utf-8")
            written.append(target)
        return written

    def write_models(self, repository: Path, version: int, values: Mapping[str, str]) -> list[Path]:
        """Write the folders of ``models`` into ``repository``: each config read with Triton's schema."""
        from ge_python_backend.repository.config import format_config, parse_config

        written = []
        for name_pattern, model in self.models.items():
            if "model" in model:
                continue  # a folder of another model file: generate writes it as it writes the first
            name = self.render(name_pattern, values, "models")
            folder = safe_join(repository, name)
            (folder / str(version)).mkdir(parents=True, exist_ok=True)  # tritonserver needs one, even for an ensemble
            source = model["config"]
            text = self.render_text(safe_join(self.folder, source).read_text(encoding="utf-8"), values, source)
            config = parse_config(text, f"template {self.name!r}, {source}")
            config.name = name
            (folder / "config.pbtxt").write_text(format_config(config), encoding="utf-8")
            written.append(folder / "config.pbtxt")
            written += self.write_files(folder, version, values, model.get("files", {}))
        return written

    def model_files(self, values: Mapping[str, str]) -> dict[str, tuple[Path, Template]]:
        """The folders of ``models`` made from another model file (``"model": "@option"``): folder
        -> (that file, the template its folder is written with: the entry's files and parameters)."""
        found = {}
        for name_pattern, model in self.models.items():
            if "model" in model:
                name = self.render(name_pattern, values, "models")
                folder_template = Template(
                    name=f"{self.name}:{name}",
                    folder=self.folder,
                    description="",
                    parameters=model.get("parameters", {}),
                    files=model.get("files", {}),
                    atc_flags=model.get("atc_flags", ""),
                )
                found[name] = (Path(values[model["model"][1:]]), folder_template)
        return found

    def uses(self, *prefixes: str) -> bool:
        """Whether a config of ``models`` names a placeholder starting with one of ``prefixes``."""
        texts = [
            safe_join(self.folder, m["config"]).read_text(encoding="utf-8")
            for m in self.models.values()
            if "config" in m
        ]
        return any(name.startswith(prefixes) for text in texts for name in _placeholders(text))

    def model_names(self, values: Mapping[str, str]) -> list[str]:
        """The folders the template writes: the model file's first, then those of ``models``."""
        return [self.render(n, values, "model_name") for n in (self.model_name, *self.models)]

    def copied(self, model_dir: Path, version: int, values: Mapping[str, str]) -> dict[Path, Path]:
        """Each file a file option copies into ``model_dir`` -> the file the option named."""
        return {
            safe_join(model_dir, target.replace("{version}", str(version))): Path(values[source[1:]])
            for target, source in self.files.items()
            if source.startswith("@") and values[source[1:]]
        }

    def _check_source(self) -> None:
        if self.source not in SOURCES:
            raise ConfigError(f"template {self.name!r} has source {self.source!r}; accepted: {', '.join(SOURCES)}")
        if self.source == "members" and "members" not in self.options:
            raise ConfigError(f"template {self.name!r} has source members but no option 'members' naming them")

    def check(self) -> None:
        """Refuse option types, target paths and sources that are wrong before anything is written."""
        self._check_source()
        for key, option in self.options.items():
            if option.get("type", "string") not in OPTION_TYPES:
                raise ConfigError(
                    f"template {self.name!r} option {key!r} has type {option['type']!r}; "
                    f"accepted: {', '.join(OPTION_TYPES)}"
                )
        for model in self.models.values():
            if isinstance(model, Mapping) and isinstance(model.get("model"), str):
                option = model["model"].removeprefix("@")
                if not model["model"].startswith("@") or not self.options.get(option, {}).get("file"):
                    raise ConfigError(f"template {self.name!r}: models entry {model['model']!r} names no file option")
                continue
            if not isinstance(model, Mapping) or not isinstance(model.get("config"), str):
                raise ConfigError(f"template {self.name!r}: each entry of models needs a config file or a model")
            if not safe_join(self.folder, model["config"]).is_file():
                raise ConfigError(f"template {self.name!r}: source {model['config']!r} is not a file in {self.folder}")
        for target, source in [
            *self.files.items(),
            *(i for m in self.models.values() for i in m.get("files", {}).items()),
        ]:
            if not _stays_inside(target):
                raise ConfigError(f"template {self.name!r}: target {target!r} would leave the model folder")
            if source.startswith("@"):
                if not self.options.get(source[1:], {}).get("file"):
                    raise ConfigError(f"template {self.name!r}: {source!r} copies no file option")
            elif not safe_join(self.folder, source).is_file():
                raise ConfigError(f"template {self.name!r}: source {source!r} is not a file in {self.folder}")
            elif target.endswith(".py"):
                self._python_markers(safe_join(self.folder, source).read_text(encoding="utf-8"), source)


def _placeholders(text: str) -> list[str]:
    return [m.group("named") or m.group("braced") for m in string.Template.pattern.finditer(text) if m.group(0) != "$$"]


def _python_text(value: str) -> str:
    """``value`` as the text of a plain Python string literal (any quotes) or a comment: backslashes,
    quotes and unprintable characters (line breaks among them) escaped."""
    escaped = []
    for char in value:
        if char in "\\'\"":
            escaped.append("\\" + char)
        elif char.isprintable():
            escaped.append(char)
        else:
            escaped.append(repr(char)[1:-1])  # \n, \x00, \u2028, \udcff ...
    return "".join(escaped)


def _holds_text(token: tokenize.TokenInfo) -> bool:
    """A comment, or a plain (or u-prefixed) string literal."""
    if token.type == tokenize.COMMENT:
        return True
    if token.type != tokenize.STRING:
        return False
    prefix = token.string[: len(token.string) - len(token.string.lstrip("rRbBuUfF"))]
    return prefix.lower() in ("", "u")


def _code_and_strings(source: str) -> tuple[str, list[str]]:
    """The code of ``source`` with its string constants blanked, and those strings in order."""
    tree = ast.parse(source)
    strings = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.append(node.value)
            node.value = ""
    return ast.dump(tree), strings


def _stays_inside(relative: str) -> bool:
    """True when ``relative`` is a non-empty relative path without '..'."""
    return bool(relative) and not os.path.isabs(relative) and ".." not in Path(relative).parts


def safe_join(base: Path, relative: str) -> Path:
    """``base / relative``, refusing anything that would land outside ``base`` (absolute paths,
    '..', or symbolic links that point elsewhere)."""
    if not _stays_inside(relative):
        raise ConfigError(f"path {relative!r} would leave the folder {base}")
    target = (base / relative).resolve()
    if not target.is_relative_to(base.resolve()):
        raise ConfigError(f"path {relative!r} would leave the folder {base}")
    return target


def available_templates() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for root in template_roots():
        for folder in sorted(root.iterdir()):
            if (folder / "template.json").is_file():
                found.setdefault(folder.name, folder)
    return found


def load_template(name: str) -> Template:
    templates = available_templates()
    if name not in templates:
        raise ConfigError(f"no template named {name!r}; available: {', '.join(sorted(templates)) or 'none'}")
    folder = templates[name]
    try:
        data = json.loads((folder / "template.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"template {name!r}: cannot read {folder / 'template.json'}: {exc}") from None
    template = Template(
        name=name,
        folder=folder,
        description=data.get("description", ""),
        options=data.get("options", {}),
        parameters=data.get("parameters", {}),
        inputs=tuple(data["inputs"]) if "inputs" in data else None,
        outputs=tuple(data["outputs"]) if "outputs" in data else None,
        files=data.get("files", {}),
        model_name=data.get("model_name", "${name}"),
        models=data.get("models", {}),
        source=data.get("source", "model"),
        atc_flags=data.get("atc_flags", ""),
    )
    template.check()
    return template
