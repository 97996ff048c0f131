#!/usr/bin/env bash
# bash docs/logs/2026-11-28-hot/perf.sh OUT LIB [REPS]   (from the checkout, .gpu-box/ staged)
# Samples rank 0 of devface.c (this directory: MPI_Sendrecv of an x face, device memory) with
# LIB preloaded, the direct path on, the CUDA-aware Open MPI, 2 ranks on 2 GPUs, using perf
# (carried in .gpu-box/perf: Debian 12's perf 6.1 and the libraries it needs, not glibc) with
# DWARF call chains from 2.5 s in (after the datatypes' kernels are compiled); then prints
# where the host time goes: per library and per symbol (self), and the inclusive time of the
# interposer's functions, the MPI's entry points and the driver's.
set -u
out="$1"; lib="$2"; reps="${3:-150000}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$out"
source .gpu-box/env.sh
kit="$PWD/.gpu-box/perf"
exe=/tmp/devface
mpicc -O2 -o "$exe" -DUSE_CUDA -I/usr/local/cuda/include "$here/devface.c" \
  -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
cat > /tmp/rank.sh <<EOS
#!/usr/bin/env bash
orig="\${LD_LIBRARY_PATH:-}"
if [ "\$OMPI_COMM_WORLD_RANK" = 0 ]; then
  exec env LD_LIBRARY_PATH="$kit/lib" "$kit/perf" record -q -D 2500 -F 4000 --call-graph dwarf,16384 -o /tmp/perf0.data -- \
    env LD_LIBRARY_PATH="\$orig" LD_PRELOAD="$lib" "\$@"
fi
exec env LD_PRELOAD="$lib" "\$@"
EOS
chmod +x /tmp/rank.sh
echo "\$ COLLECTIVES_INTERPOSE_DIRECT=1 cuda_mpirun -np 2 rank.sh devface $reps   (rank 0 under perf record -D 2500 -F 4000 --call-graph dwarf)"
COLLECTIVES_INTERPOSE_DIRECT=1 LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} timeout 200 \
  /opt/ompi-cuda/bin/mpirun -n 2 --allow-run-as-root -x LD_LIBRARY_PATH -x COLLECTIVES_INTERPOSE_DIRECT \
  /tmp/rank.sh "$exe" "$reps" 2>&1 | grep -v -i -E 'cuMemHostRegister|Host:|Registration|^---|help'
rep() { env LD_LIBRARY_PATH="$kit/lib" "$kit/perf" report -i /tmp/perf0.data --stdio "$@" 2>/dev/null | grep -v -E '^$|^#$'; }
{ echo "== per library (self)"; rep --no-children --sort dso -g none | head -30
  echo "== per symbol (self), top 100"; rep --no-children --sort dso,sym -g none | head -110
  echo "== inclusive (children): the interposer's functions, the MPI's entry points, the driver's"
  rep --children --sort dso,sym -g none | grep -E 'Children|collectives_interpose|MPI_|\] cu[A-Z]|pthread_mutex|malloc|free' | head -200
} > "$out/perf-report.txt"
head -250 "$out/perf-report.txt"
