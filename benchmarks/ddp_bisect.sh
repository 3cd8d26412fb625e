#!/usr/bin/env bash
# Take apart the scaling gap between examples/train_ddp.py and the reference loop
# benchmarks/ddp_minimal.py, one difference at a time, in one call on a 2-GPU machine.
#
#   benchmarks/ddp_bisect.sh OUT.jsonl DATA_DIR     # run everything, then print the table
#   benchmarks/ddp_bisect.sh --table OUT.jsonl ...  # the table of result files already written
#
# Runs, in this order (each with torchrun --standalone, ResNet-18, batch BATCH per rank):
# the example's --synthetic feed as benchmarks/ddp_scaling.sh runs it and the minimal loop, on 1
# and NGPUS GPUs; the example with every difference flag on; each flag alone; the example fed by
# extsrc; then single probes on NGPUS GPUs only. One JSON line per run in OUT, every run's full
# output in OUT.logs/. The table: per tag, total images/s on 1 and NGPUS GPUs (median of repeated
# rows), the scaling, and the NGPUS-GPU total as a share of the minimal loop's.
#
# Environment: NGPUS (2), BATCH (128), EPOCHS (6), N_IMAGES (8192, benchmarks/data.py, generated
# on first use), RUN_TIMEOUT (75 s: a run past it is killed and the next one starts), BUDGET_S
# (450 s: no run starts after it, so the whole call stays under 9 minutes), ONLY (space-separated
# tags: run just those), TORCHRUN (python3 -m torch.distributed.run). CPU=1 runs the same sequence on the CPU with gloo and tiny sizes, to check
# the script.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

table() {
  python3 - "$@" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for path in sys.argv[1:] for line in open(path) if line.strip()]
by: dict[str, dict[int, list[float]]] = {}
for r in rows:
    by.setdefault(r.get("tag", ""), {}).setdefault(r["world_size"], []).append(
        r["total_images_per_s"])
med = {t: {n: statistics.median(v) for n, v in d.items()} for t, d in by.items()}
ns = sorted({n for d in med.values() for n in d if n > 1}) or [2]
n = ns[-1]
base_one = med.get("example_synthetic", {}).get(1)
ref = med.get("minimal", {}).get(n)
print(f"\n| tag | 1 GPU | {n} GPUs | scaling | {n} GPUs / minimal |")
print("|---|---:|---:|---:|---:|")
for tag, d in med.items():
    one, many = d.get(1), d.get(n)
    if one and many:
        scaling = f"{many / one:.2f}x"
    elif many and base_one:
        scaling = f"({many / base_one:.2f}x of example_synthetic's 1 GPU)"
    else:
        scaling = "-"
    share = f"{many / ref:.2f}" if many and ref else "-"
    fmt = lambda v: f"{v:,.0f}" if v else "-"  # noqa: E731
    print(f"| {tag} | {fmt(one)} | {fmt(many)} | {scaling} | {share} |")
PY
}

if [[ ${1:-} == --table ]]; then
  shift
  table "$@"
  exit 0
fi

out=$1; data=$2
mkdir -p "$(dirname "$out")" "$out.logs"
# Required on the 2xH200 machines (NVLink multicast must stay off).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

ngpus=${NGPUS:-2}
if [[ ${CPU:-0} == 1 ]]; then
  batch=${BATCH:-2}; epochs=${EPOCHS:-1}; n_images=${N_IMAGES:-16}
  dev=(--device-mode cpu)
  minimal=(--arch tiny --image-size 32 --num-classes 10 --steps 3 --warmup 1)
else
  batch=${BATCH:-128}; epochs=${EPOCHS:-6}; n_images=${N_IMAGES:-8192}
  dev=()
  minimal=(--arch resnet18 --steps 300 --warmup 20)
fi
# torchrun itself, found wherever torch is importable (PYTHONPATH) even if not on PATH.
torchrun=${TORCHRUN:-python3 -m torch.distributed.run}
budget=${BUDGET_S:-450}
run_timeout=${RUN_TIMEOUT:-75}
start=$SECONDS

