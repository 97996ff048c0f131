#!/usr/bin/env bash
# The GPU suite after the operation became a value (and the one-shot all-reduce chosen inside
# NcclComm's all-reduce), on 4 GPUs, in one 10-minute command: every step on 4 ranks with the
# interposer's device checks, then the steps on 2 ranks while time is left.
# Run from the directory that holds .gpu-box/ (staged by `cargo xtask gpu-stage`):
#   bash docs/logs/2026-11-26-after-op/after.sh OUTDIR
set -uo pipefail
out="${1:?usage: after.sh OUTDIR}"; mkdir -p "$out"
source .gpu-box/env.sh
export XTASK_MPI_TIMEOUT=240
summary() { grep -E "^== \[|mpi-tests:|test result|passed, |FAIL|failed|panicked|timed out|^real|one-shot|library all_reduce|12_nccl" "$1" | grep -v "^test .* ok$" | sed 's/OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 //; s/--allow-run-as-root --oversubscribe //; s/LD_LIBRARY_PATH=[^ ]* //' | cut -c1-220 | tail -${2:-70}; }
SECONDS=0
( time bash .gpu-box/run-all.sh --skip-sanitizer --only "mpirun -n 4 " --only interpose ) > "$out/suite-n4.log" 2>&1
summary "$out/suite-n4.log"
echo "=== 4 ranks and the interposer: $SECONDS s"
if [ "$SECONDS" -lt 330 ]; then
  ( time bash .gpu-box/run-all.sh --skip-sanitizer --only "mpirun -n 2 " ) > "$out/suite-n2.log" 2>&1
  summary "$out/suite-n2.log" 50
fi
echo "=== all: $SECONDS s"
