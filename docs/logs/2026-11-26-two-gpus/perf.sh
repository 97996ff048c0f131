#!/usr/bin/env bash
# Issue 14's runs on 2 GPUs, collbench beside nccl-tests in the same job: registered buffers and
# symmetric windows (-R 1, -R 2), persistent plans against CUDA graphs (-G), and every collective's
# bus bandwidth from 8 B to 512 MiB.
#   bash docs/logs/2026-11-26-two-gpus/perf.sh OUTDIR
set -uo pipefail
out="${1:?usage: perf.sh OUTDIR}"; mkdir -p "$out"
source .gpu-box/env.sh
B=.gpu-box/bin
peers=/tmp/peers
if [ ! -x $peers/nccl-tests/build/all_reduce_perf ]; then
  mkdir -p $peers; tar -xJf .gpu-box/peers/nccl-tests-2.19.6.tar.xz -C $peers
  make -C $peers/nccl-tests -j16 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > $peers/build.log 2>&1 || tail -20 $peers/build.log
fi
NT=$peers/nccl-tests/build
small=(-b 8 -e 1M -f 8 -n 200 -w 20 -c 1)
{
  echo "### registration: all-reduce, back to back"
  for R in 1 2; do
    echo "\$ mpirun -n 2 all_reduce_perf -g 1 -R $R ${small[*]}"
    timeout 60 mpirun -n 2 $NT/all_reduce_perf -g 1 -R $R "${small[@]}"
  done
  echo "\$ mpirun -n 2 all_reduce_perf -g 1 ${small[*]}"
  timeout 60 mpirun -n 2 $NT/all_reduce_perf -g 1 "${small[@]}"
  echo "\$ mpirun -n 2 collbench allreduce --backend nccl --register all -z 0 ${small[*]}"
  timeout 90 mpirun -n 2 $B/collbench allreduce --backend nccl --register all -z 0 "${small[@]}"
  echo "### persistent plans against CUDA graphs"
  echo "\$ mpirun -n 2 all_reduce_perf -g 1 -G 1 ${small[*]}"
  timeout 60 mpirun -n 2 $NT/all_reduce_perf -g 1 -G 1 "${small[@]}"
  echo "\$ mpirun -n 2 collbench allreduce --backend nccl --persistent -z 0 ${small[*]}"
  timeout 90 mpirun -n 2 $B/collbench allreduce --backend nccl --persistent -z 0 "${small[@]}"
} > "$out/register-persistent.txt" 2>&1
big=(-b 8 -e 512M -f 8 -n 20 -w 5 -c 1)
for pair in "allreduce all_reduce" "allgather all_gather" "reducescatter reduce_scatter" \
            "broadcast broadcast" "reduce reduce" "alltoall alltoall" "gather gather" \
            "scatter scatter" "sendrecv sendrecv"; do
  set -- $pair
  echo "### $1"
  echo "\$ mpirun -n 2 $2_perf -g 1 ${big[*]}"
  timeout 90 mpirun -n 2 $NT/$2_perf -g 1 "${big[@]}" 2>&1
  echo "\$ mpirun -n 2 collbench $1 --backend nccl ${big[*]}"
  timeout 90 mpirun -n 2 $B/collbench $1 --backend nccl "${big[@]}" 2>&1
done > "$out/collectives.txt" 2>&1
grep -E "^###|^\\$| 134217728 | 536870912 " "$out/collectives.txt" | head -80
grep -E "^###|^\\$|^ +(8|64|512|4096|32768|262144) " "$out/register-persistent.txt" | head -80
