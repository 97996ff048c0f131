#!/usr/bin/env bash
# bash docs/logs/2026-11-28-quiet/halo-ab.sh OUT ROUNDS LIB_A LIB_B [ONLY]   (from the checkout, .gpu-box/ staged)
# The whole halo exchange alone (interpose_bench --budget 0.5 --only ONLY, by default halo-3d;
# 2 ranks, the CUDA-aware Open MPI, the direct path on), preloaded with LIB_A and LIB_B in turn,
# the order swapped every round (A B, B A, ...), ROUNDS rounds; each job prints its own
# contiguous baseline. Into OUT/halo-ab.txt (ONLY halo-3d) or OUT/ab.txt.
set -u
out="$1"; rounds="$2"; a="$3"; b="$4"; only="${5:-halo-3d}"
file=halo-ab.txt; [ "$only" = halo-3d ] || file=ab.txt
mkdir -p "$out"
source .gpu-box/env.sh
exe=/tmp/interpose_bench
mpicc -O2 -o "$exe" -DUSE_CUDA -I/usr/local/cuda/include .gpu-box/interpose/interpose_bench.c \
  -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
job() {
  echo "\$ COLLECTIVES_INTERPOSE_DIRECT=1 mpirun -n 2 -x LD_PRELOAD=$1 interpose_bench --budget 0.5 --only '$only'"
  COLLECTIVES_INTERPOSE_DIRECT=1 LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} \
    timeout 120 /opt/ompi-cuda/bin/mpirun -n 2 --allow-run-as-root --oversubscribe \
    -x LD_LIBRARY_PATH -x COLLECTIVES_INTERPOSE_DIRECT -x LD_PRELOAD="$1" "$exe" --budget 0.5 --only "$only" 2>&1 | grep '^bench'
}
for round in $(seq "$rounds"); do
  if [ $((round % 2)) = 1 ]; then job "$PWD/$a"; job "$PWD/$b"; else job "$PWD/$b"; job "$PWD/$a"; fi
done > "$out/$file" 2>&1
