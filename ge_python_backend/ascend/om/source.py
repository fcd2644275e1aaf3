"""Bounded reads from an open OM file: no length field can make it read or allocate past the file."""

from __future__ import annotations

from typing import BinaryIO

from ge_python_backend.errors import OmFormatError


class FileSource:
    """Reads byte ranges of one file whose size is known up front."""

    def __init__(self, handle: BinaryIO, file_size: int) -> None:
        self._handle = handle
        self.file_size = file_size

    def read(self, offset: int, size: int, what: str) -> bytes:
        """``size`` bytes at ``offset``; ``what`` names the structure for the error message."""
        if offset < 0 or size < 0 or offset + size > self.file_size:
            raise OmFormatError(
                f"{what}: {size} bytes at file offset {offset} run past the end of the file ({self.file_size} bytes)"
            )
        self._handle.seek(offset)
        data = self._handle.read(size)
        if len(data) != size:
            raise OmFormatError(f"{what}: read only {len(data)} of {size} bytes at file offset {offset}")
        return data
