#!/usr/bin/env bash
# NcclComm on the context's default stream: the GPU suite (no sanitizer), then the library's
# all-reduce against the raw ncclAllReduce on the same handle and buffers, 1 rank, blocking (-z 1)
# and back to back (-z 0), 8 B to 64 KiB, with cudarc's event tracking on (the default).
# Run from the directory that holds .gpu-box/:  bash docs/logs/2026-11-24-nccl-default-stream/run.sh OUT
set -uo pipefail
out="${1:?usage: run.sh OUT}"; mkdir -p "$out"
source .gpu-box/env.sh
B=.gpu-box/bin
gpu_box_info > "$out/machine.txt" 2>&1
bash .gpu-box/run-all.sh --skip-sanitizer > "$out/suite.txt" 2>&1
tail -8 "$out/suite.txt"
{
  for z in 1 0; do
    echo "\$ mpirun -n 1 collbench allreduce --backend nccl -b 8 -e 64K -f 2 -n 2000 -w 200 -z $z --baseline raw"
    mpirun -n 1 $B/collbench allreduce --backend nccl -b 8 -e 64K -f 2 -n 2000 -w 200 -z $z --baseline raw 2>&1
  done
} > "$out/overhead.txt"
grep -E "tracking|^ +[0-9]|ovh|overhead" "$out/overhead.txt" | head -80
