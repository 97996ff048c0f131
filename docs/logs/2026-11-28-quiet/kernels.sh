#!/usr/bin/env bash
# bash docs/logs/2026-11-28-quiet/kernels.sh OUT   (from the checkout, .gpu-box/ staged)
# The GPU time of each pack and unpack kernel of the faces' MPI_Sendrecv (interpose_bench, 2
# ranks, the CUDA-aware Open MPI, the interposer's byte path so that no kernel waits on another
# process's event), and of pull.cu's hand-written kernels for the same faces, by Nsight Compute
# (gpu__time_duration.sum, each kernel replayed alone): the first 60 kernels of each process.
set -u
out="$1"; mkdir -p "$out"
source .gpu-box/env.sh
exe=/tmp/interpose_bench
mpicc -O2 -o "$exe" -DUSE_CUDA -I/usr/local/cuda/include .gpu-box/interpose/interpose_bench.c \
  -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
metrics=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread
COLLECTIVES_INTERPOSE_DIRECT=0 LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} \
  timeout 300 /opt/ompi-cuda/bin/mpirun -n 2 --allow-run-as-root --oversubscribe \
  -x LD_LIBRARY_PATH -x COLLECTIVES_INTERPOSE_DIRECT -x LD_PRELOAD="$PWD/.gpu-box/lib/libcollectives_interpose.so" \
  /usr/local/cuda/bin/ncu --target-processes all -c 60 --metrics $metrics --csv \
  "$exe" --budget 0.05 --only 'MPI_Sendrecv face' > "$out/ncu-interposer.csv" 2> "$out/ncu-interposer.err"
nvcc -O2 -arch=sm_90 -I/opt/ompi-cuda/include -L/opt/ompi-cuda/lib -Xlinker -rpath=/opt/ompi-cuda/lib \
  -o /tmp/pull docs/logs/2026-11-27-pull/pull.cu -lmpi 2>&1 | grep -v -i warning
LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} timeout 300 /opt/ompi-cuda/bin/mpirun -n 2 \
  --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH \
  /usr/local/cuda/bin/ncu --target-processes all -c 60 --metrics $metrics --csv \
  /tmp/pull > "$out/ncu-pull.csv" 2> "$out/ncu-pull.err"
for f in "$out"/ncu-*.csv; do
  echo "== $f"
  python3 - "$f" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if not rows: print("no rows"); sys.exit()
h = rows[0]; ix = {k: h.index(k) for k in h}
per = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows[1:]:
    per[(r[ix["Kernel Name"]][:60], r[ix["Grid Size"]] if "Grid Size" in ix else "", r[ix["Block Size"]] if "Block Size" in ix else "")][r[ix["Metric Name"]]].append(r[ix["Metric Value"]])
for k, m in per.items():
    d = [float(x.replace(",", "")) for x in m.get("gpu__time_duration.sum", [])]
    d.sort()
    print(k, "n", len(d), "median", d[len(d)//2] if d else None, {n: v[0] for n, v in m.items() if n != "gpu__time_duration.sum"})
PY
  tail -n 3 "${f%.csv}.err"
done
