"""``python -m tools.bench SCENARIO [options]``: see tools/bench/runner.py."""

import sys

from tools.bench.runner import main

sys.exit(main())
