"""``ge-triton atc-cmd``'s files: the ONNX model and, optionally, a model folder's config.pbtxt,
read here and handed to the one ATC command builder (``ascend.atc``) that the compile at load uses too.

ATC is not needed here: the command is printed for the user to run where CANN is installed.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from google.protobuf import json_format

from ge_python_backend.ascend.atc import AtcCommand, AtcRequest, ConfigFacts, build_atc_command
from ge_python_backend.engines.registry import ONNX
from ge_python_backend.errors import ConfigError
from ge_python_backend.repository.config import read_config_file
from ge_python_backend.repository.modelfile import read_model_file


def config_facts(config_file: Path) -> ConfigFacts:
    """What the ATC command takes from a config.pbtxt (parsed with Triton's schema)."""
    config = json_format.MessageToDict(read_config_file(config_file), preserving_proto_field_name=True)
    return ConfigFacts.from_json(config, str(config_file))


def latest_version_output(config_file: Path) -> str:
    """``REPO/NAME/<latest version>/model``: where the .om of the model folder of ``config_file`` goes."""
    model_dir = Path(config_file).parent
    versions = sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())
    return str(model_dir / str(versions[-1] if versions else 1) / "model")


def atc_command(request: AtcRequest, config: Path | None = None) -> AtcCommand:
    """The ATC command for ``request`` (an ONNX model), with the gears, shapes and output path of
    the model folder whose ``config`` is given; ConfigError for anything missing or contradictory."""
    model = read_model_file(request.model)
    if model.format != ONNX:
        raise ConfigError(
            f"{request.model} is a {model.format.description}; atc-cmd compiles an ONNX model (.onnx) into an .om"
        )
    if config is not None:
        output = request.output if request.output is not None else latest_version_output(config)
        request = replace(request, facts=config_facts(config), output=output)
    return build_atc_command(request, model.spec.inputs)
