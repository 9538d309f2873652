"""``python -m cli ARGS`` is ``echelon ARGS``."""

import sys

from cli.main import main

sys.exit(main())
