#!/usr/bin/env bash
# One GPU, one job: the NCCL and MPI-device test binaries after the Checked/registration/record
# merges; the persistent plan (CUDA graph) beside nccl-tests -G and registered buffers beside
# nccl-tests -R, 1 rank; the per-call record of an NCCL example.
# Run from the directory that holds .gpu-box/:  bash docs/logs/2026-11-24-one-gpu/run.sh OUT
set -uo pipefail
out="${1:?usage: run.sh OUT}"; mkdir -p "$out"
source .gpu-box/env.sh
# Large staged binaries travel as NAME.xz (cargo xtask gpu-stage); unpack them once.
for packed in .gpu-box/bin/*.xz .gpu-box/tests/*.xz; do [ -e "$packed" ] && [ ! -e "${packed%.xz}" ] && xz -dk "$packed"; done
B=.gpu-box/bin; T=.gpu-box/tests
gpu_box_info > "$out/machine.txt" 2>&1
peers=/tmp/peers; mkdir -p $peers
tar -xJf .gpu-box/peers/nccl-tests-2.19.6.tar.xz -C $peers
( make -C $peers/nccl-tests -j12 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" >$peers/build.log 2>&1 || tail -20 $peers/build.log ) &
build=$!
{
  echo "\$ mpirun -n 1 nccl_collectives"; timeout 200 mpirun -n 1 $T/nccl_collectives-* 2>&1 | grep -vE "^test .* ok$"
  echo "\$ mpirun -n 1 nccl_register"; timeout 100 mpirun -n 1 $T/nccl_register-* 2>&1 | grep -vE "^test .* ok$"
  echo "\$ COLLECTIVES_EXPECT_CUDA_AWARE=0 mpirun -n 2 cuda_mpi_collectives (2 ranks on GPU 0)"
  timeout 240 mpirun -n 2 -x COLLECTIVES_EXPECT_CUDA_AWARE=0 $T/cuda_mpi_collectives-* 2>&1 | grep -vE "^test .* ok$"
  echo "\$ COLLECTIVES_RECORD=1 mpirun -n 1 06_nccl_all_reduce"
  timeout 60 mpirun -n 1 -x COLLECTIVES_RECORD=1 $B/06_nccl_all_reduce 2>&1 | tail -25
} > "$out/tests.txt" 2>&1
grep -E "mpi-tests|FAILED" "$out/tests.txt"
wait $build
NT=$peers/nccl-tests/build
mid=(-b 8 -e 1M -f 4 -n 1000 -w 100 -c 1)
{
  echo "### persistent, 1 rank"
  echo "\$ mpirun -n 1 all_reduce_perf -g 1 -b 8 -e 1M -f 4 -n 1 -w 100 -c 1 -G 100"; timeout 60 mpirun -n 1 $NT/all_reduce_perf -g 1 -b 8 -e 1M -f 4 -n 1 -w 100 -c 1 -G 100 2>&1 | grep -E "^ +[0-9]"
  echo "\$ mpirun -n 1 all_reduce_perf -g 1 ${mid[*]}"; timeout 60 mpirun -n 1 $NT/all_reduce_perf -g 1 "${mid[@]}" 2>&1 | grep -E "^ +[0-9]"
  echo "\$ mpirun -n 1 collbench allreduce --backend nccl --persistent -z 1 ${mid[*]}"; timeout 120 mpirun -n 1 $B/collbench allreduce --backend nccl --persistent -z 1 "${mid[@]}" 2>&1
  echo "\$ mpirun -n 1 collbench allreduce --backend nccl -z 0 ${mid[*]}"; timeout 120 mpirun -n 1 $B/collbench allreduce --backend nccl -z 0 "${mid[@]}" 2>&1 | grep -E "^ +[0-9]|tracking"
  echo "### registration, 1 rank"
  for R in 0 1 2; do echo "\$ mpirun -n 1 all_reduce_perf -g 1 ${mid[*]} -R $R"; timeout 60 mpirun -n 1 $NT/all_reduce_perf -g 1 "${mid[@]}" -R $R 2>&1 | grep -E "^ +[0-9]"; done
  echo "\$ mpirun -n 1 collbench allreduce --backend nccl -z 0 ${mid[*]} --register none,buffer,window"; timeout 120 mpirun -n 1 $B/collbench allreduce --backend nccl -z 0 "${mid[@]}" --register none,buffer,window 2>&1
} > "$out/nccl.txt" 2>&1
grep -E "persistent:|^ +8 |register|window" "$out/nccl.txt" | head -30
