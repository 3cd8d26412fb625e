#!/usr/bin/env bash
# The README's second command (and what CI runs): install with test extras, then the whole suite.
# GPU tests are marked `gpu` and skip themselves where no CUDA GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
exec "${PYTHON:-python3}" -m pytest -q -p no:cacheprovider "$@"
