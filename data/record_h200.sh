#!/usr/bin/env bash
# How the recorded H200 datasets were produced: the kit's own CLI, nothing else.
# Usage (on the GPU machine, from the repository root):  bash data/record_h200.sh forum sweep allocator overlap
set -euo pipefail
H2D=${H2D:-"python3 -m h2dlab.cli"}
REG_CONF="pinned_use_cuda_host_register:True,pinned_num_register_threads:8"

forum() {  # the forum protocol, each run in a fresh process: 3 in size order, 1 shuffled
  mkdir -p data/h200_forum
  for i in 1 2 3; do $H2D forum --out data/h200_forum/ascending-$i.csv.gz --no-progress; done
  $H2D forum --order shuffled --seed 1 --out data/h200_forum/shuffled-1.csv.gz --no-progress
}

sweep() {  # every strategy on powers of two; pageable and pinned_reuse on the forum's sizes
  mkdir -p data/h200_sweep
  $H2D measure --sizes 1KiB..4GiB --reps 10 --reps-large 3 --warmup 2 --order shuffled --seed 0 \
    --out data/h200_sweep/pow2.csv.gz --no-progress
  $H2D measure --sizes forum --strategies pageable,pinned_reuse --reps 10 --warmup 1 --order shuffled --seed 0 \
    --out data/h200_sweep/forum-sizes.csv.gz --no-progress
}

interleaved() {  # the power-of-two sweep again, reps interleaved across cells in shuffled rounds
  mkdir -p data/h200_sweep
  $H2D measure --sizes 1KiB..4GiB --reps 10 --reps-large 3 --warmup 2 --order interleaved --seed 1 \
    --out data/h200_sweep/pow2-interleaved.csv.gz --no-progress
}

allocator() {  # what explains spikes: the host cache warm or emptied, cudaHostRegister pinning, empty_cache
  mkdir -p data/h200_allocator
  local pin="--sizes forum --strategies pin_then_copy --reps 3 --warmup 0 --order ascending --no-progress"
  $H2D measure $pin --out data/h200_allocator/pin-warm.csv.gz
  $H2D measure $pin --empty-host-cache --out data/h200_allocator/pin-emptied.csv.gz
  PYTORCH_CUDA_ALLOC_CONF=$REG_CONF $H2D measure $pin --out data/h200_allocator/pin-register-warm.csv.gz
  PYTORCH_CUDA_ALLOC_CONF=$REG_CONF $H2D measure $pin --empty-host-cache --out data/h200_allocator/pin-register-emptied.csv.gz
  local dev="--sizes 1KiB..1GiB --strategies pageable,pinned_reuse --reps 10 --reps-large 5 --warmup 1 --no-progress"
  $H2D measure $dev --out data/h200_allocator/device-cache-kept.csv.gz
  $H2D measure $dev --empty-cache --out data/h200_allocator/device-empty-cache.csv.gz
}

overlap() {  # timelines of a copy beside compute, for the primer
  mkdir -p data/h200_overlap
  $H2D overlap --size 256MiB --reps 5 --out data/h200_overlap/overlap.csv.gz
}

concurrent() {  # on the 2-GPU host (kind nvidia-h200-x2): 1 then 2 GPUs copying at once
  mkdir -p data/h200x2_concurrent
  $H2D measure --gpus 1..2 --strategies pinned_reuse,pageable,staged --sizes 64MiB..1GiB --reps 10 --reps-large 5 \
    --warmup 2 --out data/h200x2_concurrent/concurrent.csv.gz --no-progress
}

for step in "$@"; do
  echo "== $step $(date -u +%FT%TZ)"
  "$step"
done
