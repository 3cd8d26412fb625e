#!/usr/bin/env bash
# Installs extsrc and what it needs into the current Python. Idempotent; used by demo.sh and test.sh.
#   bash scripts/setup.sh          # runtime and the preview extra (what `extsrc demo` needs)
#   bash scripts/setup.sh test     # plus the albumentations extra, the test tools and a Jupyter
#                                  # kernel for the notebook tests
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# torch first, pinned: with no torch installed, an unpinned requirement pulls several GB of CUDA
# wheels even on a CPU-only machine. Any torch already installed (a CUDA build, say) is kept.
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  "$PY" -m pip install -q --disable-pip-version-check "torch==${EXTSRC_TORCH_VERSION:-2.13.0}"
fi
if [ "${1:-}" = "test" ]; then
  # The tests cover the previews and the albumentations adapter too.
  "$PY" -m pip install -q --disable-pip-version-check -e ".[test,preview,albumentations]"
  # nbclient runs the notebooks on the kernel named python3; make sure it is this interpreter.
  # --sys-prefix: registered inside this environment, not over the user's own python3 kernel.
  "$PY" -m ipykernel install --sys-prefix --name python3 >/dev/null 2>&1 || true
else
  # The demo writes a preview PNG (matplotlib).
  "$PY" -m pip install -q --disable-pip-version-check -e ".[preview]"
fi
