#!/usr/bin/env bash
# NCCL buffer registration, 2 ranks with one GPU each, in one job: nccl-tests' all-reduce with
# -R 0, 1, 2 beside collbench's three buffer modes (blocking, 8 B to 1 MiB), then the registration
# tests on 1 and 2 ranks. Run from the directory that holds .gpu-box/ (staged by
# `cargo xtask gpu-stage`):
#   bash docs/logs/2026-11-24-register/run.sh OUTDIR
set -uo pipefail
out="${1:?usage: run.sh OUTDIR}"; mkdir -p "$out"
source .gpu-box/env.sh
# Large staged binaries travel as NAME.xz (cargo xtask gpu-stage); unpack them once.
for packed in .gpu-box/bin/*.xz .gpu-box/tests/*.xz; do [ -e "$packed" ] && [ ! -e "${packed%.xz}" ] && xz -dk "$packed"; done
B=.gpu-box/bin
{ gpu_box_info; nvidia-smi topo -m; } 2>&1 | tee "$out/machine.txt"
# nccl-tests only (as docs/logs/2026-11-24-two-gpus/bench.sh builds it): seconds, not OMB's minutes.
peers=/tmp/peers; mkdir -p $peers
tar -xJf .gpu-box/peers/nccl-tests-2.19.6.tar.xz -C $peers
make -C $peers/nccl-tests -j"$(nproc)" MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" >$peers/build.log 2>&1 || tail -20 $peers/build.log
NT=$peers/nccl-tests/build
sizes=(-b 8 -e 1M -f 2 -n 200 -w 20 -c 1 -z 1)
{
  echo "### all-reduce, blocking (-z 1), 8 B to 1 MiB: nccl-tests -R 0|1|2 beside collbench --register"
  for R in 0 1 2; do
    echo "\$ mpirun -n 2 all_reduce_perf -g 1 ${sizes[*]} -R $R"
    timeout 180 mpirun -n 2 $NT/all_reduce_perf -g 1 "${sizes[@]}" -R $R 2>&1
  done
  echo "\$ mpirun -n 2 collbench allreduce --backend nccl ${sizes[*]} --register none,buffer,window"
  timeout 300 mpirun -n 2 $B/collbench allreduce --backend nccl "${sizes[@]}" --register none,buffer,window 2>&1
  echo "\$ NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,REG,TUNING mpirun -n 2 collbench allreduce --backend nccl -b 8 -e 8 -n 5 -w 1 -z 1 --register window (what NCCL says about symmetric support)"
  timeout 120 mpirun -n 2 -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,REG,TUNING \
    $B/collbench allreduce --backend nccl -b 8 -e 8 -n 5 -w 1 -z 1 --register window 2>&1 \
    | grep -iE "symm|window|regist|NCCL version|collbench|variant|^ +8 " | head -60
} | tee "$out/allreduce.txt"
{
  echo "### the other collectives on registered and window buffers, blocking, 8 B to 1 MiB"
  for c in allgather reducescatter broadcast reduce alltoall; do
    echo "\$ mpirun -n 2 collbench $c --backend nccl -b 8 -e 1M -f 4 -n 100 -w 10 -c 1 -z 1 --register all"
    timeout 180 mpirun -n 2 $B/collbench $c --backend nccl -b 8 -e 1M -f 4 -n 100 -w 10 -c 1 -z 1 --register all 2>&1
  done
} | tee "$out/collectives.txt"
{
  echo "### registration tests: every collective on ncclMemAlloc buffers (none, buffer, window) and registered cudarc buffers"
  for n in 1 2; do
    echo "\$ mpirun -n $n nccl_register"
    timeout 300 mpirun -n $n .gpu-box/tests/nccl_register-* 2>&1
  done
  echo "\$ nccl_sys --ignored (the optional entry points against the installed NCCL)"
  timeout 120 .gpu-box/tests/nccl_sys-* --ignored 2>&1 | tail -5
} | tee "$out/tests.txt"
