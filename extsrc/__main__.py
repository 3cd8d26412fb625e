"""``python -m extsrc`` runs the command line (same as the ``extsrc`` entry point)."""

import sys

from extsrc.tools.cli import main

sys.exit(main())
