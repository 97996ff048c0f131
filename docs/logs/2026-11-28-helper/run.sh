#!/usr/bin/env bash
# bash docs/logs/2026-11-28-helper/run.sh OUT PART...   (from the checkout, .gpu-box/ staged)
#   chan    chan.cu (this directory) under the CUDA-aware Open MPI, 2 ranks on 2 GPUs bound to
#           cores, ROUNDS (2000) exchanges per way, SETS (3) sets
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$1"; shift
mkdir -p "$out"
for part in "$@"; do
  case "$part" in
    chan) (source .gpu-box/env.sh
           nvcc -O2 -arch=sm_90 -I/opt/ompi-cuda/include -L/opt/ompi-cuda/lib -Xlinker -rpath=/opt/ompi-cuda/lib \
             -o /tmp/chan "$here/chan.cu" -lmpi -lcuda -lrt 2>&1 | grep -v -i warning
           echo "\$ cuda_mpirun -np 2 --bind-to core chan ${ROUNDS:-2000} ${SETS:-3}"
           timeout 300 bash -c "source .gpu-box/env.sh; cuda_mpirun -np 2 --bind-to core /tmp/chan ${ROUNDS:-2000} ${SETS:-3}") 2>&1 \
           | grep -v -E 'cuMemHostRegister|Host:|Registration|^---|help' | tee "$out/chan.txt" ;;
    *) echo "unknown part $part" >&2 ;;
  esac
done
