#!/usr/bin/env bash
# The one-shot all-reduce on 1-4 GPUs: its test binary (every type and operation against answers
# computed on the host, 10,000 calls back to back, a rank that never comes), then the example that
# times it beside NCCL's all-reduce on the same communicator, and nccl-tests in the same job.
# Run from the directory that holds .gpu-box/ (the test binary and example staged into it):
#   bash docs/logs/2026-11-26-one-shot/one_shot.sh OUTDIR [RANKS...]
set -uo pipefail
out="${1:?usage: one_shot.sh OUTDIR [RANKS...]}"; shift; mkdir -p "$out"
if [ $# -gt 0 ]; then ranks=("$@"); else ranks=(1 2 3 4); fi
source .gpu-box/env.sh
export OMPI_MCA_orte_allowed_exit_without_sync=1 ONE_SHOT_EXPECT_READY=1
peers=/tmp/peers; NT=$peers/nccl-tests/build
( [ -x $NT/all_reduce_perf ] || { mkdir -p $peers && tar -xJf .gpu-box/peers/nccl-tests-2.19.6.tar.xz -C $peers &&
  make -C $peers/nccl-tests -j16 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > $peers/build.log 2>&1; } ) &
for n in "${ranks[@]}"; do
  echo "\$ ONE_SHOT_EXPECT_READY=1 mpirun -n $n nccl_one_shot"; SECONDS=0
  timeout 150 mpirun -n $n -x ONE_SHOT_EXPECT_READY -x OMPI_MCA_orte_allowed_exit_without_sync \
    .gpu-box/tests/nccl_one_shot-* 2>&1 | grep -v "^test .* ok$"
  echo "exit ${PIPESTATUS[0]} after $SECONDS s"
done > "$out/test.log" 2>&1
cat "$out/test.log"
wait
for n in "${ranks[@]}"; do
  [ "$n" -lt 2 ] && continue
  echo "\$ mpirun -n $n 12_nccl_one_shot"
  timeout 120 mpirun -n $n .gpu-box/bin/12_nccl_one_shot 2>&1
  for z in 1 0; do
    echo "\$ mpirun -n $n all_reduce_perf -g 1 -b 8 -e 256K -f 8 -n 2000 -w 200 -c 1 -z $z"
    timeout 60 mpirun -n $n $NT/all_reduce_perf -g 1 -b 8 -e 256K -f 8 -n 2000 -w 200 -c 1 -z $z 2>&1 | grep -vE "^#  Rank|^# *$"
  done
done > "$out/latency.txt" 2>&1
grep -vE "^# (nThread|Using|Collective|Out of|Avg)|^#$|nccl-tests version" "$out/latency.txt"
