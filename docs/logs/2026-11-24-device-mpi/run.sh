#!/usr/bin/env bash
# One GPU, 2 ranks sharing it: every collective of collbench on the MPI device backends with its
# check (mpi-staged under the system Open MPI, cuda-mpi and mpi-staged under the CUDA-aware one),
# then OMB 7.4 built with CUDA beside `collbench --osu -d cuda` under the CUDA-aware Open MPI.
# Run from the directory that holds .gpu-box/:  bash docs/logs/2026-11-24-device-mpi/run.sh OUT
set -uo pipefail
out="${1:?usage: run.sh OUT}"; mkdir -p "$out"
source .gpu-box/env.sh
# Large staged binaries travel as NAME.xz (cargo xtask gpu-stage); unpack them once.
for packed in .gpu-box/bin/*.xz .gpu-box/tests/*.xz; do [ -e "$packed" ] && [ ! -e "${packed%.xz}" ] && xz -dk "$packed"; done
cb=.gpu-box/bin/collbench
( bash .gpu-box/peers/build.sh /tmp/peers gpu > "$out/build.txt" 2>&1 ) &
build=$!
CM=(/opt/ompi-cuda/bin/mpirun --allow-run-as-root -n 2 -x LD_LIBRARY_PATH)
names="allreduce allgather allgatherv reducescatter broadcast reduce alltoall alltoallv gather gatherv scatter scatterv sendrecv barrier"
{
  for c in $names; do
    echo "\$ mpirun -n 2 collbench coll $c --backend mpi-staged -b 8 -e 1M -f 32 -n 5 -w 1 -c 1"
    timeout 60 mpirun -n 2 $cb coll $c --backend mpi-staged -b 8 -e 1M -f 32 -n 5 -w 1 -c 1 2>&1 | grep -E "wrong|rror"
    for b in cuda-mpi mpi-staged; do
      echo "\$ cuda_mpirun -n 2 collbench coll $c --backend $b -b 8 -e 1M -f 32 -n 5 -w 1 -c 1"
      timeout 60 "${CM[@]}" $cb coll $c --backend $b -b 8 -e 1M -f 32 -n 5 -w 1 -c 1 2>&1 | grep -E "wrong|rror"
    done
  done
} > "$out/collectives.txt" 2>&1
grep -c "0 OK" "$out/collectives.txt"; grep -vE "0 OK|^\\$" "$out/collectives.txt" | head
wait $build
omb=/tmp/peers/omb-cuda-aware/libexec/osu-micro-benchmarks/mpi
run() { local name="$1"; shift; { echo "\$ cuda_mpirun -n 2 $*"; timeout 120 "${CM[@]}" "$@" 2>&1; } > "$out/$name.txt"; }
run osu_latency $omb/pt2pt/osu_latency -d cuda -m 1:4194304 D D
run collbench_latency $cb p2p --osu --test latency -d cuda -m 1:4194304
run osu_bw $omb/pt2pt/osu_bw -d cuda -m 1:4194304 D D
run collbench_bw $cb p2p --osu --test bw -d cuda -m 1:4194304
run osu_allreduce $omb/collective/osu_allreduce -d cuda -m 8:1048576 -f
run collbench_allreduce $cb allreduce --osu -d cuda -m 8:1048576 -f
tail -n 4 "$out"/osu_latency.txt "$out"/collbench_latency.txt
