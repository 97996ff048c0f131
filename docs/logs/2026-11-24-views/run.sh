#!/usr/bin/env bash
# One GPU, one job, after device buffers became trait objects over cudarc's DevicePtr (views of
# part of an allocation accepted): the device test binaries (NCCL on 1 rank; cuda-mpi and
# mpi-staged on 2 ranks sharing the GPU, under the system Open MPI and the CUDA-aware one), the
# views case under compute-sanitizer's memcheck, the device examples, and collbench's check of
# every collective on the device backends (#wrong must be 0; the staged copies were rewritten).
# Run from the directory that holds .gpu-box/:  bash docs/logs/2026-11-24-views/run.sh OUT
set -uo pipefail
out="${1:?usage: run.sh OUT}"; mkdir -p "$out"
source .gpu-box/env.sh
for packed in .gpu-box/bin/*.xz .gpu-box/tests/*.xz; do [ -e "$packed" ] && [ ! -e "${packed%.xz}" ] && xz -dk "$packed"; done
B=.gpu-box/bin; T=.gpu-box/tests
gpu_box_info > "$out/machine.txt" 2>&1
cmpi="/opt/ompi-cuda/bin/mpirun --allow-run-as-root -x LD_LIBRARY_PATH=/opt/ompi-cuda/lib"
quiet='^test .* ok$|cuMemHostRegister|cuIpcGetMemHandle|^ *(Host|Address|Size|Error|NVIDIA|address|Check the|of the node|cannot be used|Registration cache)|^-{5,}|^\[vm:|^The call to'
{
  echo "\$ mpirun -n 1 nccl_collectives"; timeout 200 mpirun -n 1 $T/nccl_collectives-* 2>&1 | grep -vE "$quiet|skipped \(needs"
  echo "\$ mpirun -n 1 nccl_register"; timeout 100 mpirun -n 1 $T/nccl_register-* 2>&1 | grep -vE "$quiet"
  echo "\$ COLLECTIVES_EXPECT_CUDA_AWARE=0 mpirun -n 2 cuda_mpi_collectives"
  timeout 240 mpirun -n 2 -x COLLECTIVES_EXPECT_CUDA_AWARE=0 $T/cuda_mpi_collectives-* 2>&1 | grep -vE "$quiet"
  echo "\$ COLLECTIVES_EXPECT_CUDA_AWARE=1 cuda_mpirun -n 2 cuda_mpi_collectives"
  timeout 300 $cmpi -n 2 -x COLLECTIVES_EXPECT_CUDA_AWARE=1 $T/cuda_mpi_collectives-* 2>&1 | grep -vE "$quiet"
  echo "\$ MPI_TESTS_FILTER=views mpirun -n 1 compute-sanitizer --tool memcheck nccl_collectives"
  timeout 120 mpirun -n 1 -x MPI_TESTS_FILTER=views compute-sanitizer --tool memcheck $T/nccl_collectives-* 2>&1 | grep -vE "$quiet" | tail -6
  echo "\$ MPI_TESTS_FILTER=views mpirun -n 2 compute-sanitizer --tool memcheck cuda_mpi_collectives"
  timeout 180 mpirun -n 2 -x MPI_TESTS_FILTER=views -x COLLECTIVES_EXPECT_CUDA_AWARE=0 compute-sanitizer --tool memcheck $T/cuda_mpi_collectives-* 2>&1 | grep -vE "$quiet" | tail -8
  for ex in 06_nccl_all_reduce 07_nccl_all_gather_v 09_nccl_halo_exchange; do
    echo "\$ mpirun -n 1 $ex"; timeout 60 mpirun -n 1 $B/$ex 2>&1 | tail -3
  done
} > "$out/tests.txt" 2>&1
grep -E "mpi-tests|FAILED|panicked|ERROR SUMMARY" "$out/tests.txt"
{
  for c in allreduce reduce broadcast allgather allgatherv gather gatherv scatter scatterv reducescatter alltoall alltoallv; do
    echo "\$ mpirun -n 2 collbench $c --backend mpi-staged -b 8 -e 4M -f 16 -n 5 -w 1"
    timeout 60 mpirun -n 2 $B/collbench $c --backend mpi-staged -b 8 -e 4M -f 16 -n 5 -w 1 2>&1 | grep -E "wrong values|^ +4194304 |Error|error"
  done
  echo "\$ cuda_mpirun -n 2 collbench allreduce --backend cuda-mpi -b 8 -e 4M -f 16 -n 5 -w 1 --persistent"
  timeout 60 $cmpi -n 2 $B/collbench allreduce --backend cuda-mpi -b 8 -e 4M -f 16 -n 5 -w 1 --persistent 2>&1 | grep -E "wrong values|Error|error"
  echo "\$ mpirun -n 1 collbench allreduce --backend nccl -b 8 -e 4M -f 16 -n 5 -w 1 --persistent"
  timeout 60 mpirun -n 1 $B/collbench allreduce --backend nccl -b 8 -e 4M -f 16 -n 5 -w 1 --persistent 2>&1 | grep -E "wrong values|Error|error"
} > "$out/collbench.txt" 2>&1
grep -c "0 OK" "$out/collbench.txt"; grep -vE "0 OK|^\\$|^ +4194304" "$out/collbench.txt" | head
# The NCCL memcheck above reports NCCL's own probing (cudaFuncGetAttributes returning
# cudaErrorNoKernelImageForDevice, 8 times) as API errors; sanitizer.txt re-runs it with
# `--report-api-errors no`, as the project's GPU suite runs NCCL programs: 0 errors.
# (collbench's `allgatherv` is its own subcommand, without `--backend`: that line's error is the
# script's, not the library's.)
