#!/usr/bin/env bash
# bash docs/logs/2026-11-28-spin/run.sh OUT PART...   (from the checkout, .gpu-box/ staged)
#   spin    spin.cu (this directory) on 2 GPUs (3000 rounds, twice) and with both ranks on GPU 0
#   dp      datatype-pack's GPU test of the waiting unpack (.gpu-box/dp/gpu_pack)
#   log     the faces' MPI_Sendrecv once with the log on (the staged library), its lines counted
#           with their numbers blanked
#   ichk    the device checks on 2 and 4 ranks (the staged library)
#   face    LIB_A against LIB_B (.gpu-box/lib/NAME.so), ROUNDS rounds (2026-11-28-held's face)
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$1"; shift
mkdir -p "$out"
for part in "$@"; do
  case "$part" in
    spin) (source .gpu-box/env.sh
           nvcc -O2 -arch=sm_90 -o /tmp/spin "$here/spin.cu" $(mpicc --showme:compile) $(mpicc --showme:link) -lcuda -lrt 2>&1 | grep -i error
           for i in 1 2; do mpirun -n 2 --bind-to core /tmp/spin 3000; done
           CUDA_VISIBLE_DEVICES=0 mpirun -n 2 --bind-to core /tmp/spin 500) > "$out/spin.txt" 2>&1
          cat "$out/spin.txt" ;;
    dp) timeout 120 .gpu-box/dp/gpu_pack waiting_unpack --include-ignored > "$out/dp.txt" 2>&1; tail -n 3 "$out/dp.txt" ;;
    log) (source .gpu-box/env.sh
          exe=/tmp/interpose_bench
          mpicc -O2 -o "$exe" -DUSE_CUDA -I/usr/local/cuda/include .gpu-box/interpose/interpose_bench.c \
            -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
          COLLECTIVES_INTERPOSE_DIRECT=1 COLLECTIVES_INTERPOSE_LOG=1 \
            LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} timeout 120 /opt/ompi-cuda/bin/mpirun -n 2 \
            --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -x COLLECTIVES_INTERPOSE_DIRECT \
            -x COLLECTIVES_INTERPOSE_LOG -x LD_PRELOAD="$PWD/.gpu-box/lib/libcollectives_interpose.so" \
            "$exe" --budget 0.05 --only 'MPI_Sendrecv face') > "$out/log-raw.txt" 2>&1
         grep -E '^bench' "$out/log-raw.txt"
         grep -v '^bench' "$out/log-raw.txt" | sed -E 's/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -n 40 | tee "$out/log-lines.txt"
         rm -f "$out/log-raw.txt" ;;
    ichk) bash .gpu-box/run-interpose.sh --ranks 2,4 > "$out/interpose-checks.txt" 2>&1; tail -n 3 "$out/interpose-checks.txt" ;;
    face) bash "$here/../2026-11-28-events/run.sh" "$out" face ;;
    *) echo "unknown part $part" >&2 ;;
  esac
done
