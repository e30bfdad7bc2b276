"""``python -m mdmem`` runs the command line (a running daemon answers search/get/pack: mdmem.cli.entry)."""

import sys

from mdmem.cli.entry import main

sys.exit(main())
