#!/usr/bin/env bash
# bash docs/logs/2026-11-27-stable/perf.sh OUT LIB   (from the checkout, .gpu-box/ staged)
# A CPU profile (perf, where the machine has it) of rank 0 of the persistent halo exchange
# (interpose_bench --only 'MPI_Startall/MPI_Waitall halo-3d', 2 ranks, the CUDA-aware Open
# MPI, direct path on), LIB preloaded (an unstripped build, for its symbols).
set -u
out="$1"; lib="$PWD/$2"
mkdir -p "$out"
source .gpu-box/env.sh
{ command -v perf; cat /proc/sys/kernel/perf_event_paranoid;
  cat /sys/devices/system/clocksource/clocksource0/current_clocksource; } > "$out/perf-tools.txt" 2>&1
cat "$out/perf-tools.txt"
exe=/tmp/interpose_bench
mpicc -O2 -o "$exe" -DUSE_CUDA -I/usr/local/cuda/include .gpu-box/interpose/interpose_bench.c \
  -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
command -v perf >/dev/null || { echo "no perf here"; exit 0; }
cat > /tmp/wrap.sh <<WRAP
#!/usr/bin/env bash
if [ "\$OMPI_COMM_WORLD_RANK" = 0 ]; then
  exec perf record -F 20000 -g -o /tmp/perf.data env LD_PRELOAD=$lib "\$@"
fi
exec env LD_PRELOAD=$lib "\$@"
WRAP
chmod +x /tmp/wrap.sh
COLLECTIVES_INTERPOSE_DIRECT=1 LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} \
  timeout 300 /opt/ompi-cuda/bin/mpirun -n 2 --allow-run-as-root --oversubscribe \
  -x LD_LIBRARY_PATH -x COLLECTIVES_INTERPOSE_DIRECT /tmp/wrap.sh "$exe" --budget 3 \
  --only 'MPI_Startall/MPI_Waitall halo-3d' 2>&1 | tee "$out/perf-run.txt" | grep bench
perf report -i /tmp/perf.data --no-children --sort dso,symbol --stdio 2>/dev/null | grep -v "^$" | head -150 > "$out/perf-flat.txt"
perf report -i /tmp/perf.data --children --sort symbol --stdio -g none 2>/dev/null | grep -v "^$" | head -150 > "$out/perf-children.txt"
head -70 "$out/perf-flat.txt"
head -90 "$out/perf-children.txt" | cut -c1-160
