"""``python -m mdmemory`` runs the command line (a running daemon answers search/get/pack: mdmemory.cli.entry)."""

import sys

from mdmemory.cli.entry import main

sys.exit(main())
