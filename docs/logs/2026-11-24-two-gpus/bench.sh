#!/usr/bin/env bash
# Every NCCL collective of collbench beside nccl-tests' same *_perf, 2 ranks, one GPU each, in one
# job; then the conformance binary over NCCL's socket transport, and the halo exchange on 2 ranks.
# Run from the directory that holds .gpu-box/ (staged by `cargo xtask gpu-stage`):
#   bash docs/logs/2026-11-24-two-gpus/bench.sh OUTDIR
set -uo pipefail
out="${1:?usage: bench.sh OUTDIR}"; mkdir -p "$out"
source .gpu-box/env.sh
B=.gpu-box/bin
{ gpu_box_info; nvidia-smi topo -m; } 2>&1 | tee "$out/machine.txt"
peers=/tmp/peers; mkdir -p $peers
tar -xJf .gpu-box/peers/nccl-tests-2.19.6.tar.xz -C $peers
make -C $peers/nccl-tests -j"$(nproc)" MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" >$peers/build.log 2>&1 || tail -20 $peers/build.log
NT=$peers/nccl-tests/build
sizes=(-b 8 -e 1G -f 4 -n 20 -w 5 -c 1)
for pair in "allreduce all_reduce" "allgather all_gather" "reducescatter reduce_scatter" \
            "broadcast broadcast" "reduce reduce" "alltoall alltoall" "gather gather" \
            "scatter scatter" "sendrecv sendrecv"; do
  set -- $pair
  echo "### $1"
  echo "\$ mpirun -n 2 $2_perf -g 1 ${sizes[*]}"
  timeout 120 mpirun -n 2 $NT/$2_perf -g 1 "${sizes[@]}" 2>&1
  echo "\$ mpirun -n 2 collbench $1 --backend nccl ${sizes[*]}"
  timeout 120 mpirun -n 2 $B/collbench $1 --backend nccl "${sizes[@]}" 2>&1
done | tee "$out/collectives.txt"
{
  echo "### blocking latency, 8 B to 64 KiB: nccl-tests -z 1 beside collbench"
  echo "\$ mpirun -n 2 all_reduce_perf -g 1 -b 8 -e 64K -f 2 -n 200 -w 20 -z 1"
  timeout 120 mpirun -n 2 $NT/all_reduce_perf -g 1 -b 8 -e 64K -f 2 -n 200 -w 20 -z 1 2>&1
  echo "\$ mpirun -n 2 all_reduce_perf -g 1 -b 8 -e 64K -f 2 -n 200 -w 20"
  timeout 120 mpirun -n 2 $NT/all_reduce_perf -g 1 -b 8 -e 64K -f 2 -n 200 -w 20 2>&1
  echo "\$ mpirun -n 2 collbench allreduce --backend nccl -b 8 -e 64K -f 2 -n 200 -w 20"
  timeout 120 mpirun -n 2 $B/collbench allreduce --backend nccl -b 8 -e 64K -f 2 -n 200 -w 20 2>&1
  echo "\$ mpirun -n 2 collbench allreduce --backend nccl --baseline raw -b 8 -e 64K -f 2 -n 200 -w 20"
  timeout 120 mpirun -n 2 $B/collbench allreduce --backend nccl --baseline raw -b 8 -e 64K -f 2 -n 200 -w 20 2>&1
} | tee "$out/latency.txt"
{
  echo "### conformance over NCCL's socket transport (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1)"
  echo "\$ NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 mpirun -n 2 nccl_collectives"
  timeout 300 mpirun -n 2 -x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1 .gpu-box/tests/nccl_collectives-* 2>&1 | grep -v "^test .* ok$"
} | tee "$out/socket.txt"
{
  echo "### halo, 2 ranks (2x1x1), 256^3 cells per rank, radius 3, 8 quantities"
  echo "\$ mpirun -n 2 collbench halo --transport auto,nccl --chunks 1 -n 20 -w 5"
  timeout 180 mpirun -n 2 $B/collbench halo --transport auto,nccl --chunks 1 -n 20 -w 5 2>&1
} | tee "$out/halo.txt"
