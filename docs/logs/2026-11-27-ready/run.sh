#!/usr/bin/env bash
# bash docs/logs/2026-11-27-ready/run.sh OUT ROUNDS LIB...   (from the checkout, .gpu-box/ staged)
# The faces' MPI_Sendrecv and the whole halo exchange (interpose_bench --only 'MPI_Sendrecv
# face', then --only halo-3d; 2 ranks, the CUDA-aware Open MPI), preloaded with each library
# LIB (a path) in turn, direct path on, then the first LIB with the direct path off; ROUNDS
# times. Each job prints its own contiguous baseline.
set -u
out="$1"; rounds="$2"; shift 2
mkdir -p "$out"
source .gpu-box/env.sh
gpu_box_info > "$out/machine.txt" 2>&1
exe=/tmp/interpose_bench
mpicc -O2 -o "$exe" -DUSE_CUDA -I/usr/local/cuda/include .gpu-box/interpose/interpose_bench.c \
  -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
job() {  # LIB DIRECT ONLY
  echo "\$ COLLECTIVES_INTERPOSE_DIRECT=$2 mpirun -n 2 -x LD_PRELOAD=$1 interpose_bench --budget 0.5 --only '$3'"
  COLLECTIVES_INTERPOSE_DIRECT=$2 LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} \
    timeout 300 /opt/ompi-cuda/bin/mpirun -n 2 --allow-run-as-root --oversubscribe \
    -x LD_LIBRARY_PATH -x COLLECTIVES_INTERPOSE_DIRECT -x LD_PRELOAD="$1" "$exe" --budget 0.5 --only "$3"
}
for round in $(seq "$rounds"); do
  for only in 'MPI_Sendrecv face' halo-3d; do
    for lib in "$@"; do job "$PWD/$lib" 1 "$only"; done
    job "$PWD/$1" 0 "$only"
  done
done > "$out/interpose-ab.txt" 2>&1
grep -E "^\\$|bench" "$out/interpose-ab.txt"
