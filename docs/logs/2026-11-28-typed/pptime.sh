# bash docs/logs/2026-11-28-typed/pptime.sh OBJECT LIB: one benchmark case (interpose_bench --only OBJECT)
# with the interposer's timeline (COLLECTIVES_INTERPOSE_PROFILE=timeline), rank 0's table
only="$1"; lib="$2"
source .gpu-box/env.sh
exe=/tmp/interpose_bench
[ -x $exe ] || mpicc -O2 -o "$exe" -DUSE_CUDA -I/usr/local/cuda/include .gpu-box/interpose/interpose_bench.c \
  -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
echo "\$ COLLECTIVES_INTERPOSE_DIRECT=1 COLLECTIVES_INTERPOSE_PROFILE=timeline mpirun -n 2 -x LD_PRELOAD=$lib interpose_bench --budget 0.5 --only '$only'"
COLLECTIVES_INTERPOSE_DIRECT=1 COLLECTIVES_INTERPOSE_PROFILE=timeline \
  LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} timeout 120 /opt/ompi-cuda/bin/mpirun -n 2 \
  --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -x COLLECTIVES_INTERPOSE_DIRECT \
  -x COLLECTIVES_INTERPOSE_PROFILE -x LD_PRELOAD="$PWD/.gpu-box/lib/$lib" \
  "$exe" --budget 0.5 --only "$only" 2>&1 | grep -E '^bench|r[01]\] profile: (MPI_Send |MPI_Recv )'
