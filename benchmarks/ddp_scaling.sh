#!/usr/bin/env bash
# Loader-plus-training scaling of examples/train_ddp.py on 1 and N GPUs, several set-ups in one
# call, so every ratio compares runs of the same machine and the same minutes.
#
#   benchmarks/ddp_scaling.sh OUT.jsonl DATA_DIR "tag|extra train_ddp args" ...
#
# Each set-up runs on 1 GPU, then on NGPUS (default: every visible GPU). EPOCHS (default 6) and
# BATCH (default 128, per rank) can be set in the environment. The dataset (benchmarks/data.py,
# N_IMAGES default 8192 JPEGs of 500x375) is generated on first use. One JSON line per run in OUT.
set -euo pipefail
out=$1; data=$2; shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
ngpus=${NGPUS:-$(python3 -c "import torch; print(torch.cuda.device_count())")}
python3 -c "import sys; sys.path.insert(0, '$here/benchmarks'); from data import make_dataset; \
print(make_dataset('$data', ${N_IMAGES:-8192}))"
for cfg in "$@"; do
  tag=${cfg%%|*}
  extra=""
  [[ $cfg == *"|"* ]] && extra=${cfg#*|}
  for n in 1 "$ngpus"; do
    echo "== $tag on $n GPU(s): $extra"
    # shellcheck disable=SC2086  # $extra is a list of arguments
    torchrun --standalone --nproc_per_node="$n" "$here/examples/train_ddp.py" --data "$data" \
      --epochs "${EPOCHS:-6}" --batch-size "${BATCH:-128}" --watchdog 200 --json "$out" \
      --tag "$tag" $extra 2>&1 | grep -v -i -E "warn|nvjpeg2k|nvtiff" | grep -E "rank|total|Error|error" || true
  done
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r.get("tag", ""), {})[r["world_size"]] = r["total_images_per_s"]
print("\n| set-up | 1 GPU | N GPUs | scaling |")
print("|---|---:|---:|---:|")
for tag, v in by.items():
    one = v.get(1)
    for n, tot in sorted(v.items()):
        if n > 1 and one:
            print(f"| {tag} | {one:,.0f} | {tot:,.0f} ({n}) | {tot / one:.2f}x |")
PY
