#!/usr/bin/env bash
# One GPU, one job, after `Communicator::Memory` replaced the per-communicator buffer type: the NCCL
# and MPI-device test binaries (the device backends under both MPIs: system Open MPI, not
# CUDA-aware, and the CUDA-aware build), the device examples, and on the box's 16-core host the
# 8 B all-reduce of the library against raw MPI_Allreduce and raw ncclAllReduce, interleaved.
# Run from the directory that holds .gpu-box/:  bash docs/logs/2026-11-24-memory-space/run.sh OUT
set -uo pipefail
out="${1:?usage: run.sh OUT}"; mkdir -p "$out"
source .gpu-box/env.sh
# Large staged binaries travel as NAME.xz (cargo xtask gpu-stage); unpack them once.
for packed in .gpu-box/bin/*.xz .gpu-box/tests/*.xz; do [ -e "$packed" ] && [ ! -e "${packed%.xz}" ] && xz -dk "$packed"; done
B=.gpu-box/bin; T=.gpu-box/tests
gpu_box_info > "$out/machine.txt" 2>&1
cmpi=/opt/ompi-cuda/bin/mpirun
{
  echo "\$ mpirun -n 1 nccl_collectives"; timeout 200 mpirun -n 1 $T/nccl_collectives-* 2>&1 | grep -vE "^test .* ok$"
  echo "\$ mpirun -n 1 nccl_register"; timeout 100 mpirun -n 1 $T/nccl_register-* 2>&1 | grep -vE "^test .* ok$"
  echo "\$ COLLECTIVES_EXPECT_CUDA_AWARE=0 mpirun -n 2 cuda_mpi_collectives (2 ranks on GPU 0)"
  timeout 240 mpirun -n 2 -x COLLECTIVES_EXPECT_CUDA_AWARE=0 $T/cuda_mpi_collectives-* 2>&1 | grep -vE "^test .* ok$"
  echo "\$ COLLECTIVES_EXPECT_CUDA_AWARE=1 cuda_mpirun -n 2 cuda_mpi_collectives (2 ranks on GPU 0)"
  timeout 300 $cmpi --allow-run-as-root -n 2 -x LD_LIBRARY_PATH=/opt/ompi-cuda/lib -x COLLECTIVES_EXPECT_CUDA_AWARE=1 $T/cuda_mpi_collectives-* 2>&1 | grep -vE "^test .* ok$|cuMemHostRegister|^ *(Host|cuMemHostRegister return|Address|Size|Error|NVIDIA)|^-{5,}"
  for ex in 06_nccl_all_reduce 07_nccl_all_gather_v; do
    echo "\$ mpirun -n 1 $ex"; timeout 60 mpirun -n 1 $B/$ex 2>&1 | tail -5
  done
  echo "\$ mpirun -n 2 11_persistent_jacobi"; timeout 60 mpirun -n 2 $B/11_persistent_jacobi 2>&1 | tail -3
} > "$out/tests.txt" 2>&1
grep -E "mpi-tests|FAILED|panicked" "$out/tests.txt"
small=(-b 8 -e 64K -f 8 -n 2000 -w 200 -c 1)
{
  echo "\$ mpirun -n 2 --bind-to core collbench allreduce --backend mpi --baseline raw ${small[*]}"
  timeout 120 mpirun -n 2 --bind-to core $B/collbench allreduce --backend mpi --baseline raw "${small[@]}" 2>&1
  echo "\$ mpirun -n 1 collbench allreduce --backend nccl --baseline raw ${small[*]}"
  timeout 120 mpirun -n 1 $B/collbench allreduce --backend nccl --baseline raw "${small[@]}" 2>&1
} > "$out/overhead.txt" 2>&1
grep -E "^ +8 |overhead|raw" "$out/overhead.txt" | head -20
