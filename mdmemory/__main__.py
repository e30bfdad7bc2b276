"""``python -m mdmemory`` runs the command line (a running daemon answers search/get/pack: mdmemory.entry)."""

import sys

from mdmemory.entry import main

sys.exit(main())
