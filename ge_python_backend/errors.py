"""Error types. Each one names the thing at fault, what was expected and what was found."""

from __future__ import annotations


class GEError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(GEError):
    """A model configuration, parameter, flag or file is wrong: the model must not load."""


class InputError(GEError):
    """One request's input is wrong: only that request fails (Triton INVALID_ARG)."""


class EngineError(GEError):
    """The engine failed while running a batch: the requests of that batch fail."""


class OmFormatError(GEError):
    """A file is not a readable CANN offline model (.om)."""