python3 -c "import sys; sys.path.insert(0, '$here/benchmarks'); from data import make_dataset; \
print(make_dataset('$data', $n_images))" || exit 1
echo "dataset ready after $((SECONDS - start)) s"

# run TAG NPROCS SCRIPT ARGS...: one torchrun, its JSON line to $out, its output to a log file.
run() {
  local tag=$1 n=$2; shift 2
  if [[ -n ${ONLY:-} && " $ONLY " != *" $tag "* ]]; then
    return
  fi
  if (( SECONDS - start > budget )); then
    echo "== $tag on $n: skipped (past BUDGET_S=$budget s)"
    return
  fi
  local log="$out.logs/$tag.$n.log" t0=$SECONDS
  # shellcheck disable=SC2086  # $torchrun is a command and its arguments
  timeout -k 10 "$run_timeout" $torchrun --standalone --nproc_per_node="$n" "$@" "${dev[@]}" \
    --json "$out" --tag "$tag" >"$log" 2>&1
  local rc=$?
  echo "== $tag on $n ($((SECONDS - t0)) s, rc $rc): $*"
  grep -v -i -E "warn|nvjpeg2k|nvtiff" "$log" | grep -E "rank|total|Error|error|Traceback" \
    | tail -n 8 || true
}

example=("$here/examples/train_ddp.py" --data "$data" --epochs "$epochs" --batch-size "$batch")
synth_once=("${example[@]}" --synthetic --watchdog 200)
# The synthetic batch made at every epoch inside the timing, as the example made it before the
# bisect found that this cost; example_synthetic_once is the example as it is now.
synth=("${synth_once[@]}" --synthetic-per-epoch)
all_flags=(--synthetic-float --no-pad-mask --loss-in-autocast --no-weight-decay --no-loader)

for n in 1 "$ngpus"; do run example_synthetic "$n" "${synth[@]}"; done
for n in 1 "$ngpus"; do
  run minimal "$n" "$here/benchmarks/ddp_minimal.py" --batch-size "$batch" "${minimal[@]}"
done
for n in 1 "$ngpus"; do run example_all_flags "$n" "${synth_once[@]}" "${all_flags[@]}"; done
for n in 1 "$ngpus"; do run example_synthetic_once "$n" "${synth_once[@]}"; done
# Flags that change the work of a single GPU too: on 1 and NGPUS GPUs.
for flag in --synthetic-float --no-pad-mask --loss-in-autocast; do
  t=${flag#--}
  for n in 1 "$ngpus"; do run "example_${t//-/_}" "$n" "${synth[@]}" "$flag"; done
done
for n in 1 "$ngpus"; do run example_extsrc "$n" "${example[@]}" --watchdog 200; done
# Probes on NGPUS GPUs only.
for flag in --no-weight-decay --no-loader; do
  t=${flag#--}
  run "example_${t//-/_}" "$ngpus" "${synth[@]}" "$flag"
done
run example_no_watchdog "$ngpus" "${example[@]}" --synthetic
# Twice the epochs: as many steps per rank as on 1 GPU (costs per run vs costs per epoch).
run example_2x_epochs "$ngpus" "$here/examples/train_ddp.py" --data "$data" \
  --epochs $((2 * epochs)) --batch-size "$batch" --synthetic --watchdog 200
run example_warmup20 "$ngpus" "${synth[@]}" --warmup 20
# The loader's own costs per epoch (its pipeline's reset and refill), weighed the same way.
run example_extsrc_2x_epochs "$ngpus" "$here/examples/train_ddp.py" --data "$data" \
  --epochs $((2 * epochs)) --batch-size "$batch" --watchdog 200
run minimal_loader_built "$ngpus" "$here/benchmarks/ddp_minimal.py" --batch-size "$batch" \
  "${minimal[@]}" --loader-manifest "$data/manifest.csv"

echo "all runs done after $((SECONDS - start)) s"
table "$out"
