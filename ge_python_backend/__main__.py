import sys

from ge_python_backend.cli import main

sys.exit(main())
