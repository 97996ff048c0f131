#!/usr/bin/env bash
# bash docs/logs/2026-11-28-quiet/log.sh OUT LIB ONLY   (from the checkout, .gpu-box/ staged)
# One benchmark job (interpose_bench --budget 0.5 --only ONLY, 2 ranks, the CUDA-aware Open MPI)
# preloaded with LIB, the direct path on and its log on; the log compressed into OUT, and the
# count of each kind of log line that tells a message's way.
set -u
out="$1"; lib="$2"; only="$3"
mkdir -p "$out"
source .gpu-box/env.sh
exe=/tmp/interpose_bench
[ -x "$exe" ] || mpicc -O2 -o "$exe" -DUSE_CUDA -I/usr/local/cuda/include .gpu-box/interpose/interpose_bench.c \
  -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
name=$(echo "$only" | tr -c 'A-Za-z0-9\n' '-')
COLLECTIVES_INTERPOSE_DIRECT=1 COLLECTIVES_INTERPOSE_LOG=1 LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} \
  timeout 300 /opt/ompi-cuda/bin/mpirun -n 2 --allow-run-as-root --oversubscribe \
  -x LD_LIBRARY_PATH -x COLLECTIVES_INTERPOSE_DIRECT -x COLLECTIVES_INTERPOSE_LOG -x LD_PRELOAD="$PWD/$lib" \
  "$exe" --budget 0.5 --only "$only" > "$out/log-$name.txt" 2>&1
grep "^bench" "$out/log-$name.txt"
for mark in "bytes directly" "nothing through the MPI" "no ready message" "came through the MPI" \
    "asks for bytes" "its note came before" "read as empty"; do
  echo "$mark: $(grep -c "$mark" "$out/log-$name.txt")"
done
xz -f "$out/log-$name.txt"
