#!/usr/bin/env bash
# A pack kernel already resident on the GPU against the launched one; the interposer with ranks
# sharing a GPU; a receive completed alone unpacked without a batch, against the build before.
#   bash docs/logs/2026-11-27-resident/run.sh OUT PART...   (from the checkout, .gpu-box/ staged,
#   the build before at .gpu-box/lib/before/libcollectives_interpose.so)
# Parts:
#   floor  floor.cu (nvcc): the floor programme of docs/logs/2026-11-27-floor with one section
#          more, a resident pack kernel released through a mapped host word
#   share  the interposer's device checks with ranks sharing GPUs: 2 ranks on one GPU, 3 and 4
#          ranks on two (run-interpose.sh --ranks, CUDA_VISIBLE_DEVICES narrowed)
#   ichk   the interposer's device checks on 2 and 4 ranks, one GPU each
#   ab     the benchmark preloaded under the CUDA-aware MPI, this build and the one before in
#          turn, twice each (after iprof or ichk built the benchmark)
#   iprof  the benchmark with the interposer's per-phase profile (run-interpose.sh --profile)
#   gpack  datatype-pack's raw-address, relaunch and batch tests against the CPU reference, and
#          the one that launches kept graphs again with the arguments they hold (one GPU)
set -u
out="$1"; shift
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
nvidia-smi -L > "$out/machine.txt" 2>&1; nvidia-smi topo -m >> "$out/machine.txt" 2>&1
for part in "$@"; do
  case "$part" in
    floor)
      nvcc -O2 -arch=sm_90 -o /tmp/floor "$here/floor.cu" -lcuda -lpthread 2>&1 | grep -v -i warning
      (echo "\$ CUDA_VISIBLE_DEVICES=0 floor"; CUDA_VISIBLE_DEVICES=0 timeout 120 /tmp/floor) > "$out/floor.txt" 2>&1
      grep -E "driver|graph.*Sync|launch \+ cuStream|resident" "$out/floor.txt" ;;
    share)
      for v in "0:2" "0,1:3" "0,1:4"; do
        devs="${v%%:*}"; n="${v##*:}"
        echo "\$ CUDA_VISIBLE_DEVICES=$devs bash .gpu-box/run-interpose.sh --ranks $n"
        CUDA_VISIBLE_DEVICES="$devs" bash .gpu-box/run-interpose.sh --ranks "$n"
      done > "$out/interpose-checks-shared.txt" 2>&1
      grep -E "^\\$|passed|failed" "$out/interpose-checks-shared.txt" | tail -12 ;;
    ichk)
      (echo "\$ bash .gpu-box/run-interpose.sh --ranks 2,4"; bash .gpu-box/run-interpose.sh --ranks 2,4) > "$out/interpose-checks.txt" 2>&1
      tail -3 "$out/interpose-checks.txt" ;;
    ab)
      exe="$PWD/.gpu-box/interpose/build/interpose_bench"
      for round in 1 2; do
        for build in after before; do
          lib="$PWD/.gpu-box/lib/libcollectives_interpose.so"
          [ "$build" = before ] && lib="$PWD/.gpu-box/lib/before/libcollectives_interpose.so"
          echo "\$ mpirun -n 2 -x LD_PRELOAD=$lib interpose_bench --budget 0.5 (round $round, $build)"
          LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} \
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 /opt/ompi-cuda/bin/mpirun -n 2 \
            --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -x LD_PRELOAD="$lib" "$exe" --budget 0.5
        done
      done > "$out/interpose-ab.txt" 2>&1
      grep -E "^\\$|face|halo|2d-block-8" "$out/interpose-ab.txt" ;;
    iprof)
      (echo "\$ bash .gpu-box/run-interpose.sh --profile"; bash .gpu-box/run-interpose.sh --profile) > "$out/interpose-profile.txt" 2>&1
      grep -E "Sendrecv|MPI_Recv|completion" "$out/interpose-profile.txt" | grep "r0\]" | head -40 ;;
    gpack)
      t=$(ls .gpu-box/tests/gpu_pack-* | head -1)
      (echo "\$ $t --ignored raw_ relaunch_ batch_matches_the_cpu_oracle --nocapture"; CUDA_VISIBLE_DEVICES=0 "$t" --ignored raw_ relaunch_ batch_matches_the_cpu_oracle --nocapture) > "$out/gpu-pack-relaunch.txt" 2>&1
      grep -E "^test |test result" "$out/gpu-pack-relaunch.txt" ;;
    *) echo "unknown part $part"; exit 2 ;;
  esac
done
