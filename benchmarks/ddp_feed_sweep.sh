#!/usr/bin/env bash
# The extsrc-fed example (examples/train_ddp.py) on 1 and 2 GPUs under several loader settings,
# beside its synthetic feed, in one call: which reader/thread/decoder split lets each rank's
# loader keep up with training while both ranks share the host's cores.
#
#   benchmarks/ddp_feed_sweep.sh OUT.jsonl DATA_DIR "tag|train_ddp args|gpu counts" ...
#
# e.g. "t8_hw1|--num-threads 8 --hw-decoder-load 1.0|1 2". Runs the synthetic feed (made once)
# on 1 and 2 GPUs first. Environment as benchmarks/ddp_bisect.sh (BATCH, EPOCHS, N_IMAGES,
# RUN_TIMEOUT, BUDGET_S); the table is ddp_bisect.sh's.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=$1; data=$2; shift 2
mkdir -p "$(dirname "$out")" "$out.logs"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
batch=${BATCH:-128}; epochs=${EPOCHS:-6}; budget=${BUDGET_S:-450}; run_timeout=${RUN_TIMEOUT:-75}
torchrun=${TORCHRUN:-python3 -m torch.distributed.run}
start=$SECONDS
python3 -c "import sys; sys.path.insert(0, '$here/benchmarks'); from data import make_dataset; \
print(make_dataset('$data', ${N_IMAGES:-8192}))" || exit 1

run() {  # run TAG NPROCS ARGS...
  local tag=$1 n=$2; shift 2
  if (( SECONDS - start > budget )); then echo "== $tag on $n: skipped (budget)"; return; fi
  local log="$out.logs/$tag.$n.log" t0=$SECONDS
  # shellcheck disable=SC2086  # $torchrun is a command and its arguments
  timeout -k 10 "$run_timeout" $torchrun --standalone --nproc_per_node="$n" \
    "$here/examples/train_ddp.py" --data "$data" --epochs "$epochs" --batch-size "$batch" \
    "$@" --json "$out" --tag "$tag" >"$log" 2>&1
  echo "== $tag on $n ($((SECONDS - t0)) s, rc $?): $*"
  grep -E "^total" "$log" || tail -n 5 "$log"
}

for n in 1 2; do run synthetic_once "$n" --synthetic; done
for cfg in "$@"; do
  IFS='|' read -r tag args gpus <<<"$cfg"
  for n in ${gpus:-2}; do
    # shellcheck disable=SC2086  # $args is a list of arguments
    run "$tag" "$n" $args
  done
done
bash "$here/benchmarks/ddp_bisect.sh" --table "$out"
