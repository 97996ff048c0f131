#!/usr/bin/env bash
# bash docs/logs/2026-11-28-verify/run.sh OUT PART...   (from the checkout, .gpu-box/ staged)
#   flag        flag.cu (this directory) under the CUDA-aware Open MPI, 2 ranks on 2 GPUs, ROUNDS
#               rounds (2 by default), into OUT/flag.txt
#   xline LIB   the x face's MPI_Sendrecv alone, once, with the timeline (.gpu-box/lib/LIB.so),
#               into OUT/xline-LIB.txt; the next argument names the library
# The other parts of this directory's runs are earlier logs' scripts (README.md lists them).
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$1"; shift
mkdir -p "$out"
while [ $# -gt 0 ]; do
  part="$1"; shift
  case "$part" in
    xline) lib="$1"; shift
           (source .gpu-box/env.sh
            exe=/tmp/interpose_bench
            [ -x "$exe" ] || mpicc -O2 -o "$exe" -DUSE_CUDA -I/usr/local/cuda/include .gpu-box/interpose/interpose_bench.c \
              -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
            echo "\$ COLLECTIVES_INTERPOSE_DIRECT=1 COLLECTIVES_INTERPOSE_PROFILE=timeline mpirun -n 2 -x LD_PRELOAD=$lib.so interpose_bench --budget 0.5 --only 'MPI_Sendrecv face-x'"
            COLLECTIVES_INTERPOSE_DIRECT=1 COLLECTIVES_INTERPOSE_PROFILE=timeline \
              LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} timeout 120 /opt/ompi-cuda/bin/mpirun -n 2 \
              --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -x COLLECTIVES_INTERPOSE_DIRECT \
              -x COLLECTIVES_INTERPOSE_PROFILE -x LD_PRELOAD="$PWD/.gpu-box/lib/$lib.so" \
              "$exe" --budget 0.5 --only 'MPI_Sendrecv face-x') > "$out/xline-$lib.txt" 2>&1
           grep -E '^\$|^bench|r0\] profile: MPI_Sendrecv' "$out/xline-$lib.txt" ;;
    flag) (source .gpu-box/env.sh
           nvcc -O2 -arch=sm_90 -I/opt/ompi-cuda/include -L/opt/ompi-cuda/lib -Xlinker -rpath=/opt/ompi-cuda/lib \
             -o /tmp/flag "$here/flag.cu" -lmpi -lrt 2>&1 | grep -v -i warning
           echo "\$ cuda_mpirun -np 2 --bind-to core flag ${ROUNDS:-2}"
           timeout 200 bash -c "source .gpu-box/env.sh; cuda_mpirun -np 2 --bind-to core /tmp/flag ${ROUNDS:-2}") 2>&1 \
           | grep -v -E 'cuMemHostRegister|Host:|Registration|^---|help' | tee "$out/flag.txt" ;;
    *) echo "unknown part $part" >&2 ;;
  esac
done
