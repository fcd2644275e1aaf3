"""``NpuGeModel``: GEModel for the model folders of CANN's C++ GE backend (``backend: "npu_ge"``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ge_python_backend.triton import npu_ge
from ge_python_backend.triton.model import GEModel


class NpuGeModel(GEModel):
    """GEModel whose config's parameters are the GE backend's, translated first (``triton.npu_ge``)."""

    @classmethod
    def adapt_config(cls, config: dict[str, Any], version_dir: Path) -> list[str]:
        return npu_ge.adapt(config, version_dir)
