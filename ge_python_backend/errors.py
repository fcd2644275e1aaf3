"""Error types. Each one names the thing at fault, what was expected and what was found."""

from __future__ import annotations


class GEError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(GEError):
    """A model configuration, parameter, flag or file is wrong: the model must not load."""


class InputError(GEError):
    """One request's input is wrong: only that request fails (Triton INVALID_ARG)."""


class ContractError(GEError):
    """A hook (or the model) returned what its contract or the model config forbids: the server's
    fault, not the client's (Triton INTERNAL), and logged where the server's operator sees it."""


class EngineError(GEError):
    """The engine failed while running a batch: the requests of that batch fail.

    ``fatal`` marks a failure the engine cannot recover from (the device is gone): the model
    stays out of service until it is reloaded.
    """

    def __init__(self, message: str, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


class OmFormatError(GEError):
    """A file is not a readable CANN offline model (.om)."""
