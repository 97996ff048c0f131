#!/usr/bin/env bash
# Persistent all-reduce on host MPI: collbench's library and persistent variants beside OMB 7.4's
# osu_allreduce and osu_allreduce_persistent, in one job, 8 B to 1 MiB, 2 ranks (RANKS=...).
# Usage (from the repository root): docs/logs/2026-11-24-persistent-host/run.sh [OUT_DIR]
# Needs: Open MPI (mpirun, mpicc), ../shared/peers (OMB 7.4 tarball and build.sh), cargo.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="${1:-$root/docs/logs/2026-11-24-persistent-host}"
peers="${PEERS:-$root/../shared/peers}"; [ -d "$peers" ] || peers=/work/shared/peers
dest="${PEERS_BUILD:-/tmp/peers-persistent}"
ranks="${RANKS:-2}"
iters="${ITERS:-1000}"; warmup="${WARMUP:-200}"
mpirun_=(mpirun -n "$ranks")
[ "$(id -u)" = 0 ] && mpirun_+=(--allow-run-as-root)
mkdir -p "$out"
target="${CARGO_TARGET_DIR:-$root/target}"
( cd "$root" && cargo build --release -p bench-cli -j"${JOBS:-1}" )
cb="$target/release/collbench"
omb="$dest/omb/libexec/osu-micro-benchmarks/mpi/collective"
[ -x "$omb/osu_allreduce" ] || bash "$peers/build.sh" "$dest" cpu
# OMB builds its persistent collectives only against an MPI 4 library (MPI_Allreduce_init). Open
# MPI 4.1 has the same call as MPIX_Allreduce_init (mpi-ext.h, pcollreq): build OMB's unmodified
# source against it with a forced include that maps the name.
pers="$omb/persistent/osu_allreduce_persistent"
if [ ! -x "$pers" ]; then
  src="$dest/src-omb/osu-micro-benchmarks-7.4"; util="$src/c/util"
  pers="$dest/osu_allreduce_persistent"
  printf '#include <mpi.h>\n#include <mpi-ext.h>\n#define MPI_Allreduce_init MPIX_Allreduce_init\n' > "$dest/mpix_shim.h"
  mpicc -O2 -DFIELD_WIDTH=18 -DFLOAT_PRECISION=2 -DPACKAGE_VERSION='"7.4"' -I"$util" \
    -include "$dest/mpix_shim.h" "$src/c/mpi/collective/persistent/osu_allreduce_persistent.c" \
    "$util"/osu_util.o "$util"/osu_util_graph.o "$util"/osu_util_mpi.o "$util"/osu_util_papi.o \
    "$util"/osu_util_validation.o -lm -o "$pers"
fi
{
  echo "date: $(date -u +%FT%TZ)"; echo "host: $(hostname), $(nproc) cores, $(uname -r)"
  echo "mpi: $(mpirun --version | head -1)"; echo "ranks: $ranks, iterations: $iters after $warmup"
  echo "commit: $(git -C "$root" rev-parse --short HEAD)"
} > "$out/machine.txt"
osu=(-m 8:1048576 -i "$iters" -x "$warmup")
run() { local name="$1"; shift; echo "+ ${mpirun_[*]} $*" | tee "$out/$name.txt"; "${mpirun_[@]}" "$@" 2>&1 | tee -a "$out/$name.txt"; }
# The same job, one after the other, twice, so that drift between the runs shows.
for pass in 1 2; do
  run "osu_allreduce-$pass" "$omb/osu_allreduce" "${osu[@]}" -f
  run "osu_allreduce_persistent-$pass" "$pers" "${osu[@]}" -f
  # OSU's conventions (MPI_CHAR, OSU's flags and tables): library and persistent rows per size.
  run "collbench-osu-$pass" "$cb" allreduce --osu --persistent "${osu[@]}" -f -c
  # nccl-tests' table of the same (float), with the JSON document.
  run "collbench-table-$pass" "$cb" allreduce --persistent -b 8 -e 1M -f 2 -n "$iters" \
    -w "$warmup" -c 1 --json "$out/collbench-$pass.json"
done
