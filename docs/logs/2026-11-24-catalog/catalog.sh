#!/usr/bin/env bash
# The bad-input catalog on the device backends: 2 ranks sharing GPU 0 (cuda-mpi, mpi-staged) under both MPIs, NCCL on 1 rank.
set -o pipefail
source .gpu-box/env.sh
B=.gpu-box/bin/cat; CM=.gpu-box/cmpi
run() { echo; echo "=== $*"; timeout "${T:-300}" "$@"; echo "=== rc=$?"; }
{
date -u; nvidia-smi -L
run mpirun -n 2 -x COLLECTIVES_EXPECT_CUDA_AWARE=0 $B/cuda_mpi_collectives
run $CM -n 2 -x COLLECTIVES_EXPECT_CUDA_AWARE=1 $B/cuda_mpi_collectives
run mpirun -n 1 $B/nccl_collectives
run mpirun -n 1 -x COLLECTIVES_EXPECT_CUDA_AWARE=0 $B/cuda_mpi_collectives
} > $OUT/catalog.log 2>&1
grep -E "^=== |mpi-tests|FAILED|^\[rank" $OUT/catalog.log | head -120
