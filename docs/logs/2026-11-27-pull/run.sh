#!/usr/bin/env bash
# bash docs/logs/2026-11-27-pull/run.sh OUT PART...   (from the checkout, .gpu-box/ staged)
#   probe   pull.cu under the CUDA-aware Open MPI, 2 ranks, one GPU each (PULL_ARGS=halo: the
#           six-face exchange only)
#   ichk    run-interpose.sh --ranks 2,4 (device checks)
#   ichk3   run-interpose.sh --ranks 3
#   shared  device checks with ranks sharing GPUs: 2 ranks on GPU 0; 3 and 4 ranks on GPUs 0, 1
#   bench   run-interpose.sh --bench
#   profile run-interpose.sh --profile
#   face    the faces' MPI_Sendrecv alone (interpose_bench --only), preloaded under the CUDA-aware
#           MPI, direct path on and off in turn, three times each
#   fprof   the x and y faces once each way with the interposer's profile
#   halo    the whole exchange (interpose_bench --only halo-3d), direct path on and off in turn,
#           three times each
#   hprof   the same once each way with the interposer's profile
#   pprof   the persistent exchange alone (MPI_Startall/MPI_Waitall) once each way, with the profile
#   log     the x face's MPI_Sendrecv alone, direct path on, with the log (what each message did)
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$1"; shift
mkdir -p "$out"
source .gpu-box/env.sh
gpu_box_info > "$out/machine.txt" 2>&1
# The benchmark, built as run-interpose.sh builds it.
exe=/tmp/interpose_bench
lib="$PWD/.gpu-box/lib/libcollectives_interpose.so"
mpicc -O2 -o "$exe" -DUSE_CUDA -I/usr/local/cuda/include .gpu-box/interpose/interpose_bench.c \
  -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
# One preloaded benchmark run under the CUDA-aware mpirun: VAR=VALUE..., then --, then its arguments.
preloaded() {
  local vars=() names=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do vars+=("$1"); names+=(-x "${1%%=*}"); shift; done
  shift
  echo "\$ ${vars[*]} mpirun -n 2 -x LD_PRELOAD=$lib interpose_bench $*"
  env "${vars[@]}" LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} \
    timeout 300 /opt/ompi-cuda/bin/mpirun -n 2 --allow-run-as-root --oversubscribe \
    -x LD_LIBRARY_PATH "${names[@]}" -x LD_PRELOAD="$lib" "$exe" "$@"
}
for part in "$@"; do
  case "$part" in
    probe)
      nvcc -O2 -arch=sm_90 -I/opt/ompi-cuda/include -L/opt/ompi-cuda/lib -Xlinker -rpath=/opt/ompi-cuda/lib \
        -o /tmp/pull "$here/pull.cu" -lmpi 2>&1 | grep -v -i warning
      (echo "\$ cuda_mpirun -np 2 pull ${PULL_ARGS:-}"; cuda_mpirun -np 2 /tmp/pull ${PULL_ARGS:-}) 2>&1 | tee "$out/probe.txt" ;;
    ichk) bash .gpu-box/run-interpose.sh --ranks 2,4 2>&1 | tee "$out/interpose-checks.txt" | tail -n 5 ;;
    ichk3) bash .gpu-box/run-interpose.sh --ranks 3 2>&1 | tee "$out/interpose-checks-3.txt" | tail -n 5 ;;
    shared)
      CUDA_VISIBLE_DEVICES=0 bash .gpu-box/run-interpose.sh --ranks 2 2>&1 | tee "$out/interpose-checks-shared-2.txt" | tail -n 3
      CUDA_VISIBLE_DEVICES=0,1 bash .gpu-box/run-interpose.sh --ranks 3,4 2>&1 | tee "$out/interpose-checks-shared-34.txt" | tail -n 3 ;;
    profile) bash .gpu-box/run-interpose.sh --profile 2>&1 | tee "$out/interpose-profile.txt" | grep -E '^(\||.*passed)' | tail -n 60 ;;
    face)
      for round in 1 2 3; do
        for direct in 1 0; do
          preloaded COLLECTIVES_INTERPOSE_DIRECT=$direct -- --budget 0.5 --only 'MPI_Sendrecv face'
        done
      done > "$out/interpose-face.txt" 2>&1
      grep -E "^\\$|bench" "$out/interpose-face.txt" ;;
    fprof)
      for direct in 1 0; do
        preloaded COLLECTIVES_INTERPOSE_DIRECT=$direct COLLECTIVES_INTERPOSE_PROFILE=1 -- --budget 0.5 --only 'MPI_Sendrecv face'
      done > "$out/interpose-face-profile.txt" 2>&1
      grep -E "^\\$|bench|r0\] profile" "$out/interpose-face-profile.txt" | head -60 ;;
    halo)
      for round in 1 2 3; do
        for direct in 1 0; do
          preloaded COLLECTIVES_INTERPOSE_DIRECT=$direct -- --budget 0.5 --only 'halo-3d'
        done
      done > "$out/interpose-halo.txt" 2>&1
      grep -E "^\\$|bench" "$out/interpose-halo.txt" ;;
    hprof)
      for direct in 1 0; do
        preloaded COLLECTIVES_INTERPOSE_DIRECT=$direct COLLECTIVES_INTERPOSE_PROFILE=1 -- --budget 0.5 --only 'MPI_Isend/MPI_Irecv/MPI_Waitall halo-3d'
      done > "$out/interpose-halo-profile.txt" 2>&1
      grep -E "^\\$|bench|r0\] profile" "$out/interpose-halo-profile.txt" | head -80 ;;
    pprof)
      for direct in 1 0; do
        preloaded COLLECTIVES_INTERPOSE_DIRECT=$direct COLLECTIVES_INTERPOSE_PROFILE=1 -- --budget 0.5 --only 'MPI_Startall/MPI_Waitall halo-3d'
      done > "$out/interpose-persistent-profile.txt" 2>&1
      grep -E "^\\$|bench|r0\] profile" "$out/interpose-persistent-profile.txt" | head -80 ;;
    log)
      preloaded COLLECTIVES_INTERPOSE_DIRECT=1 COLLECTIVES_INTERPOSE_LOG=1 -- --budget 0.05 --only 'MPI_Sendrecv face-x' > "$out/interpose-log.txt" 2>&1
      grep -E "^\\$|bench" "$out/interpose-log.txt"; grep -c "bytes directly" "$out/interpose-log.txt"
      sed -E 's/[0-9]+/N/g' "$out/interpose-log.txt" | sort | uniq -c | sort -rn | head -12 ;;
    bench) bash .gpu-box/run-interpose.sh --bench 2>&1 | tee "$out/interpose-bench.txt" | grep -E '^(bench|\||.*passed)' | tail -n 40 ;;
    *) echo "unknown part $part" ;;
  esac
done
