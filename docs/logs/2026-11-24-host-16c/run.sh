#!/usr/bin/env bash
# Host MPI on the GPU box's 16-core host, 2 ranks, in one job: non-blocking all-reduce overlap
# (collbench overlap with the progress engine off and on, beside OMB's osu_iallreduce), the
# persistent all-reduce (beside osu_allreduce_persistent and osu_allreduce), the progress test
# binary (asserted there: 16 cores), and the 8 B collectives beside OSU.
# Run from the directory that holds .gpu-box/:  bash docs/logs/2026-11-24-host-16c/run.sh OUT
set -uo pipefail
out="${1:?usage: run.sh OUT}"; mkdir -p "$out"
source .gpu-box/env.sh
# Large staged binaries travel as NAME.xz (cargo xtask gpu-stage); unpack them once.
for packed in .gpu-box/bin/*.xz .gpu-box/tests/*.xz; do [ -e "$packed" ] && [ ! -e "${packed%.xz}" ] && xz -dk "$packed"; done
cb=.gpu-box/bin/collbench
dest=/tmp/peers-cpu
bash .gpu-box/peers/build.sh $dest cpu > "$out/build.txt" 2>&1
omb=$dest/omb/libexec/osu-micro-benchmarks/mpi
# osu_allreduce_persistent: OMB builds it only against an MPI 4 library; Open MPI 4.1 has the call
# as MPIX_Allreduce_init (mpi-ext.h): OMB's unmodified source with a forced include.
src=$dest/src-omb/osu-micro-benchmarks-7.4; util=$src/c/util
printf '#include <mpi.h>\n#include <mpi-ext.h>\n#define MPI_Allreduce_init MPIX_Allreduce_init\n' > $dest/mpix_shim.h
mpicc -O2 -DFIELD_WIDTH=18 -DFLOAT_PRECISION=2 -DPACKAGE_VERSION='"7.4"' -I$util -include $dest/mpix_shim.h \
  $src/c/mpi/collective/persistent/osu_allreduce_persistent.c $util/osu_util.o $util/osu_util_graph.o \
  $util/osu_util_mpi.o $util/osu_util_papi.o $util/osu_util_validation.o -lm -o $dest/osu_allreduce_persistent \
  >> "$out/build.txt" 2>&1
{ date -u; nproc; lscpu | grep -E 'Model name|^CPU\(s\)' ; mpirun --version | head -1; } > "$out/machine.txt"
M=(mpirun -n 2 --bind-to none)
run() { local name="$1"; shift; { echo "\$ ${M[*]} $*"; timeout 120 "${M[@]}" "$@" 2>&1; } > "$out/$name.txt"; }
run osu_iallreduce $omb/collective/osu_iallreduce -m 1024:16777216 -i 100 -x 10
run collbench_overlap_allreduce $cb overlap allreduce -b 1K -e 16M -n 20 -w 5 --progress both --efficiency
run osu_iallreduce_t10 $omb/collective/osu_iallreduce -m 1024:16777216 -i 100 -x 10 -t 10
run collbench_overlap_allreduce_t10 $cb overlap allreduce -b 1K -e 16M -n 20 -w 5 -t 10 --progress both
run collbench_overlap_all $cb overlap -b 1K -e 4M -f 4 -n 20 -w 5 --progress both
run mpi_progress .gpu-box/tests/mpi_progress-*
for pass in 1 2; do
  run osu_allreduce-$pass $omb/collective/osu_allreduce -m 8:1048576 -i 1000 -x 200 -f
  run osu_allreduce_persistent-$pass $dest/osu_allreduce_persistent -m 8:1048576 -i 1000 -x 200 -f
  run collbench_persistent_osu-$pass $cb allreduce --osu --persistent -m 8:1048576 -i 1000 -x 200 -f -c
done
for c in allreduce reduce bcast reduce_scatter barrier; do
  run osu_$c $omb/collective/osu_$c -m 8:8 -i 10000 -x 1000
done
for c in allreduce reduce broadcast reducescatter barrier; do
  run collbench_osu_$c $cb $c --osu -m 8:8 -i 10000 -x 1000
done
grep -h "Overlap\|^[0-9]" "$out/collbench_overlap_allreduce.txt" | head -40
