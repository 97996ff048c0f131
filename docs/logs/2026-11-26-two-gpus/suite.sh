#!/usr/bin/env bash
# The GPU suite on 2 GPUs without the sanitizers, in two parts that each fit one 10-minute command:
#   bash docs/logs/2026-11-26-two-gpus/suite.sh OUTDIR a   GPU tests, NCCL binaries, examples
#   bash docs/logs/2026-11-26-two-gpus/suite.sh OUTDIR b   cuda_mpi_* under both MPIs, collbench p2p,
#                                                          then the NCCL binaries over NCCL's sockets
set -uo pipefail
out="${1:?usage: suite.sh OUTDIR a|b}"; part="${2:?a or b}"; mkdir -p "$out"
source .gpu-box/env.sh
export XTASK_MPI_TIMEOUT=200
if [ "$part" = a ]; then
  ( time bash .gpu-box/run-all.sh --skip-sanitizer --only ignored --only nccl_ --only examples ) \
    > "$out/suite-a.log" 2>&1
  grep -E "^== |mpi-tests:|test result|passed, |FAIL|failed|warm-up|cases ran|^real" "$out/suite-a.log" | grep -v "^test .* ok$" | tail -70
else
  ( time bash .gpu-box/run-all.sh --skip-sanitizer --only cuda_mpi_ --only collbench ) > "$out/suite-b.log" 2>&1
  grep -E "^== |mpi-tests:|passed, |FAIL|failed|^real" "$out/suite-b.log" | grep -v "^test .* ok$" | tail -30
  {
    for bin in nccl_dead_peer nccl_collectives; do
      echo "\$ NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 mpirun -n 2 $bin"
      time timeout 200 mpirun -n 2 -x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1 -x NCCL_DEBUG=INFO \
        -x OMPI_MCA_orte_allowed_exit_without_sync=1 .gpu-box/tests/$bin-* 2>&1 \
        | grep -v "^test .* ok$" | awk '!/NCCL INFO/ || /via NET|Using network/'; echo "exit ${PIPESTATUS[0]}"
    done
  } > "$out/socket.log" 2>&1
  grep -E "^\\$|mpi-tests|FAIL|Timeout|exit|^real|Using network" "$out/socket.log" | head -40
  grep -m 4 "via NET" "$out/socket.log"
fi
