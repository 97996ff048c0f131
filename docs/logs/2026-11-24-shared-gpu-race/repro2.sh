#!/usr/bin/env bash
# The CUDA-aware half: two ranks sharing GPU 0 under the CUDA-aware Open MPI, unfixed then fixed.
set -o pipefail
source .gpu-box/env.sh
B=.gpu-box/bin; CM=.gpu-box/cmpi
run() { echo; echo "=== $*"; timeout "${T:-240}" "$@"; echo "=== rc=$?"; }
{
date -u
for v in unfixed fixed fixed fixed; do
  run $CM -n 2 -x COLLECTIVES_EXPECT_CUDA_AWARE=1 $B/$v/cuda_mpi_collectives
done
run mpirun -n 2 -x COLLECTIVES_EXPECT_CUDA_AWARE=0 $B/fixed/cuda_mpi_collectives
run mpirun -n 2 -x COLLECTIVES_EXPECT_CUDA_AWARE=0 $B/fixed/cuda_mpi_collectives
} > $OUT/tests-cuda-aware.log 2>&1
grep -E "^=== |mpi-tests|FAILED|cuIpc" $OUT/tests-cuda-aware.log | head -60
( bash .gpu-box/peers/build.sh /tmp/peers gpu > /dev/null 2>&1; echo "peers build rc=$?" )
P=/tmp/peers/omb-cuda-aware/libexec/osu-micro-benchmarks/mpi/pt2pt
{
T=200 run $CM -n 2 $B/unfixed/collbench p2p --backend cuda-mpi -b 1 -e 4M -n 100 -w 10 -c 1
T=200 run $CM -n 2 $B/collbench p2p --backend cuda-mpi -b 1 -e 4M -n 100 -w 10 -c 1
T=200 run $CM -n 2 $B/collbench p2p --backend mpi-staged -b 1 -e 4M -n 100 -w 10 -c 1
T=120 run $CM -n 2 $P/osu_bw -d cuda -c -m 1:4194304 -i 100 -x 10 D D
T=120 run $CM -n 2 $P/osu_latency -d cuda -c -m 1:4194304 -i 100 -x 10 D D
} > $OUT/p2p-cuda-aware.log 2>&1
grep -vE "^\s*$|^#  " $OUT/p2p-cuda-aware.log | tail -140
