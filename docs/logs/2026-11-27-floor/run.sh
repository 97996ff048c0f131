#!/usr/bin/env bash
# What a GPU kernel launched and waited for costs on this machine, and the interposer against it.
#   bash docs/logs/2026-11-27-floor/run.sh OUT PART...   (from the checkout, .gpu-box/ staged)
# Parts:
#   floor  floor.cu (nvcc): launch, wait and completion-notice times of an empty kernel and of
#          the x-face pack kernel (512 KiB), on the legacy and a non-blocking stream, through
#          cudaStreamSynchronize, events, a flag the last block writes to mapped host memory,
#          cuStreamWriteValue32, a stream gated by cuStreamWaitValue32, and CUDA graphs
#   iprof  the interposer's benchmark with its per-phase profile (run-interpose.sh --profile)
#   ichk   the interposer's device checks on 2 and 4 ranks (run-interpose.sh --ranks 2,4)
#   ab     the benchmark (after iprof built it) preloaded under the CUDA-aware MPI, kernels
#          launched through graphs and with COLLECTIVES_INTERPOSE_RELAUNCH=0, twice each, in turn
#   gpack  datatype-pack's raw-address, relaunch and batch tests against the CPU reference (one GPU)
#   gsan   the same tests under compute-sanitizer memcheck, racecheck and synccheck
#   ichk3  the interposer's device checks on 3 ranks (run-interpose.sh --ranks 3)
set -u
out="$1"; shift
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
nvidia-smi -L > "$out/machine.txt" 2>&1; nvidia-smi topo -m >> "$out/machine.txt" 2>&1
for part in "$@"; do
  case "$part" in
    floor)
      nvcc -O2 -arch=sm_90 -o /tmp/floor "$here/floor.cu" -lcuda -lpthread 2>&1 | grep -v -i warning
      (echo "\$ CUDA_VISIBLE_DEVICES=0 floor"; CUDA_VISIBLE_DEVICES=0 /tmp/floor) 2>&1 | tee "$out/floor.txt" ;;
    iprof)
      (echo "\$ bash .gpu-box/run-interpose.sh --profile"; bash .gpu-box/run-interpose.sh --profile) > "$out/interpose-profile.txt" 2>&1
      tail -40 "$out/interpose-profile.txt" ;;
    ichk)
      (echo "\$ bash .gpu-box/run-interpose.sh --ranks 2,4"; bash .gpu-box/run-interpose.sh --ranks 2,4) > "$out/interpose-checks.txt" 2>&1
      tail -5 "$out/interpose-checks.txt" ;;
    ab)
      lib="$PWD/.gpu-box/lib/libcollectives_interpose.so"
      exe="$PWD/.gpu-box/interpose/build/interpose_bench"
      for round in 1 2; do
        for relaunch in 1 0; do
          echo "\$ COLLECTIVES_INTERPOSE_RELAUNCH=$relaunch mpirun -n 2 -x LD_PRELOAD=$lib interpose_bench --budget 0.5 (round $round)"
          COLLECTIVES_INTERPOSE_RELAUNCH=$relaunch LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} \
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 /opt/ompi-cuda/bin/mpirun -n 2 \
            --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -x LD_PRELOAD="$lib" \
            -x COLLECTIVES_INTERPOSE_RELAUNCH "$exe" --budget 0.5
        done
      done > "$out/interpose-relaunch-ab.txt" 2>&1
      grep -E "^\\$|face|halo|2d-block-8" "$out/interpose-relaunch-ab.txt" ;;
    gpack)
      t=$(ls .gpu-box/tests/gpu_pack-* | head -1)
      (echo "\$ $t --ignored raw_ relaunch_matches_the_cpu_oracle batch_matches_the_cpu_oracle --nocapture"; CUDA_VISIBLE_DEVICES=0 "$t" --ignored raw_ relaunch_matches_the_cpu_oracle batch_matches_the_cpu_oracle --nocapture) > "$out/gpu-pack-relaunch.txt" 2>&1
      tail -6 "$out/gpu-pack-relaunch.txt" ;;
    gsan)
      t=$(ls .gpu-box/tests/gpu_pack-* | head -1)
      cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
      for tool in memcheck racecheck synccheck; do
        echo "\$ compute-sanitizer --tool $tool $t --ignored relaunch_matches_the_cpu_oracle batch_matches_the_cpu_oracle"
        CUDA_VISIBLE_DEVICES=0 DTP_WARM=0 timeout 160 "$cs" --tool "$tool" "$t" --ignored relaunch_matches_the_cpu_oracle batch_matches_the_cpu_oracle
        echo "exit $?"
      done > "$out/gpu-pack-relaunch-sanitizer.txt" 2>&1
      grep -E "^\\$|SUMMARY|test result|^exit" "$out/gpu-pack-relaunch-sanitizer.txt" ;;
    ichk3)
      (echo "\$ bash .gpu-box/run-interpose.sh --ranks 3"; bash .gpu-box/run-interpose.sh --ranks 3) > "$out/interpose-checks-3.txt" 2>&1
      tail -5 "$out/interpose-checks-3.txt" ;;
    *) echo "unknown part $part"; exit 2 ;;
  esac
done
