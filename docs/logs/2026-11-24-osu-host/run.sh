#!/usr/bin/env bash
# Host MPI against OSU Micro-Benchmarks 7.4, every collective and the four point-to-point tests,
# on 2 ranks of this machine: for each pair, OMB's benchmark and `collbench ... --osu` with the same
# flags, one after the other in the same job, alternating, REPS times.
#
#   bash docs/logs/2026-11-24-osu-host/run.sh [OMB_MPI_DIR] [COLLBENCH] [OUT_DIR]
#
# OMB_MPI_DIR  OMB's libexec/osu-micro-benchmarks/mpi (default: /tmp/peers-osu/..., as built by
#              `bash ../shared/peers/build.sh /tmp/peers-osu cpu`)
# COLLBENCH    a release collbench (default: $CARGO_TARGET_DIR/release/collbench, else target/release)
# OUT_DIR      where the raw output goes (default: raw/ beside this script)
# REPS=3       repetitions of each pair (each repetition runs OSU then ours)
# FIRST_REP=1  the number of the first repetition (more of them later: FIRST_REP=3 REPS=4 ONLY=...)
# MPIRUN       the launcher (default: mpirun --allow-run-as-root --oversubscribe -n 2)
# ONLY         a regular expression: run only the pairs whose OSU name matches
# EXTRA_OSU    extra flags for both sides of every pair (for example `-d cuda` on a GPU machine)
#
# Sizes, like for like: OSU's size of allgather, alltoall, gather and scatter (and of their v forms)
# is the block of one rank; collbench's is nccl-tests' size, the whole gathered (or scattered)
# buffer, n blocks. So OSU runs -m 8:1M everywhere and collbench runs -m 16:2M for those eight
# (n = 2), which is the same messages; the others (allreduce, reduce_scatter, bcast, reduce) count
# the same buffer in both. The v forms are even in OSU and uneven in collbench (rank i gets a share
# proportional to i + 1; all-to-allv blocks of 1, 2 or 3 units): about the same total (rounded down
# to whole units: 15 B for 16, 2097150 for 2 MiB), a different split (all-to-allv: 7 B for 16 at the
# smallest). compare.py pairs the k-th row of ours with the k-th row of OSU's run. collbench runs
# every collective as `coll NAME` (`collbench allgatherv` is the NCCL comparison of uneven
# algorithms).
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
omb="${1:-/tmp/peers-osu/omb/libexec/osu-micro-benchmarks/mpi}"
target="${CARGO_TARGET_DIR:-$here/../../../target}"
collbench="${2:-$target/release/collbench}"
out="${3:-$here/raw}"
reps="${REPS:-3}"
first="${FIRST_REP:-1}"
read -r -a mpirun <<<"${MPIRUN:-mpirun --allow-run-as-root --oversubscribe -n 2}"
read -r -a extra <<<"${EXTRA_OSU:-}"
only="${ONLY:-.}"
[ -x "$collbench" ] || { echo "no collbench at $collbench (cargo build --release -p bench-cli)" >&2; exit 2; }
[ -d "$omb" ] || { echo "no OMB at $omb" >&2; exit 2; }
mkdir -p "$out"

# Collectives: OSU's own iteration counts, given explicitly to both sides because collbench --osu
# takes one count at every size: 1000 timed calls after 200 warm-up ones up to 8 KiB, 100 after 10
# above (OMB's defaults), so each pair is two launches per side. MPI_CHAR, no validation.
small=(-i 1000 -x 200)
large=(-i 100 -x 10)
# name in OMB | collbench subcommand | collbench's size over OSU's (n = 2 blocks, or 1; - none)
pairs=(
  "osu_allreduce            allreduce     1"
  "osu_allgather            allgather     2"
  "osu_allgatherv           allgatherv    2"
  "osu_reduce_scatter       reducescatter 1"
  "osu_reduce_scatter_block reducescatter 1"
  "osu_bcast                broadcast     1"
  "osu_reduce               reduce        1"
  "osu_alltoall             alltoall      2"
  "osu_alltoallv            alltoallv     2"
  "osu_gather               gather        2"
  "osu_gatherv              gatherv       2"
  "osu_scatter              scatter       2"
  "osu_scatterv             scatterv      2"
  "osu_barrier              barrier       -"
)
# Point-to-point: OSU's own iteration counts (10000/1000 round trips, 100/20 windows; collbench p2p
# --osu takes the same by default), 8 B to 1 MiB.
p2p=(
  "osu_latency latency"
  "osu_bw      bw"
  "osu_bibw    bibw"
  "osu_mbw_mr  mbw-mr"
)

run() { # label file command...
  local file="$1"; shift
  echo "+ $*" >>"$out/commands.txt"
  "$@" >"$file" 2>&1 || echo "exit status $? from: $*" >>"$out/failures.txt"
}

{ echo "# $(date -u +%FT%TZ) $(hostname) $(nproc) cores"; mpirun --version | head -1; "$collbench" --version 2>/dev/null; } >>"$out/machine.txt"
# The load of the machine at each repetition: other work on the same cores is the first source of noise.
for rep in $(seq "$first" "$reps"); do
  echo "rep $rep: $(uptime)" >>"$out/machine.txt"
  for p in "${pairs[@]}"; do
    read -r osu ours scale <<<"$p"
    [[ "$osu" =~ $only ]] || continue
    if [ "$scale" = "-" ]; then
      run "$out/$osu.osu.$rep.txt" "${mpirun[@]}" "$omb/collective/$osu" -f "${small[@]}" "${extra[@]}"
      run "$out/$osu.ours.$rep.txt" "${mpirun[@]}" "$collbench" coll "$ours" --osu -f "${small[@]}" "${extra[@]}"
      continue
    fi
    for part in small large; do
      if [ "$part" = small ]; then lo=8 hi=8192 it=("${small[@]}"); else lo=16384 hi=1048576 it=("${large[@]}"); fi
      run "$out/$osu.osu.$rep.$part.txt" "${mpirun[@]}" "$omb/collective/$osu" -f -m "$lo:$hi" "${it[@]}" "${extra[@]}"
      run "$out/$osu.ours.$rep.$part.txt" "${mpirun[@]}" "$collbench" coll "$ours" --osu -f \
        -m "$((lo * scale)):$((hi * scale))" "${it[@]}" "${extra[@]}"
    done
  done
  for p in "${p2p[@]}"; do
    read -r osu test <<<"$p"
    [[ "$osu" =~ $only ]] || continue
    run "$out/$osu.osu.$rep.txt" "${mpirun[@]}" "$omb/pt2pt/$osu" -m 8:1048576 "${extra[@]}"
    run "$out/$osu.ours.$rep.txt" "${mpirun[@]}" "$collbench" p2p --osu --test "$test" -m 8:1048576 "${extra[@]}"
  done
done
python3 "$here/compare.py" "$out" | tee "$out/../summary.md"
