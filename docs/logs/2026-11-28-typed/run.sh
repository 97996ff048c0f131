#!/usr/bin/env bash
# bash docs/logs/2026-11-28-typed/run.sh OUT PART...   (from the checkout, .gpu-box/ staged)
#   typed   typed.cu under the CUDA-aware Open MPI, 2 ranks, one GPU each (ROUNDS rounds, 2 by default)
#   ipc     typed.cu's IPC probes (what the driver allows when this process and the MPI both map a
#           peer's allocation)
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$1"; shift
mkdir -p "$out"
source .gpu-box/env.sh
build() {
  [ -x /tmp/typed ] || nvcc -O2 -arch=sm_90 -I/opt/ompi-cuda/include -L/opt/ompi-cuda/lib -Xlinker -rpath=/opt/ompi-cuda/lib \
    -o /tmp/typed "$here/typed.cu" -lmpi -lcuda 2>&1 | grep -v -i warning
}
for part in "$@"; do
  case "$part" in
    typed) build; (echo "\$ cuda_mpirun -np 2 --bind-to core typed ${ROUNDS:-2}"
           timeout 300 bash -c "source .gpu-box/env.sh; cuda_mpirun -np 2 --bind-to core /tmp/typed ${ROUNDS:-2}") 2>&1 | tee "$out/typed.txt" ;;
    ipc) build; (echo "\$ cuda_mpirun -np 2 typed ipc"
         timeout 120 bash -c "source .gpu-box/env.sh; cuda_mpirun -np 2 /tmp/typed ipc") 2>&1 | tee "$out/ipc.txt" ;;
    *) echo "unknown part $part" >&2 ;;
  esac
done
