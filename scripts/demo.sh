#!/usr/bin/env bash
# The README's first command: install, make a sample dataset, run the loader (grid2x2 + resize) on
# the GPU if there is one (else DALI's CPU-only mode), print images/s, write extsrc-demo/preview.png.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${PYTHON:-python3}" -m extsrc demo --out extsrc-demo "$@"
