#!/usr/bin/env bash
# The interposer's transfers overlapped with its GPU work (MPI_Startall starts its receives and
# pass-through requests before the packs; MPI_Waitall unpacks each receive as it arrives), A/B
# against COLLECTIVES_INTERPOSE_OVERLAP=0 in the same job; and the GPU suite's steps not run on
# the final code before.
#   bash docs/logs/2026-11-27-overlap/run.sh OUT PART...   (from the checkout, .gpu-box/ staged)
# Parts:
#   ichk   the interposer's device checks on 2 and 4 ranks, one GPU each
#   ichk3  the same on 3 ranks
#   ab     the benchmark preloaded under the CUDA-aware MPI, overlap on and off in turn, twice
#          each
#   hprof  the persistent halo exchange alone (interpose_bench --only), preloaded under the
#          CUDA-aware MPI with the interposer's profile, overlap on and off in turn, twice each
#   iprof  the benchmark, plain and preloaded, with the interposer's per-phase profile
#          (run-interpose.sh --profile)
#   gpack  datatype-pack's raw-address, relaunch and batch tests against the CPU reference (one
#          GPU)
#   suite:TEXT  the GPU suite's steps whose command contains TEXT (run-all.sh --only TEXT)
set -u
out="$1"; shift
mkdir -p "$out"
# env.sh unpacks the CUDA-aware Open MPI once (run-all.sh and run-interpose.sh source it too).
[ -f .gpu-box/env.sh ] && source .gpu-box/env.sh
nvidia-smi -L > "$out/machine.txt" 2>&1; nvidia-smi topo -m >> "$out/machine.txt" 2>&1
# The benchmark, built here as run-interpose.sh builds it.
exe="$PWD/.gpu-box/interpose/build/interpose_bench"
if [ ! -x "$exe" ]; then
  mkdir -p "${exe%/*}"
  mpicc -O2 -o "$exe" -DUSE_CUDA -I/usr/local/cuda/include .gpu-box/interpose/interpose_bench.c \
    -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
fi
for part in "$@"; do
  case "$part" in
    ichk)
      (echo "\$ bash .gpu-box/run-interpose.sh --ranks 2,4"; bash .gpu-box/run-interpose.sh --ranks 2,4) > "$out/interpose-checks.txt" 2>&1
      tail -3 "$out/interpose-checks.txt" ;;
    ichk3)
      (echo "\$ bash .gpu-box/run-interpose.sh --ranks 3"; bash .gpu-box/run-interpose.sh --ranks 3) > "$out/interpose-checks-3.txt" 2>&1
      tail -3 "$out/interpose-checks-3.txt" ;;
    ab)
      exe="$PWD/.gpu-box/interpose/build/interpose_bench"
      lib="$PWD/.gpu-box/lib/libcollectives_interpose.so"
      for round in 1 2; do
        for overlap in 1 0; do
          echo "\$ COLLECTIVES_INTERPOSE_OVERLAP=$overlap mpirun -n 2 -x LD_PRELOAD=$lib interpose_bench --budget 0.5 (round $round)"
          LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} COLLECTIVES_INTERPOSE_OVERLAP=$overlap \
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 /opt/ompi-cuda/bin/mpirun -n 2 \
            --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -x COLLECTIVES_INTERPOSE_OVERLAP \
            -x LD_PRELOAD="$lib" "$exe" --budget 0.5
        done
      done > "$out/interpose-ab.txt" 2>&1
      grep -E "^\\$|face|halo" "$out/interpose-ab.txt" ;;
    hprof)
      exe="$PWD/.gpu-box/interpose/build/interpose_bench"
      lib="$PWD/.gpu-box/lib/libcollectives_interpose.so"
      for round in 1 2; do
        for overlap in 1 0; do
          echo "\$ COLLECTIVES_INTERPOSE_PROFILE=1 COLLECTIVES_INTERPOSE_OVERLAP=$overlap mpirun -n 2 -x LD_PRELOAD=$lib interpose_bench --only 'MPI_Startall/MPI_Waitall halo-3d' (round $round)"
          LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} COLLECTIVES_INTERPOSE_OVERLAP=$overlap COLLECTIVES_INTERPOSE_PROFILE=1 \
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 /opt/ompi-cuda/bin/mpirun -n 2 \
            --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -x COLLECTIVES_INTERPOSE_OVERLAP -x COLLECTIVES_INTERPOSE_PROFILE \
            -x LD_PRELOAD="$lib" "$exe" --only 'MPI_Startall/MPI_Waitall halo-3d'
        done
      done > "$out/interpose-halo-profile.txt" 2>&1
      grep -E "^\\$|bench|r0\] profile: (MPI_Start|completion)" "$out/interpose-halo-profile.txt" ;;
    iprof)
      (echo "\$ bash .gpu-box/run-interpose.sh --profile"; bash .gpu-box/run-interpose.sh --profile) > "$out/interpose-profile.txt" 2>&1
      grep -E "bench .*(face|halo)|Start |completion" "$out/interpose-profile.txt" | head -60 ;;
    gpack)
      t=$(ls .gpu-box/tests/gpu_pack-* | grep -v '\.xz$' | head -1)
      (echo "\$ $t --ignored raw_ relaunch_ batch_matches_the_cpu_oracle"; CUDA_VISIBLE_DEVICES=0 "$t" --ignored raw_ relaunch_ batch_matches_the_cpu_oracle) > "$out/gpu-pack-relaunch.txt" 2>&1
      grep -E "^test |test result" "$out/gpu-pack-relaunch.txt" ;;
    suite:*compute-sanitizer*)
      echo "$part: left out of this session's runs (device time)" ;;
    suite:*)
      text="${part#suite:}"
      name=$(echo "$text" | tr -c 'A-Za-z0-9_\n-' '_')
      (echo "\$ bash .gpu-box/run-all.sh --only $text"; bash .gpu-box/run-all.sh --only "$text") > "$out/suite-$name.txt" 2>&1
      grep -E "^== \[|passed|failed" "$out/suite-$name.txt" | tail -40 ;;
    *) echo "unknown part $part"; exit 2 ;;
  esac
done
