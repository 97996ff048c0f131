#!/usr/bin/env bash
# bash docs/logs/2026-11-28-push/run.sh OUT PART...   (from the checkout, .gpu-box/ staged)
#   push     push.cu (this directory) under the CUDA-aware Open MPI, 2 ranks on 2 GPUs, ROUNDS
#            rounds (2 by default), bound to cores and unbound, with the machine's topology,
#            into OUT/push.txt
#   drv      drv.cu (this directory): a lent face's driver calls timed in one process, without MPI,
#            then under each MPI and with parts of the CUDA-aware one's turned off, into OUT/drv.txt
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$1"; shift
mkdir -p "$out"
while [ $# -gt 0 ]; do
  part="$1"; shift
  case "$part" in
    push) (source .gpu-box/env.sh
           nvidia-smi topo -m; lscpu | grep -E '^CPU\(s\)|NUMA|Model name'
           nvcc -O2 -arch=sm_90 -I/opt/ompi-cuda/include -L/opt/ompi-cuda/lib -Xlinker -rpath=/opt/ompi-cuda/lib \
             -o /tmp/push "$here/push.cu" -lmpi -lrt 2>&1 | grep -v -i warning
           for bind in core none; do
             echo "\$ cuda_mpirun -np 2 --bind-to $bind push ${ROUNDS:-2}"
             timeout 200 bash -c "source .gpu-box/env.sh; cuda_mpirun -np 2 --bind-to $bind /tmp/push ${ROUNDS:-2}"
           done) 2>&1 | grep -v -E 'cuMemHostRegister|Host:|Registration|^---|help' | tee "$out/push.txt" ;;
    drv) (source .gpu-box/env.sh
          nvcc -O2 -arch=sm_90 -I/opt/ompi-cuda/include -L/opt/ompi-cuda/lib -Xlinker -rpath=/opt/ompi-cuda/lib \
            -o /tmp/drv "$here/drv.cu" -lmpi 2>&1 | grep -v -i warning
          nvcc -O2 -arch=sm_90 $(mpicc --showme:compile) $(mpicc --showme:link) -o /tmp/drvsys "$here/drv.cu" 2>&1 | grep -v -i warning
          for i in 1 2; do
            echo "\$ drv"; /tmp/drv
            echo "\$ cuda_mpirun -np 1 --bind-to core drv mpi"; cuda_mpirun -np 1 --bind-to core /tmp/drv mpi
            echo "\$ cuda_mpirun -np 1 --bind-to core --mca btl self,vader drv mpi"; cuda_mpirun -np 1 --bind-to core --mca btl self,vader /tmp/drv mpi
            echo "\$ cuda_mpirun -np 1 --bind-to core --mca memory ^patcher drv mpi"; cuda_mpirun -np 1 --bind-to core --mca memory ^patcher /tmp/drv mpi
            echo "\$ cuda_mpirun -np 1 --bind-to none drv mpi"; cuda_mpirun -np 1 --bind-to none /tmp/drv mpi
            echo "\$ mpirun -np 1 --bind-to core drvsys mpi (system Open MPI)"; mpirun --allow-run-as-root -np 1 --bind-to core /tmp/drvsys mpi
          done) 2>&1 | grep -v -E 'cuMemHostRegister|Host:|Registration|^---|help' | tee "$out/drv.txt" ;;
    *) echo "unknown part $part" >&2 ;;
  esac
done
