#!/usr/bin/env bash
# The NCCL deadline cases and every NCCL binary on 1 and 2 ranks, the GPU examples, then blocking
# latency (8 B to 64 KiB, -z 1) of collbench beside nccl-tests in the same job, twice.
# Run from the directory that holds .gpu-box/ (staged by `cargo xtask gpu-stage`):
#   bash docs/logs/2026-11-26-two-gpus/correctness.sh OUTDIR
set -uo pipefail
out="${1:?usage: correctness.sh OUTDIR}"; mkdir -p "$out"
source .gpu-box/env.sh
B=.gpu-box/bin
{ gpu_box_info; nvidia-smi topo -m; } > "$out/machine.txt" 2>&1
peers=/tmp/peers; mkdir -p $peers
( tar -xJf .gpu-box/peers/nccl-tests-2.19.6.tar.xz -C $peers &&
  make -C $peers/nccl-tests -j16 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > $peers/build.log 2>&1 || tail -20 $peers/build.log ) &
XTASK_MPI_TIMEOUT=150 bash .gpu-box/run-all.sh --skip-sanitizer --only nccl_ --only examples 2>&1 \
  | tee "$out/suite-nccl.log" | grep -v "^test .* ok$" | tail -60
wait
NT=$peers/nccl-tests/build
sz=(-b 8 -e 64K -f 8 -n 1000 -w 100 -c 1 -z 1)
{
for round in 1 2; do
  for t in "all_reduce allreduce" "sendrecv sendrecv"; do set -- $t
    echo "### round $round: $1"
    echo "\$ mpirun -n 2 $1_perf -g 1 ${sz[*]}"
    timeout 60 mpirun -n 2 $NT/$1_perf -g 1 "${sz[@]}"
    echo "\$ mpirun -n 2 collbench $2 --backend nccl --minmax ${sz[*]}"
    timeout 60 mpirun -n 2 $B/collbench $2 --backend nccl --minmax "${sz[@]}"
  done
  echo "\$ mpirun -n 2 collbench allreduce --backend nccl --baseline raw --minmax ${sz[*]}"
  timeout 60 mpirun -n 2 $B/collbench allreduce --backend nccl --baseline raw --minmax "${sz[@]}"
done
} > "$out/latency.txt" 2>&1
grep -E "^#|^\\$|^ +(8|64|512|4096|32768|65536) " "$out/latency.txt" | head -120
