"""``python -m extsrc`` runs the command line (same as the ``extsrc`` entry point)."""

import sys

from extsrc.cli import main

sys.exit(main())
