"""Where the public .om samples are: ``../shared/om-samples`` beside the checkout (or the folder
in $GE_OM_SAMPLES). Tests that use them skip cleanly when the folder is absent."""

from __future__ import annotations

import os
from pathlib import Path

OM_SAMPLES_DIR = Path(os.environ.get("GE_OM_SAMPLES", Path(__file__).resolve().parents[3] / "shared" / "om-samples"))
OM_SAMPLES = sorted(OM_SAMPLES_DIR.glob("*.om"))
