#!/usr/bin/env bash
# Where a blocking small all-reduce's time goes, the one-shot kernel's push and pull schemes side
# by side, a solver on the GPUs with and without the one-shot path, and the checks of the path:
# parts that each fit one 10-minute command on a 4-GPU machine.
# Run from the directory that holds .gpu-box/ (staged by `cargo xtask gpu-stage`):
#   bash docs/logs/2026-11-27-latency/run.sh OUTDIR PART...
# Parts:
#   ot      nccl_one_shot on 2, 3 and 4 ranks (every type and operation against host answers,
#           10,000 calls back to back of changing lengths, a rank that never comes)
#   lat     examples/12_nccl_one_shot on 2, 3 and 4 ranks, push scheme (the default), then pull
#           (COLLECTIVES_ONE_SHOT_SCHEME=pull), then nccl-tests all_reduce_perf -z 1 and -z 0 and
#           -R 2 in the same job
#   cg      examples/13_nccl_cg on 2, 3 and 4 ranks: a conjugate-gradient solve per iteration with
#           and without the one-shot path
#   osan    compute-sanitizer memcheck, racecheck and synccheck over nccl_one_shot on 2 ranks
#           (memcheck on the one-shot kernel only: NCCL's own kernels read past a 4-byte buffer by
#           design, 16-byte loads, which memcheck stops as an error; and no report of CUDA API
#           errors: libnccl probes kernels built for other GPUs and handles the errors itself)
#   mpi4    4 ranks under the CUDA-aware Open MPI: collbench allreduce --osu on cuda-mpi and
#           mpi-staged beside OMB's osu_allreduce -d cuda, 8 B to 4 MiB
#   doctor  collbench doctor and the per-call record (COLLECTIVES_RECORD=1) of collbench allreduce
#           on 4 ranks with the path chosen, turned off, and not offered (2 ranks on one GPU)
#   p2prec  2 ranks under the CUDA-aware Open MPI, 1-4 MiB: osu_bw -d cuda D D, then collbench p2p
#           --test bw on cuda-mpi with the per-call record (COLLECTIVES_RECORD=1: each isend's and
#           irecv's host time, where a fixed cost per message would show)
#   ibench  the interposer's benchmark (run-interpose.sh --bench)
#   iprof   the interposer's benchmark with every preloaded run repeated under its per-phase
#           profile (run-interpose.sh --profile)
#   ichk    the interposer's device checks on 2 and 4 ranks (run-interpose.sh --ranks 2,4)
set -uo pipefail
out="${1:?usage: run.sh OUTDIR PART...}"; shift; mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
B=.gpu-box/bin; T=.gpu-box/tests
for packed in $B/*.xz $T/*.xz; do [ -e "$packed" ] && [ ! -e "${packed%.xz}" ] && xz -dk "$packed"; done
[ -s "$out/machine.txt" ] || { nvidia-smi -L; nvidia-smi topo -m; } > "$out/machine.txt" 2>&1
source .gpu-box/env.sh >/dev/null 2>&1
peers=/tmp/peers; NT=$peers/nccl-tests/build
omb=$peers/omb-cuda-aware/libexec/osu-micro-benchmarks/mpi
case " $* " in *" lat "*|*" mpi4 "*|*" p2prec "*) [ -x $NT/all_reduce_perf ] || ( bash .gpu-box/peers/build.sh $peers gpu > $peers.build.log 2>&1 ) & ;; esac
# run LIMIT CMD...: the command echoed, run, and its exit status.
run() { local limit=$1; shift; echo "\$ $*"; timeout "$limit" "$@" 2>&1 | grep -v "^test .* ok$"; echo "exit ${PIPESTATUS[0]}"; }
cuda_mpirun() { local n=$1; shift; echo "\$ cuda_mpirun -n $n ${*#*/mpi/}"; timeout 120 /opt/ompi-cuda/bin/mpirun -n $n -x LD_LIBRARY_PATH "$@" 2>&1; }
one_shot=$(ls $T/nccl_one_shot-* | grep -v '\.xz$' | head -1)
for part in "$@"; do
  SECONDS=0
  case $part in
    ot)
      for n in 2 3 4; do
        run 200 mpirun -n $n -x ONE_SHOT_EXPECT_READY=1 -x OMPI_MCA_orte_allowed_exit_without_sync=1 $one_shot
      done > "$out/one-shot-tests.txt" 2>&1
      grep -E "^\\$|mpi-tests|back to back|FAIL|panicked|^exit" "$out/one-shot-tests.txt" ;;
    lat)
      { for n in 2 3 4; do
          run 120 mpirun -n $n $B/12_nccl_one_shot
          run 120 mpirun -n $n -x COLLECTIVES_ONE_SHOT_SCHEME=pull $B/12_nccl_one_shot
        done
        wait
        for n in 2 3 4; do
          for z in "-z 1" "-z 0" "-z 0 -R 2"; do
            run 60 mpirun -n $n $NT/all_reduce_perf -g 1 -b 8 -e 256K -f 8 -n 2000 -w 200 -c 1 $z
          done
        done; } > "$out/latency.txt" 2>&1
      grep -vE "^# (nThread|Using|Collective|Out of|Avg)|^#$|^#  Rank|^# *$|nccl-tests version" "$out/latency.txt" ;;
    cg)
      { for n in 2 3 4; do run 120 mpirun -n $n $B/13_nccl_cg; done
        run 120 mpirun -n 4 -x COLLECTIVES_ONE_SHOT_SCHEME=pull $B/13_nccl_cg; } > "$out/cg.txt" 2>&1
      cat "$out/cg.txt" ;;
    osan)
      san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
      f="one_shot_floats,one_shot_integers,one_shot_complex_as_lanes,one_shot_inside_the_library_all_reduce"
      for tool in "memcheck --kernel-name kns=one_shot_all_reduce --report-api-errors no" racecheck synccheck; do
        run 200 mpirun -n 2 -x MPI_TESTS_FILTER="$f" $san --tool $tool --error-exitcode 1 $one_shot
      done > "$out/one-shot-sanitizer.txt" 2>&1
      grep -E "^\\$|SUMMARY|mpi-tests|^exit|FAIL" "$out/one-shot-sanitizer.txt" ;;
    mpi4)
      wait
      { cuda_mpirun 4 $omb/collective/osu_allreduce -d cuda -m 8:4194304 -f
        for b in cuda-mpi mpi-staged; do cuda_mpirun 4 $B/collbench allreduce --osu -d cuda -m 8:4194304 -f --backend $b; done
      } > "$out/mpi4-osu.txt" 2>&1
      grep -E "^\\$|^(8|32768|262144|1048576|2097152|4194304) " "$out/mpi4-osu.txt" ;;
    p2prec)
      wait
      { cuda_mpirun 2 $peers/omb-cuda-aware/libexec/osu-micro-benchmarks/mpi/pt2pt/osu_bw -d cuda -m 1048576:4194304 D D
        cuda_mpirun 2 -x COLLECTIVES_RECORD=1 $B/collbench p2p --osu --test bw -d cuda -m 1048576:4194304 --backend cuda-mpi
      } > "$out/p2p-record.txt" 2>&1
      grep -vE "^#" "$out/p2p-record.txt" | head -60 ;;
    doctor)
      { run 60 mpirun -n 4 $B/collbench doctor
        run 60 mpirun -n 4 -x COLLECTIVES_RECORD=1 $B/collbench allreduce --backend nccl -b 8 -e 64K -f 8 -n 20 -w 2
        run 60 mpirun -n 4 -x COLLECTIVES_RECORD=1 -x COLLECTIVES_ONE_SHOT_MAX_BYTES=0 $B/collbench allreduce --backend nccl -b 8 -e 64K -f 8 -n 20 -w 2
        run 60 mpirun -n 2 -x CUDA_VISIBLE_DEVICES=0 $B/collbench doctor
        run 60 mpirun -n 2 -x CUDA_VISIBLE_DEVICES=0 -x COLLECTIVES_RECORD=1 $B/collbench allreduce --backend nccl -b 8 -e 64K -f 8 -n 20 -w 2
      } > "$out/doctor-record.txt" 2>&1
      grep -iE "^\\$|one-shot|native|^exit" "$out/doctor-record.txt" | head -80 ;;
    ibench)
      ( time timeout 400 bash .gpu-box/run-interpose.sh --bench ) > "$out/interpose-bench.txt" 2>&1
      tail -80 "$out/interpose-bench.txt" ;;
    iprof)
      ( time timeout 560 bash .gpu-box/run-interpose.sh --profile ) > "$out/interpose-profile.txt" 2>&1
      tail -40 "$out/interpose-profile.txt"
      grep -E "profile:.*(MPI_Pack|MPI_Sendrecv|scheduling)" "$out/interpose-profile.txt" | head -40 ;;
    ichk)
      run 200 bash .gpu-box/run-interpose.sh --ranks 2,4 > "$out/interpose-checks.txt" 2>&1
      tail -15 "$out/interpose-checks.txt" ;;
    *) echo "unknown part $part" ;;
  esac
  echo "== part $part: $SECONDS s"
done
