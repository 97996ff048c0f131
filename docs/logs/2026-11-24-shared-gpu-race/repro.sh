#!/usr/bin/env bash
# Two ranks on one GPU: the IpcBuffer zeroing race before and after the fix, then collbench p2p beside OSU.
set -o pipefail
source .gpu-box/env.sh
B=.gpu-box/bin
run() { echo; echo "=== $*"; timeout "${T:-240}" "$@"; echo "=== rc=$?"; }
cmpi() { bash -c 'source .gpu-box/env.sh; cuda_mpirun "$@"' _ "$@"; }
export -f cmpi 2>/dev/null
{
date -u; gpu_box_info
echo "## 1. IpcBuffer zeroing with the legacy stream held up (unfixed, then fixed)"
run $B/unfixed/collectives_core_lib --ignored ipc_buffer_zeroing
run $B/fixed/collectives_core_lib --ignored ipc_buffer_zeroing
echo "## 2. cuda_mpi_collectives, 2 ranks sharing GPU 0"
for v in unfixed fixed; do
  run mpirun -n 2 -x COLLECTIVES_EXPECT_CUDA_AWARE=0 $B/$v/cuda_mpi_collectives
  run cmpi -n 2 -x COLLECTIVES_EXPECT_CUDA_AWARE=1 $B/$v/cuda_mpi_collectives
done
} > $OUT/tests.log 2>&1
grep -E "^=== |passed|FAIL|fail|wrong|cuIpc" $OUT/tests.log | head -80
( bash .gpu-box/peers/build.sh /tmp/peers gpu > $OUT/peers-build.log 2>&1; echo "peers build rc=$?" )
OSU=$(find /tmp/peers/omb -name osu_bw -path '*pt2pt*' | head -1); OSUC=$(find /tmp/peers/omb-cuda-aware -name osu_bw -path '*pt2pt*' | head -1)
echo "osu: $OSU $OSUC"
{
echo "## 3. p2p, 2 ranks sharing GPU 0, same run"
for v in unfixed fixed; do
  C=$B/collbench; [ $v = unfixed ] && C=$B/unfixed/collbench
  T=200 run cmpi -n 2 $C p2p --backend cuda-mpi -b 1 -e 4M -n 100 -w 10 -c 1
  T=200 run mpirun -n 2 $C p2p --backend mpi-staged -b 1 -e 4M -n 100 -w 10 -c 1
  T=200 run mpirun -n 2 $C p2p --backend mpi-staged --test bw --window 1 -b 1 -e 4M -n 100 -w 10 -c 1
done
T=120 run cmpi -n 2 $OSUC -d cuda -c -m 1:4194304 -i 100 -x 10 D D
T=120 run mpirun -n 2 $OSU -d cuda -c -m 1:4194304 -i 100 -x 10 D D
T=120 run cmpi -n 2 ${OSUC%osu_bw}osu_latency -d cuda -c -m 1:4194304 -i 100 -x 10 D D
} > $OUT/p2p.log 2>&1
grep -vE "^\s*$" $OUT/p2p.log | tail -150
