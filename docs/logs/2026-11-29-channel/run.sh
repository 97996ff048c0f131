#!/usr/bin/env bash
# bash docs/logs/2026-11-29-channel/run.sh OUT PART...   (from the checkout, .gpu-box/ staged)
#   dp      datatype-pack's channel kernels against the CPU reference (.gpu-box/dp/gpu_channel)
#   ichk    the interposer's device checks, 2 and 4 ranks (.gpu-box/run-interpose.sh)
#   ichk3   the same, 3 ranks
#   face    the lone x and y faces (interpose_bench --only 'MPI_Sendrecv face'), 2 ranks, the
#           CUDA-aware Open MPI, the direct path on, channels off and on in turn (the order
#           swapped every round), ROUNDS (6) rounds; each job prints its own contiguous baseline
#   log     one job of the x face with channels on and the log on: its lines, counted
#   calloff calloff.cu: a spinning kernel ended by a word written from another stream, three ways
#   clog    the check program (.gpu-box/interpose) once under the system mpirun, RANKS (2) ranks,
#           channels CHANNEL (shared) and the log on: its channel lines, counted, and the first
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$1"; shift
mkdir -p "$out"
lib="$PWD/.gpu-box/lib/libcollectives_interpose.so"
bench() {
  (source .gpu-box/env.sh
   [ -x /tmp/interpose_bench ] || mpicc -O2 -o /tmp/interpose_bench -DUSE_CUDA -I/usr/local/cuda/include \
     .gpu-box/interpose/interpose_bench.c -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
   echo "\$ COLLECTIVES_INTERPOSE_DIRECT=1 COLLECTIVES_INTERPOSE_CHANNEL=$1 mpirun -n 2 -x LD_PRELOAD=$lib interpose_bench $2"
   COLLECTIVES_INTERPOSE_DIRECT=1 COLLECTIVES_INTERPOSE_CHANNEL="$1" COLLECTIVES_INTERPOSE_LOG="${LOG:-0}" \
     LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} timeout 120 /opt/ompi-cuda/bin/mpirun -n 2 \
     --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -x COLLECTIVES_INTERPOSE_DIRECT \
     -x COLLECTIVES_INTERPOSE_CHANNEL -x COLLECTIVES_INTERPOSE_LOG -x LD_PRELOAD="$lib" \
     /tmp/interpose_bench $2 2>&1)
}
for part in "$@"; do
  case "$part" in
    dp) timeout 300 .gpu-box/dp/gpu_channel --include-ignored > "$out/dp.txt" 2>&1; tail -n 5 "$out/dp.txt" ;;
    ichk) bash .gpu-box/run-interpose.sh --ranks 2,4 > "$out/interpose-checks.txt" 2>&1; tail -n 3 "$out/interpose-checks.txt" ;;
    ichk3) bash .gpu-box/run-interpose.sh --ranks 3 > "$out/interpose-checks-3.txt" 2>&1; tail -n 3 "$out/interpose-checks-3.txt" ;;
    face) for round in $(seq "${ROUNDS:-6}"); do
            if [ $((round % 2)) = 1 ]; then order="0 1"; else order="1 0"; fi
            for c in $order; do bench "$c" "--budget 0.5 --only 'MPI_Sendrecv face'" | grep -E '^\$|^bench'; done
          done > "$out/face-ab.txt"
          python3 "$here/ratios.py" "$out/face-ab.txt" | tee "$out/face-ratios.txt" ;;
    log) LOG=1 bench 1 "--budget 0.05 --only 'MPI_Sendrecv face-x'" > "$out/log-raw.txt"
         grep -E '^bench' "$out/log-raw.txt"
         grep -v '^bench' "$out/log-raw.txt" | sed -E 's/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -n 40 | tee "$out/log-lines.txt"
         rm -f "$out/log-raw.txt" ;;
    clog) (source .gpu-box/env.sh
           mpicc -O2 -o /tmp/interpose_check -DUSE_CUDA -I/usr/local/cuda/include .gpu-box/interpose/interpose_check.c \
             -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
           echo "\$ COLLECTIVES_INTERPOSE_DIRECT=1 COLLECTIVES_INTERPOSE_CHANNEL=${CHANNEL:-shared} COLLECTIVES_INTERPOSE_LOG=1 mpirun -n ${RANKS:-2} -x LD_PRELOAD=$lib interpose_check --host-mpi"
           COLLECTIVES_INTERPOSE_DIRECT=1 COLLECTIVES_INTERPOSE_CHANNEL="${CHANNEL:-shared}" COLLECTIVES_INTERPOSE_LOG=1 \
             timeout 300 mpirun -n "${RANKS:-2}" --allow-run-as-root --oversubscribe -x COLLECTIVES_INTERPOSE_DIRECT \
             -x COLLECTIVES_INTERPOSE_CHANNEL -x COLLECTIVES_INTERPOSE_LOG -x LD_PRELOAD="$lib" /tmp/interpose_check --host-mpi) \
             > "$out/clog-raw.txt" 2>&1
          grep -E 'mpi-tests|differs' "$out/clog-raw.txt"
          grep -v '^sum' "$out/clog-raw.txt" | grep -i -E 'channel|gave up|called off' | sed -E 's/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -n 30 | tee "$out/clog-lines.txt"
          grep -v '^sum' "$out/clog-raw.txt" | gzip -9 > "$out/clog-log.txt.gz"
          rm -f "$out/clog-raw.txt" ;;
    calloff) (source .gpu-box/env.sh; nvcc -O2 -arch=sm_90 -o /tmp/calloff "$here/calloff.cu" -lcuda && /tmp/calloff) 2>&1 | tee "$out/calloff.txt" ;;
    *) echo "unknown part $part" >&2 ;;
  esac
done
