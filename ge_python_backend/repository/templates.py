"""Model folder templates: data, not code.

A template is a folder holding ``template.json`` and the files it names::

    {
      "description": "one line shown by `ge-triton generate --list-templates`",
      "options":    {"top_k": {"default": "5", "type": "int", "min": 1, "help": "..."},
                     "labels": {"file": true, "help": "..."}},   # given as --set key=value
      "parameters": {"top_k": "${top_k}"},                       # added to config parameters
      "inputs":  [{"name": "IMAGE", "data_type": "TYPE_STRING", "dims": [1]}],   # optional:
      "outputs": [{"name": "LABELS", "data_type": "TYPE_STRING", "dims": ["${top_k}"]}],  # replace the model's
      "files": {"{version}/model.py": "model.py.in",             # rendered with ${...}
                "{version}/labels.txt": "@labels"}               # "@option": copy the file the option names
    }

Text is rendered with ``string.Template``: ``${name}``, ``${source}``, ``${model_file}`` and every
option are available. An option's ``type`` ("string" by default, "int" with an optional ``min``,
"float_list" or "bool"; the words in its ``or`` list pass too) is checked when it is given; a
``file`` option must name an existing file. Target paths stay inside the model folder and
sources inside the template folder: both are checked when the template loads, before anything
is written. Adding a template needs no code change.
"""

from __future__ import annotations

import json
import os
import shutil
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ge_python_backend.errors import ConfigError
from ge_python_backend.params import parse_bool, parse_int, parse_list

#: Where templates are looked up, first match wins.
ENV_TEMPLATE_PATH = "GE_TRITON_TEMPLATE_PATH"

OPTION_TYPES = ("string", "int", "float_list", "bool")


def _option_parser(option: Mapping[str, Any]) -> tuple[Callable[[str], Any], str]:
    """(parser, what is accepted) for a declared template option."""
    kind = option.get("type", "string")
    if kind == "int":
        minimum = option.get("min")
        return parse_int(minimum), "an integer" + (f" >= {minimum}" if minimum is not None else "")
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

    def write_files(self, model_dir: Path, version: int, values: Mapping[str, str]) -> list[Path]:
        """Render or copy every file of the template into ``model_dir``."""
        written = []
        for target_pattern, source in self.files.items():
            target = safe_join(model_dir, target_pattern.replace("{version}", str(version)))
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.startswith("@"):
                shutil.copyfile(values[source[1:]], target)
            else:
                text = safe_join(self.folder, source).read_text(encoding="utf-8")
                target.write_text(self.render(text, values, source), encoding="utf-8")
            written.append(target)
        return written

    def copied(self, model_dir: Path, version: int, values: Mapping[str, str]) -> dict[Path, Path]:
        """Each file a file option copies into ``model_dir`` -> the file the option named."""
        return {
            safe_join(model_dir, target.replace("{version}", str(version))): Path(values[source[1:]])
            for target, source in self.files.items()
            if source.startswith("@")
        }

    def check(self) -> None:
        """Refuse option types, target paths and sources that are wrong before anything is written."""
        for key, option in self.options.items():
            if option.get("type", "string") not in OPTION_TYPES:
                raise ConfigError(
                    f"template {self.name!r} option {key!r} has type {option['type']!r}; "
                    f"accepted: {', '.join(OPTION_TYPES)}"
                )
        for target, source in self.files.items():
            if not _stays_inside(target):
                raise ConfigError(f"template {self.name!r}: target {target!r} would leave the model folder")
            if source.startswith("@"):
                if not self.options.get(source[1:], {}).get("file"):
                    raise ConfigError(f"template {self.name!r}: {source!r} copies no file option")
            elif not safe_join(self.folder, source).is_file():
                raise ConfigError(f"template {self.name!r}: source {source!r} is not a file in {self.folder}")


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
    )
    template.check()
    return template
