#!/usr/bin/env bash
# bash docs/logs/2026-11-27-stable/run.sh OUT ROUNDS LIB...   (from the checkout, .gpu-box/ staged)
# The whole halo exchange (interpose_bench --only halo-3d, 2 ranks, the CUDA-aware Open MPI),
# preloaded with each library LIB (a path) in turn, direct path on, then the first LIB with
# the direct path off; ROUNDS times. Then the first LIB once more with the profile, the
# persistent exchange alone, direct path on. Each job prints its own contiguous baseline.
set -u
out="$1"; rounds="$2"; shift 2
mkdir -p "$out"
source .gpu-box/env.sh
gpu_box_info > "$out/machine.txt" 2>&1
cat /sys/devices/system/clocksource/clocksource0/current_clocksource >> "$out/machine.txt" 2>&1
exe=/tmp/interpose_bench
mpicc -O2 -o "$exe" -DUSE_CUDA -I/usr/local/cuda/include .gpu-box/interpose/interpose_bench.c \
  -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
job() {  # LIB VAR=VALUE... -- ARGS...
  local lib="$1"; shift
  local vars=() names=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do vars+=("$1"); names+=(-x "${1%%=*}"); shift; done
  shift
  echo "\$ ${vars[*]} mpirun -n 2 -x LD_PRELOAD=$lib interpose_bench $*"
  env "${vars[@]}" LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} \
    timeout 300 /opt/ompi-cuda/bin/mpirun -n 2 --allow-run-as-root --oversubscribe \
    -x LD_LIBRARY_PATH "${names[@]}" -x LD_PRELOAD="$lib" "$exe" "$@"
}
for round in $(seq "$rounds"); do
  for lib in "$@"; do
    job "$PWD/$lib" COLLECTIVES_INTERPOSE_DIRECT=1 -- --budget 0.5 --only halo-3d
  done
  job "$PWD/$1" COLLECTIVES_INTERPOSE_DIRECT=0 -- --budget 0.5 --only halo-3d
done > "$out/interpose-halo.txt" 2>&1
grep -E "^\\$|bench" "$out/interpose-halo.txt"
job "$PWD/$1" COLLECTIVES_INTERPOSE_DIRECT=1 COLLECTIVES_INTERPOSE_PROFILE=1 -- --budget 0.5 --only 'MPI_Startall/MPI_Waitall halo-3d' \
  > "$out/interpose-persistent-profile.txt" 2>&1
grep -E "^\\$|bench|r0\] profile" "$out/interpose-persistent-profile.txt" | head -40
