#!/usr/bin/env bash
# Loader-plus-training scaling of examples/train_ddp.py on 1 and N GPUs, several set-ups in one
# call, so every ratio compares runs of the same machine and the same minutes.
#
#   benchmarks/ddp_scaling.sh OUT.jsonl DATA_DIR "tag|extra train_ddp args" ...
#
# Each set-up runs on 1, 2, 4 and 8 GPUs, as many of them as NGPUS allows (default: every visible
# GPU). EPOCHS (default 6), BATCH (default 128, per rank) and ARCH (resnet18 or resnet50) can be
# set in the environment. Each JSON line records every rank's images/s and the cores it kept busy
# (training loop, DALI threads and reader processes) beside its share of the host's cores. The dataset (benchmarks/data.py,
# N_IMAGES default 8192 JPEGs of 500x375) is generated on first use. One JSON line per run in OUT.
set -euo pipefail
# Required on the multi-GPU machines this runs on (NVLink multicast must stay off).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=$1; data=$2; shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
ngpus=${NGPUS:-$(python3 -c "import torch; print(torch.cuda.device_count())")}
python3 -c "import sys; sys.path.insert(0, '$here/benchmarks'); from data import make_dataset; \
print(make_dataset('$data', ${N_IMAGES:-8192}))"
for cfg in "$@"; do
  tag=${cfg%%|*}
  extra=""
  [[ $cfg == *"|"* ]] && extra=${cfg#*|}
  for n in 1 2 4 8; do
    (( n > ngpus )) && break
    echo "== $tag on $n GPU(s): $extra"
    # shellcheck disable=SC2086  # $extra is a list of arguments
    torchrun --standalone --nproc_per_node="$n" "$here/examples/train_ddp.py" --data "$data" \
      --epochs "${EPOCHS:-6}" --batch-size "${BATCH:-128}" --arch "${ARCH:-resnet18}" \
      --watchdog 200 --json "$out" --tag "$tag" $extra 2>&1 | grep -v -i -E "warn|nvjpeg2k|nvtiff" | grep -E "rank|total|Error|error" || true
  done
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault((r.get("tag", ""), r.get("model", "")), {})[r["world_size"]] = r
print("\n| set-up | model | GPUs | images/s | scaling | / (N x 1 GPU) | cores busy per rank (of) |")
print("|---|---|---:|---:|---:|---:|---|")
for (tag, model), v in by.items():
    one = v.get(1, {}).get("total_images_per_s")
    for n, r in sorted(v.items()):
        tot = r["total_images_per_s"]
        cores = r.get("per_rank_cores_busy")
        share = f"{cores} ({r.get('cores_per_rank', 0):.0f})" if cores else "-"
        sc = f"{tot / one:.2f}x | {tot / (n * one):.2f}" if one else "- | -"
        print(f"| {tag} | {model} | {n} | {tot:,.0f} | {sc} | {share} |")
PY
