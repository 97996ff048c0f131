#!/usr/bin/env bash
# Two GPUs, one job: the NCCL test binaries on 2 ranks (conformance, dead and silent peer,
# registration), then NCCL beside nccl-tests at small sizes (back to back, as nccl-tests times by
# default), the persistent plan (CUDA graph) beside nccl-tests -G, registered and symmetric-window
# buffers beside nccl-tests -R, and the conformance suite's f32 cases over NCCL's socket transport.
# Run from the directory that holds .gpu-box/:  bash docs/logs/2026-11-24-two-gpus-b/run.sh OUT
set -uo pipefail
out="${1:?usage: run.sh OUT}"; mkdir -p "$out"
source .gpu-box/env.sh
# Large staged binaries travel as NAME.xz (cargo xtask gpu-stage); unpack them once.
for packed in .gpu-box/bin/*.xz .gpu-box/tests/*.xz; do [ -e "$packed" ] && [ ! -e "${packed%.xz}" ] && xz -dk "$packed"; done
B=.gpu-box/bin; T=.gpu-box/tests
{ gpu_box_info; nvidia-smi topo -m; } > "$out/machine.txt" 2>&1
peers=/tmp/peers; mkdir -p $peers
tar -xJf .gpu-box/peers/nccl-tests-2.19.6.tar.xz -C $peers
( make -C $peers/nccl-tests -j16 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" >$peers/build.log 2>&1 || tail -20 $peers/build.log ) &
build=$!
{
  echo "### test binaries on 2 ranks, one GPU each"
  echo "\$ mpirun -n 2 nccl_collectives"; timeout 240 mpirun -n 2 $T/nccl_collectives-* 2>&1 | grep -vE "^test .* ok$"
  echo "\$ OMPI_MCA_orte_allowed_exit_without_sync=1 mpirun -n 2 nccl_dead_peer"
  OMPI_MCA_orte_allowed_exit_without_sync=1 timeout 60 mpirun -n 2 $T/nccl_dead_peer-* 2>&1
  for n in 1 2; do echo "\$ mpirun -n $n nccl_register"; timeout 120 mpirun -n $n $T/nccl_register-* 2>&1 | grep -vE "^test .* ok$"; done
} > "$out/tests.txt" 2>&1
grep -E "mpi-tests|FAILED|Timeout|leaving" "$out/tests.txt"
wait $build
NT=$peers/nccl-tests/build
small=(-b 8 -e 4K -f 8 -n 1000 -w 100 -c 1)
{
  for pair in "allreduce all_reduce" "allgather all_gather" "reducescatter reduce_scatter" \
              "broadcast broadcast" "reduce reduce" "alltoall alltoall" "gather gather" \
              "scatter scatter" "sendrecv sendrecv"; do
    set -- $pair
    echo "### $1"
    echo "\$ mpirun -n 2 $2_perf -g 1 ${small[*]}"; timeout 60 mpirun -n 2 $NT/$2_perf -g 1 "${small[@]}" 2>&1 | grep -E "^ +[0-9]"
    echo "\$ mpirun -n 2 collbench $1 --backend nccl -z 0 ${small[*]}"; timeout 60 mpirun -n 2 $B/collbench $1 --backend nccl -z 0 "${small[@]}" 2>&1 | grep -E "^ +[0-9]|tracking"
  done
} > "$out/small.txt" 2>&1
mid=(-b 8 -e 1M -f 4 -n 500 -w 50 -c 1)
{
  echo "### persistent: nccl-tests -G 100 (graph of -n 1 call, launched 100 times) and -z 1, collbench --persistent -z 1"
  echo "\$ mpirun -n 2 all_reduce_perf -g 1 -b 8 -e 1M -f 4 -n 1 -w 50 -c 1 -G 100"; timeout 60 mpirun -n 2 $NT/all_reduce_perf -g 1 -b 8 -e 1M -f 4 -n 1 -w 50 -c 1 -G 100 2>&1 | grep -E "^ +[0-9]"
  echo "\$ mpirun -n 2 all_reduce_perf -g 1 ${mid[*]} -G 1"; timeout 60 mpirun -n 2 $NT/all_reduce_perf -g 1 "${mid[@]}" -G 1 2>&1 | grep -E "^ +[0-9]"
  echo "\$ mpirun -n 2 collbench allreduce --backend nccl --persistent -z 1 ${mid[*]}"; timeout 120 mpirun -n 2 $B/collbench allreduce --backend nccl --persistent -z 1 "${mid[@]}" 2>&1
  echo "### registration: nccl-tests -R 0|1|2 beside collbench --register none,buffer,window (back to back)"
  for R in 0 1 2; do echo "\$ mpirun -n 2 all_reduce_perf -g 1 ${mid[*]} -R $R"; timeout 60 mpirun -n 2 $NT/all_reduce_perf -g 1 "${mid[@]}" -R $R 2>&1 | grep -E "^ +[0-9]"; done
  echo "\$ mpirun -n 2 collbench allreduce --backend nccl -z 0 ${mid[*]} --register none,buffer,window"; timeout 180 mpirun -n 2 $B/collbench allreduce --backend nccl -z 0 "${mid[@]}" --register none,buffer,window 2>&1
} > "$out/persistent-register.txt" 2>&1
{
  echo "### conformance, f32 cases, over NCCL's socket transport"
  echo "\$ NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 MPI_TESTS_FILTER=_f32 mpirun -n 2 nccl_collectives"
  timeout 120 mpirun -n 2 -x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1 -x MPI_TESTS_FILTER=_f32 $T/nccl_collectives-* 2>&1
} > "$out/socket.txt" 2>&1
tail -3 "$out/socket.txt"
