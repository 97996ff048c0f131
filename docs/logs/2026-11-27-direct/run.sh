#!/usr/bin/env bash
# The interposer's direct path (a send's bytes copied into the receiver's device buffer over
# CUDA IPC, paired with its receive by message order): device checks and the benchmark, direct
# path on and off in the same job. The path existed in commits 1a51a86..9b1f6cd (not kept):
# COLLECTIVES_INTERPOSE_DIRECT means nothing to later builds.
#   bash docs/logs/2026-11-27-direct/run.sh OUT PART...   (from the checkout, .gpu-box/ staged)
# Parts:
#   ichk   the interposer's device checks on 2 and 4 ranks, one GPU each
#   ichk3  the same on 3 ranks
#   bench  the benchmark: the CUDA-aware MPI plain, preloaded (direct path on), preloaded with
#          the direct path off; mpirun (not CUDA-aware) preloaded (run-interpose.sh --bench)
#   ab     the benchmark preloaded under the CUDA-aware MPI, direct path on and off in turn,
#          twice each
#   face   the faces' MPI_Sendrecv alone (interpose_bench --only), direct path on and off in
#          turn, three times each
#   fprof  the same once each with the interposer's profile (COLLECTIVES_INTERPOSE_PROFILE=1)
#   log    the x face's MPI_Sendrecv alone, preloaded with the log (what each message did)
#   suite:TEXT  the GPU suite's steps whose command contains TEXT (run-all.sh --only TEXT)
set -u
out="$1"; shift
mkdir -p "$out"
# env.sh unpacks the CUDA-aware Open MPI once (run-all.sh and run-interpose.sh source it too).
[ -f .gpu-box/env.sh ] && source .gpu-box/env.sh
nvidia-smi -L > "$out/machine.txt" 2>&1; nvidia-smi topo -m >> "$out/machine.txt" 2>&1
# The benchmark, built here as run-interpose.sh builds it.
exe="$PWD/.gpu-box/interpose/build/interpose_bench"
lib="$PWD/.gpu-box/lib/libcollectives_interpose.so"
if [ ! -x "$exe" ]; then
  mkdir -p "${exe%/*}"
  mpicc -O2 -o "$exe" -DUSE_CUDA -I/usr/local/cuda/include .gpu-box/interpose/interpose_bench.c \
    -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
fi
# One preloaded benchmark run under the CUDA-aware mpirun: VAR=VALUE..., then the arguments.
preloaded() {
  local vars=() names=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do vars+=("$1"); names+=(-x "${1%%=*}"); shift; done
  shift
  echo "\$ ${vars[*]} mpirun -n 2 -x LD_PRELOAD=$lib interpose_bench $*"
  env "${vars[@]}" LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 /opt/ompi-cuda/bin/mpirun -n 2 \
    --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH "${names[@]}" -x LD_PRELOAD="$lib" "$exe" "$@"
}
for part in "$@"; do
  case "$part" in
    ichk)
      (echo "\$ bash .gpu-box/run-interpose.sh --ranks 2,4"; bash .gpu-box/run-interpose.sh --ranks 2,4) > "$out/interpose-checks.txt" 2>&1
      grep -E "direct path|FAIL" "$out/interpose-checks.txt" | head -20; tail -3 "$out/interpose-checks.txt" ;;
    ichk3)
      (echo "\$ bash .gpu-box/run-interpose.sh --ranks 3"; bash .gpu-box/run-interpose.sh --ranks 3) > "$out/interpose-checks-3.txt" 2>&1
      tail -3 "$out/interpose-checks-3.txt" ;;
    bench)
      (echo "\$ bash .gpu-box/run-interpose.sh --bench"; bash .gpu-box/run-interpose.sh --bench) > "$out/interpose-bench.txt" 2>&1
      grep -E "^\||passed" "$out/interpose-bench.txt" | tail -40 ;;
    ab)
      for round in 1 2; do
        for direct in 1 0; do
          preloaded COLLECTIVES_INTERPOSE_DIRECT=$direct -- --budget 0.5
        done
      done > "$out/interpose-ab.txt" 2>&1
      grep -E "^\\$|face|halo" "$out/interpose-ab.txt" ;;
    face)
      for round in 1 2 3; do
        for direct in 1 0; do
          preloaded COLLECTIVES_INTERPOSE_DIRECT=$direct -- --budget 0.5 --only 'MPI_Sendrecv face'
        done
      done > "$out/interpose-face.txt" 2>&1
      grep -E "^\\$|bench" "$out/interpose-face.txt" ;;
    fprof)
      for direct in 1 0; do
        preloaded COLLECTIVES_INTERPOSE_DIRECT=$direct COLLECTIVES_INTERPOSE_PROFILE=1 -- --budget 0.5 --only 'MPI_Sendrecv face-x'
      done > "$out/interpose-face-profile.txt" 2>&1
      grep -E "^\\$|bench|r0\] profile: MPI_Sendrecv" "$out/interpose-face-profile.txt" ;;
    log)
      preloaded COLLECTIVES_INTERPOSE_LOG=1 -- --budget 0.05 --only 'MPI_Sendrecv face-x' > "$out/interpose-log.txt" 2>&1
      grep -E "^\\$|bench" "$out/interpose-log.txt"; grep -c "bytes directly" "$out/interpose-log.txt"
      grep -E "Sendrecv" "$out/interpose-log.txt" | sort | uniq -c | sort -rn | head -8 ;;
    suite:*)
      text="${part#suite:}"
      name=$(echo "$text" | tr -c 'A-Za-z0-9_\n-' '_')
      (echo "\$ bash .gpu-box/run-all.sh --only $text"; bash .gpu-box/run-all.sh --only "$text") > "$out/suite-$name.txt" 2>&1
      grep -E "^== \[|passed|failed" "$out/suite-$name.txt" | tail -40 ;;
    *) echo "unknown part $part"; exit 2 ;;
  esac
done
