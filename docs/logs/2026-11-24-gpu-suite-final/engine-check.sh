#!/usr/bin/env bash
# Every collective of collbench's engine on the device backends, bytes checked: nccl on 1 rank,
# mpi-staged and cuda-mpi on 2 ranks sharing GPU 0.
source .gpu-box/env.sh
B=.gpu-box/bin/collbench
CM=/opt/ompi-cuda/bin/mpirun
pass=0; fail=0
run() { echo "=== $*"; if timeout 120 "$@" > /tmp/o.txt 2>&1; then pass=$((pass+1)); grep -E "wrong|^ +[0-9]+ " /tmp/o.txt | tail -3; else fail=$((fail+1)); tail -15 /tmp/o.txt; fi; }
for c in allreduce allgather allgatherv reducescatter broadcast reduce alltoall alltoallv gather gatherv scatter scatterv sendrecv barrier; do
  run mpirun -n 1 $B coll $c --backend nccl -b 8 -e 1M -f 32 -n 5 -w 2 -c 1
  run mpirun -n 2 -x CUDA_VISIBLE_DEVICES=0 $B coll $c --backend mpi-staged -b 8 -e 1M -f 32 -n 5 -w 2 -c 1
  run $CM -n 2 -x LD_LIBRARY_PATH=/opt/ompi-cuda/lib:$LD_LIBRARY_PATH -x CUDA_VISIBLE_DEVICES=0 $B coll $c --backend cuda-mpi -b 8 -e 1M -f 32 -n 5 -w 2 -c 1
done
echo "engine on device backends: $pass passed, $fail failed"
