"""Error types. Each one names the thing at fault, what was expected and what was found."""

from __future__ import annotations

from typing import TypeVar


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


_Error = TypeVar("_Error", bound=BaseException)


def detached(error: _Error) -> _Error:
    """``error`` without its traceback and the exceptions it was raised from or while handling,
    for an error kept or handed on after its handler: a traceback holds every frame it passed and
    each frame its caller's, so an error that keeps one keeps that whole call alive (in the request
    path: every request of an ``execute``, with its tensors) for as long as the error lives. Log
    it first: the log is where its traceback belongs."""
    error.__traceback__ = None
    error.__context__ = None
    error.__cause__ = None
    return error
