# the ping-pong of one object with the interposer's log on: its lines counted with numbers blanked
o="$1"; only="$2"; lib="$3"
source .gpu-box/env.sh
exe=/tmp/interpose_bench
[ -x $exe ] || mpicc -O2 -o "$exe" -DUSE_CUDA -I/usr/local/cuda/include .gpu-box/interpose/interpose_bench.c \
  -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
COLLECTIVES_INTERPOSE_DIRECT=1 COLLECTIVES_INTERPOSE_LOG=1 \
  LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} timeout 120 /opt/ompi-cuda/bin/mpirun -n 2 \
  --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -x COLLECTIVES_INTERPOSE_DIRECT \
  -x COLLECTIVES_INTERPOSE_LOG -x LD_PRELOAD="$PWD/.gpu-box/lib/$lib" \
  "$exe" --budget 0.05 --only "$only" > /tmp/pplog-raw.txt 2>&1
grep -E '^bench' /tmp/pplog-raw.txt
grep -v '^bench' /tmp/pplog-raw.txt | grep collectives | sed -E 's/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -n 14
