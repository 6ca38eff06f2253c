"""Entry point of ``python -m tilelang_core.trace`` (see :mod:`tilelang_core.trace.cli`)."""

import sys

from .cli import main

sys.exit(main())
