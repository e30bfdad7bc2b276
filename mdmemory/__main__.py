"""``python -m mdmemory`` runs the command line."""

import sys

from mdmemory.cli import main

sys.exit(main())
