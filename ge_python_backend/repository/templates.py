"""Model folder templates: data, not code.

A template is a folder holding ``template.json`` and the files it names::

    {
      "description": "one line shown by `ge-triton generate --list-templates`",
      "options":    {"top_k": {"default": "5", "help": "..."},
                     "labels": {"file": true, "help": "..."}},   # given as --set key=value
      "parameters": {"top_k": "${top_k}"},                       # added to config parameters
      "inputs":  [{"name": "IMAGE", "data_type": "TYPE_STRING", "dims": [1]}],   # optional:
      "outputs": [{"name": "LABELS", "data_type": "TYPE_STRING", "dims": ["${top_k}"]}],  # replace the model's
      "files": {"{version}/model.py": "model.py.in",             # rendered with ${...}
                "{version}/labels.txt": "@labels"}               # "@option": copy the file the option names
    }

Text is rendered with ``string.Template``: ``${name}``, ``${source}``, ``${model_file}`` and every
option are available. Adding a template needs no code change.
"""

from __future__ import annotations

import json
import os
import shutil
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import ConfigError

#: Where templates are looked up, first match wins.
ENV_TEMPLATE_PATH = "GE_TRITON_TEMPLATE_PATH"


def template_roots() -> list[Path]:
    roots = [Path(p) for p in os.environ.get(ENV_TEMPLATE_PATH, "").split(os.pathsep) if p]
    roots.append(Path(__file__).resolve().parents[2] / "model_repository_templates")
    roots.append(Path(sys.prefix) / "share" / "ge-python-backend" / "model_repository_templates")
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
                values[key] = given[key]
            elif "default" in option:
                values[key] = str(option["default"])
            else:
                raise ConfigError(f"template {self.name!r} needs option {key!r} (--set {key}=...): {option.get('help', '')}")
        return values

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
                option = source[1:]
                given = Path(values[option])
                if not given.is_file():
                    raise ConfigError(f"option {option!r}: file {given} does not exist")
                shutil.copyfile(given, target)
            else:
                text = (self.folder / source).read_text(encoding="utf-8")
                target.write_text(self.render(text, values, source), encoding="utf-8")
            written.append(target)
        return written


def safe_join(base: Path, relative: str) -> Path:
    """``base / relative``, refusing anything that would land outside ``base``."""
    if os.path.isabs(relative) or ".." in Path(relative).parts:
        raise ConfigError(f"path {relative!r} would leave the output folder {base}")
    target = (base / relative).resolve()
    if not target.is_relative_to(base.resolve()):
        raise ConfigError(f"path {relative!r} would leave the output folder {base}")
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
    return Template(
        name=name,
        folder=folder,
        description=data.get("description", ""),
        options=data.get("options", {}),
        parameters=data.get("parameters", {}),
        inputs=tuple(data["inputs"]) if "inputs" in data else None,
        outputs=tuple(data["outputs"]) if "outputs" in data else None,
        files=data.get("files", {}),
    )
