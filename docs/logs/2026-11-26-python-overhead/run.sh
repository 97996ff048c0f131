#!/usr/bin/env bash
# Python overhead, measured like OMB-Py: 1 B latency and 4 B all-reduce on 2 ranks of one machine,
# through OMB 7.4's C binaries, OMB-Py 7.4's loops on mpi4py and the same loops on the collectives
# module (crates/collectives-py/bench/osu_py.py), interleaved in REPS rounds of the same run. OMB-Py
# itself runs for the latency; its allreduce passes a float count, which mpi4py 4 refuses, so the
# mpi4py all-reduce is osu_py.py --via mpi4py (OMB-Py's loop with an integer count).
# Usage (from the workspace root): bash docs/logs/2026-11-26-python-overhead/run.sh [REPS] [ITERS]
# Needs: target/python-venv with mpi4py and numpy (cargo xtask test makes it), maturin in it, and
# ../shared/peers (OMB 7.4 source). Writes raw/*.txt beside this script.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
reps="${1:-20}"; iters="${2:-20000}"; skip=1000
venv="$root/target/python-venv"; py="$venv/bin/python"
peers="${PEERS:-$root/../shared/peers}"; [ -d "$peers" ] || peers=/work/shared/peers
omb_dest="$root/target/peers"
mkdir -p "$here/raw"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() { mpirun -n 2 --bind-to core "$@"; }

# OMB C binaries and OMB-Py from the pristine 7.4 tarball.
[ -x "$omb_dest/omb/libexec/osu-micro-benchmarks/mpi/pt2pt/osu_latency" ] || bash "$peers/build.sh" "$omb_dest" cpu
omb="$omb_dest/omb/libexec/osu-micro-benchmarks/mpi"
ombpy="$omb_dest/src-omb/osu-micro-benchmarks-7.4/python"
# The module in a release build (the overhead of a debug build is not what users get).
(cd "$root/crates/collectives-py" && VIRTUAL_ENV="$venv" "$venv/bin/maturin" develop --release --quiet)
ours="$root/crates/collectives-py/bench/osu_py.py"

{
  date -u +"# %Y-%m-%dT%H:%M:%SZ"; uname -srm; nproc; mpirun --version | head -1
  "$py" -c 'import mpi4py, numpy, sys; print("python", sys.version.split()[0], "mpi4py", mpi4py.__version__, "numpy", numpy.__version__)'
  git -C "$root" rev-parse HEAD; uptime
} > "$here/raw/environment.txt"

for r in $(seq 1 "$reps"); do
  for bench in latency allreduce; do
    if [ "$bench" = latency ]; then c=pt2pt/osu_latency; size=1; else c=collective/osu_allreduce; size=4; fi
    run "$omb/$c" -m "$size:$size" -i "$iters" -x "$skip" > "$here/raw/$bench-c-$r.txt"
    if [ "$bench" = latency ]; then
      (cd "$ombpy" && run "$py" run.py --benchmark "$bench" --buffer numpy --min "$size" --max "$size" \
         --iterations "$iters" --skip "$skip") > "$here/raw/$bench-ombpy-$r.txt"
    fi
    run "$py" "$ours" "$bench" --via mpi4py --min "$size" --max "$size" --iterations "$iters" --skip "$skip" \
      > "$here/raw/$bench-mpi4py-$r.txt"
    run "$py" "$ours" "$bench" --min "$size" --max "$size" --iterations "$iters" --skip "$skip" \
      > "$here/raw/$bench-collectives-$r.txt"
  done
  echo "round $r done" >&2
done
"$py" "$here/summarize.py" "$here/raw" | tee "$here/summary.md"
# The binding's own cost without a peer (one process: steadier on a shared machine).
mpirun -n 1 "$py" "$root/crates/collectives-py/bench/one_rank.py" | tee "$here/raw/one-rank.txt"
