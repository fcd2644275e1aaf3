"""Offline reader for Huawei CANN offline models (.om): header, partitions and I/O metadata.

Pure Python (``struct`` plus a small protobuf wire decoder); needs neither CANN nor the
protobuf library. ``read_om(path)`` returns an ``OmFile`` whose ``spec`` is the root model's
``ModelSpec``; any problem with the file raises ``OmFormatError``.
"""

from __future__ import annotations

from ge_python_backend.ascend.om.header import OmHeader
from ge_python_backend.ascend.om.iospec import RuntimeInput
from ge_python_backend.ascend.om.partitions import Partition
from ge_python_backend.ascend.om.reader import IO_FROM_INOUT, IO_FROM_MODEL_DEF, OmFile, SubModel, read_om

__all__ = [
    "IO_FROM_INOUT",
    "IO_FROM_MODEL_DEF",
    "OmFile",
    "OmHeader",
    "Partition",
    "RuntimeInput",
    "SubModel",
    "read_om",
]
