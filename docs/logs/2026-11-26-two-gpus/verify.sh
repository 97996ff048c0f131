#!/usr/bin/env bash
# After the asynchronous-error change: the NCCL deadline binaries again, over NVLink and over NCCL's
# socket transport, 1 and 2 ranks, with the timeout example.
#   bash docs/logs/2026-11-26-two-gpus/verify.sh OUTDIR
set -uo pipefail
out="${1:?usage: verify.sh OUTDIR}"; mkdir -p "$out"
source .gpu-box/env.sh
T=.gpu-box/tests
x="-x OMPI_MCA_orte_allowed_exit_without_sync=1"
{
  for env in "" "-x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1"; do
    for n in 1 2; do
      for bin in nccl_dead_peer nccl_collectives; do
        echo "\$ mpirun -n $n $env $bin"
        SECONDS=0
        OMPI_MCA_orte_allowed_exit_without_sync=1 timeout 200 mpirun -n $n $env $x $T/$bin-* 2>&1 | grep -v "^test .* ok$" | grep -v "^ *$"
        echo "exit ${PIPESTATUS[0]} after ${SECONDS} s"
      done
    done
  done
  echo "\$ mpirun -n 2 08_nccl_timeout"
  timeout 60 mpirun -n 2 .gpu-box/bin/08_nccl_timeout 2>&1; echo "exit $?"
} > "$out/verify.log" 2>&1
grep -E "^\\$|mpi-tests|FAIL|\[rank|exit |08_nccl" "$out/verify.log"
