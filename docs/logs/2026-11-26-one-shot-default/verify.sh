#!/usr/bin/env bash
# The one-shot path chosen by default (no COLLECTIVES_ONE_SHOT_MAX_BYTES), after the exit waits for
# aborts still running: the dead-peer case that ended with SIGSEGV on 3 and 4 ranks, then the
# NCCL suite's largest binaries and the one-shot example on 4 ranks. From the directory that holds
# .gpu-box/ (staged by `cargo xtask gpu-stage`): bash verify.sh OUTDIR
set -uo pipefail
out="${1:?usage: verify.sh OUTDIR}"; mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
unset COLLECTIVES_ONE_SHOT_MAX_BYTES
T=.gpu-box/tests; E=.gpu-box/bin
for p in $T/nccl_dead_peer-*.xz $T/nccl_collectives-*.xz $T/nccl_one_shot-*.xz $E/12_nccl_one_shot.xz; do
  [ -e "$p" ] && [ ! -e "${p%.xz}" ] && xz -dk "$p"; done
bin() { ls $T/$1-* | grep -v '\.xz$' | head -1; }
x="-x OMPI_MCA_orte_allowed_exit_without_sync=1"
r() { local n=$1; shift; echo "\$ mpirun -n $n $*"; s=$SECONDS; timeout 60 mpirun --oversubscribe -n $n "$@" 2>&1 | grep -v "^test .* ok$"; echo "exit ${PIPESTATUS[0]} after $((SECONDS - s)) s"; }
{
  for n in 3 4 2 3 4; do r $n $x $(bin nccl_dead_peer); done
  r 4 $(bin nccl_collectives)
  r 4 -x ONE_SHOT_EXPECT_READY=1 $(bin nccl_one_shot)
  r 4 $E/12_nccl_one_shot
} 2>&1 | tee "$out/verify.log" | grep -E "^\\$|^exit|mpi-tests|Segm|FAIL|panicked|rank [0-9] (exit|got)|µs|us "
