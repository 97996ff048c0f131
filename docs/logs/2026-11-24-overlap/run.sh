#!/usr/bin/env bash
# collbench overlap against OMB's osu_iallreduce on the same 2 ranks, in one job.
# Usage: run.sh COLLBENCH OMB_MPI_DIR [OUT_DIR] [MPIRUN_FLAGS...]
#   COLLBENCH     the collbench binary (release build: cargo build --release -p bench-cli)
#   OMB_MPI_DIR   .../libexec/osu-micro-benchmarks/mpi of OMB 7.4 built by ../shared/peers/build.sh
#   OUT_DIR       where the logs go (default: .)
#   MPIRUN_FLAGS  placement; default "--bind-to none" so each rank's progress thread can take a
#                 spare core (Open MPI binds each of 2 ranks to one core otherwise).
set -euo pipefail
cb="${1:?collbench}"; omb="${2:?OMB mpi dir}"; out="${3:-.}"; shift $(( $# < 3 ? $# : 3 ))
place=("$@"); [ ${#place[@]} -eq 0 ] && place=(--bind-to none)
mkdir -p "$out"
run() { local name="$1"; shift; echo "\$ mpirun -n 2 ${place[*]} $*" | tee "$out/$name.log"; mpirun --allow-run-as-root -n 2 "${place[@]}" "$@" 2>&1 | tee -a "$out/$name.log"; }
{ date -u; uname -a; nproc; lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket' || true; mpirun --version | head -1; } > "$out/machine.txt"
run osu_iallreduce "$omb/collective/osu_iallreduce" -m 1024:4194304 -i 100 -x 10
run osu_iallreduce_t10 "$omb/collective/osu_iallreduce" -m 1024:4194304 -i 100 -x 10 -t 10
run collbench_overlap_allreduce "$cb" overlap allreduce -b 1K -e 4M -n 20 -w 5 --progress both --efficiency
run collbench_overlap_allreduce_t10 "$cb" overlap allreduce -b 1K -e 4M -n 100 -w 10 -t 10 --progress both
run collbench_overlap_all "$cb" overlap -b 1K -e 1M -f 4 -n 50 -w 5 --progress both
