#!/usr/bin/env bash
# The one-shot all-reduce chosen by default, the device paths beside their peers, the interposer's
# benchmark: parts that each fit one 10-minute command on a 4-GPU machine.
# Run from the directory that holds .gpu-box/ (staged by `cargo xtask gpu-stage`):
#   bash docs/logs/2026-11-26-device-paths/paths.sh OUTDIR PART...
# Parts:
#   oneshot  nccl_dead_peer on 2, 3 and 4 ranks, nccl_one_shot and nccl_halo on 4 (on 2 and 3 too with
#            ONESHOT_ALL=1), nccl_collectives on 2 and 4, with the one-shot path chosen by default
#            (up to 32 KiB), then
#            examples/12_nccl_one_shot on 3 ranks
#   pack     (beside the others, on the last GPU) gpu_pack --ignored: the GPU packer against the CPU
#            reference, negative strides included
#   mpi      2 ranks under the CUDA-aware Open MPI: every collective of collbench over cuda-mpi and
#            mpi-staged, 8 B to 4 MiB; OMB's osu_allreduce and osu_bw -d cuda beside collbench's
#   halo     collbench halo, transports auto and nccl, pipeline depths 1, 2 and 4, on 2x1x1, 2x2x1
#            and 4x1x1 process grids
#   n2       every step of the GPU suite on 2 ranks (run-all.sh --only "mpirun -n 2 ") on GPUs 0 and 1,
#            the one-shot path off (the default), beside, on GPUs 2 and 3, nccl_collectives and
#            nccl_dead_peer on 2 ranks with it chosen up to 32 KiB, every line kept
#   sN       (s1, s2, s3, s4) every step of the GPU suite on N ranks at the default limits (s1 adds
#            the libtest GPU tests, --ignored)
#   sone     every nccl_* step of the GPU suite on 1-4 ranks with COLLECTIVES_ONE_SHOT_MAX_BYTES=32768
#   ibench   the interposer's benchmark (run-interpose.sh --bench)
#   prof     Nsight Systems over examples/12_nccl_one_shot on 2 ranks: where a blocking call's time goes
#   cudampi  cuda_mpi_collectives on 2 ranks under the system Open MPI and the CUDA-aware one (both
#            paths of the CUDA-aware backend: routed per call, and every call on the device)
#   halompi  collbench halo on every device backend (nccl, cuda-mpi, mpi-staged) under the CUDA-aware
#            Open MPI, transports comm and auto, depths 1 and 2, 2 ranks (2x1x1), 256^3 cells, r 3, q 8
#   p2pprof  Nsight Systems over collbench p2p --test bw on cuda-mpi at 1 MiB (CUDA API calls per
#            message), beside osu_bw -d cuda at the same size
#   osan     compute-sanitizer memcheck, racecheck and synccheck over nccl_one_shot on 2 ranks (every
#            rank under the tool; the floats, integers, complex and library all-reduce cases)
#   mpi4     4 ranks under the CUDA-aware Open MPI: collbench allreduce --osu on cuda-mpi and
#            mpi-staged beside OMB's osu_allreduce -d cuda, 8 B to 4 MiB
#   exit     nccl_collectives on 2 ranks (GPUs 0,1) at a 300 s limit, every line time-stamped; from its
#            summary on, every 3 s, each rank's threads (name, state, kernel wait channel, syscall)
#            and, where gdb exists, their stacks; the same for the five catalog cases run alone
set -uo pipefail
out="${1:?usage: paths.sh OUTDIR PART...}"; shift; mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
B=.gpu-box/bin; T=.gpu-box/tests; E=.gpu-box/bin
for packed in $B/*.xz $T/*.xz; do [ -e "$packed" ] && [ ! -e "${packed%.xz}" ] && xz -dk "$packed"; done
[ -s "$out/machine.txt" ] || { nvidia-smi -L; nvidia-smi topo -m; } > "$out/machine.txt" 2>&1
peers=/tmp/peers
case " $* " in *" mpi "*|*" p2pprof "*|*" mpi4 "*) ( bash .gpu-box/peers/build.sh $peers gpu > $peers.build.log 2>&1 ) & ;; esac
x="-x OMPI_MCA_orte_allowed_exit_without_sync=1"
omb=$peers/omb-cuda-aware/libexec/osu-micro-benchmarks/mpi
# cuda_mpirun N PROGRAM ARGS...: the command echoed, then run on N ranks under the CUDA-aware Open MPI.
cuda_mpirun() { local n=$1; shift; echo "\$ cuda_mpirun -n $n ${*#*/mpi/}"; timeout 120 /opt/ompi-cuda/bin/mpirun -n $n -x LD_LIBRARY_PATH "$@" 2>&1; }
# allreduce_beside_omb N: OMB's osu_allreduce -d cuda, then collbench's on cuda-mpi and mpi-staged.
allreduce_beside_omb() {
  cuda_mpirun $1 $omb/collective/osu_allreduce -d cuda -m 8:4194304 -f
  for b in cuda-mpi mpi-staged; do cuda_mpirun $1 $B/collbench allreduce --osu -d cuda -m 8:4194304 -f --backend $b; done
}
for part in "$@"; do
  SECONDS=0
  case $part in
    oneshot)
      for n in 2 3 4; do
        for t in "nccl_dead_peer $x" "nccl_one_shot -x ONE_SHOT_EXPECT_READY=1" "nccl_halo -x HALO_EXPECT_IPC=1" "nccl_collectives"; do
          case "$n $t" in "3 nccl_collectives"*|[23]" nccl_one_shot"*|[23]" nccl_halo"*) [ -n "${ONESHOT_ALL:-}" ] || continue ;; esac
          set -- $t; bin=$1; shift
          echo "\$ mpirun -n $n $* $bin"; s=$SECONDS
          timeout 100 mpirun --oversubscribe -n $n "$@" $T/$bin-* 2>&1 | grep -v "^test .* ok$"
          echo "exit ${PIPESTATUS[0]} after $((SECONDS - s)) s"
        done
      done > "$out/oneshot.log" 2>&1
      { echo "\$ mpirun -n 3 12_nccl_one_shot"; timeout 60 mpirun -n 3 $E/12_nccl_one_shot 2>&1; echo "exit $?"; } > "$out/example12-n3.txt"
      grep -E "^\\$|mpi-tests|FAIL|panicked|one-shot up|^exit" "$out/oneshot.log"; cat "$out/example12-n3.txt" | tail -12 ;;
    pack)
      ( export CUDA_VISIBLE_DEVICES=$(( $(nvidia-smi -L | wc -l) - 1 ))
        { echo "\$ CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES gpu_pack --ignored"; timeout 300 $T/gpu_pack-* --ignored --test-threads 4 2>&1; echo "exit $?"; } > "$out/gpu_pack.txt" 2>&1 ) &
      continue ;;
    mpi)
      CM=(/opt/ompi-cuda/bin/mpirun -n 2 -x LD_LIBRARY_PATH)
      source .gpu-box/env.sh >/dev/null 2>&1
      for c in allreduce allgather allgatherv reducescatter broadcast reduce alltoall alltoallv gather gatherv scatter scatterv sendrecv; do
        for b in cuda-mpi mpi-staged; do
          echo "\$ cuda_mpirun -n 2 collbench coll $c --backend $b -b 8 -e 4M -f 8 -n 20 -w 3 -c 1"
          timeout 60 "${CM[@]}" $B/collbench coll $c --backend $b -b 8 -e 4M -f 8 -n 20 -w 3 -c 1 2>&1 | grep -vE "^#  |^# *$"
        done
      done > "$out/mpi-collectives.txt" 2>&1
      wait
      {
        allreduce_beside_omb 2
        cuda_mpirun 2 $omb/pt2pt/osu_bw -d cuda -m 1:67108864 D D
        cuda_mpirun 2 $B/collbench p2p --osu --test bw -d cuda -m 1:67108864 --backend cuda-mpi
      } > "$out/mpi-osu.txt" 2>&1
      grep -cE "wrong values total *: 0 OK" "$out/mpi-collectives.txt"; grep -E "^\\$|^ +(8|512|32768|262144|2097152|4194304) " "$out/mpi-collectives.txt" | head -120
      grep -E "^\\$|^(8|32768|262144|2097152|4194304|1048576|67108864) " "$out/mpi-osu.txt" ;;
    halo)
      h=(-N 256 -r 3 -q 8 -n 20 -w 5 -c 1 --chunks 1,2,4 --transport auto,nccl --neighbours both)
      { for g in "2 2x1x1" "4 2x2x1" "4 4x1x1"; do set -- $g
          echo "\$ mpirun -n $1 collbench halo --dims $2 ${h[*]}"
          timeout 120 mpirun -n $1 $B/collbench halo --dims $2 "${h[@]}" 2>&1
        done; } > "$out/halo.txt" 2>&1
      grep -vE "^#  |^# *$" "$out/halo.txt" | head -80 ;;
    wait)
      wait; grep -E "^\\$|test result|FAIL|panicked|^exit" "$out/gpu_pack.txt" ;;
    n2)
      ( export CUDA_VISIBLE_DEVICES=2,3 COLLECTIVES_ONE_SHOT_MAX_BYTES=32768
        for t in "nccl_collectives" "nccl_dead_peer $x"; do set -- $t; bin=$1; shift
          echo "\$ CUDA_VISIBLE_DEVICES=2,3 COLLECTIVES_ONE_SHOT_MAX_BYTES=32768 mpirun -n 2 $* $bin"; s=$SECONDS
          timeout 70 mpirun -n 2 -x CUDA_VISIBLE_DEVICES -x COLLECTIVES_ONE_SHOT_MAX_BYTES "$@" $T/$bin-* 2>&1
          echo "exit ${PIPESTATUS[0]} after $((SECONDS - s)) s"
        done > "$out/one-shot-on-n2.log" 2>&1 ) &
      ( export CUDA_VISIBLE_DEVICES=0,1 XTASK_MPI_TIMEOUT=80
        time bash .gpu-box/run-all.sh --skip-sanitizer --only "mpirun -n 2 " ) > "$out/suite-n2.log" 2>&1
      wait
      grep -E "^== \[|mpi-tests:|passed, |FAIL|failed|panicked|timed out|^real" "$out/suite-n2.log" | grep -v "^test .* ok$" | sed 's/OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 //; s/--allow-run-as-root --oversubscribe //; s/LD_LIBRARY_PATH=[^ ]* //' | cut -c1-200 | tail -45
      grep -E "^\\$|^exit|mpi-tests|FAIL|rank" "$out/one-shot-on-n2.log"; grep "^test " "$out/one-shot-on-n2.log" | tail -2 ;;
    s[1-4])
      n=${part#s}; extra=(); [ "$n" = 1 ] && extra=(--only ignored)
      ( time bash .gpu-box/run-all.sh --skip-sanitizer --only "mpirun -n $n " "${extra[@]}" ) > "$out/suite-n$n.log" 2>&1
      grep -E "^== \[|mpi-tests:|passed, |FAIL|failed|panicked|timed out|^real" "$out/suite-n$n.log" | grep -v "^test .* ok$" | cut -c1-200 | tail -45 ;;
    sone)
      ( export COLLECTIVES_ONE_SHOT_MAX_BYTES=32768; time bash .gpu-box/run-all.sh --skip-sanitizer --only nccl_ ) > "$out/suite-one-shot.log" 2>&1
      grep -E "^== \[|mpi-tests:|passed, |FAIL|failed|panicked|timed out|^real" "$out/suite-one-shot.log" | grep -v "^test .* ok$" | cut -c1-200 | tail -45 ;;
    ibench)
      ( time timeout 400 bash .gpu-box/run-interpose.sh --bench ) > "$out/interpose-bench.txt" 2>&1
      tail -60 "$out/interpose-bench.txt" ;;
    prof)
      nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
      if [ -z "$nsys" ]; then echo "no nsys on this machine"; else
        { echo "\$ mpirun -n 2 nsys profile --stats=true -t cuda 12_nccl_one_shot"
          timeout 200 mpirun -n 2 $nsys profile -o /tmp/prof-%q{OMPI_COMM_WORLD_RANK} -f true --stats=true -t cuda $E/12_nccl_one_shot 2>&1
        } > "$out/prof.txt" 2>&1
        grep -E "^\\$|cuLaunch|cuEvent|cuStream|one_shot|Time \(%\)|ncclDevKernel" "$out/prof.txt" | head -60
      fi ;;
    halompi)
      source .gpu-box/env.sh >/dev/null 2>&1
      h=(-N 256 -r 3 -q 8 -n 20 -w 5 -c 1 --dims 2x1x1 --chunks 1,2 --transport comm,auto --neighbours both)
      { for b in nccl cuda-mpi mpi-staged; do
          echo "\$ cuda_mpirun -n 2 collbench halo --backend $b ${h[*]}"
          timeout 150 /opt/ompi-cuda/bin/mpirun -n 2 -x LD_LIBRARY_PATH $B/collbench halo --backend $b "${h[@]}" 2>&1
        done; } > "$out/halo-mpi.txt" 2>&1
      grep -vE "^#  |^# *$" "$out/halo-mpi.txt" | head -60 ;;
    p2pprof)
      source .gpu-box/env.sh >/dev/null 2>&1
      nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
      CM=(/opt/ompi-cuda/bin/mpirun -n 2 -x LD_LIBRARY_PATH)
      wait
      { cuda_mpirun 2 $omb/pt2pt/osu_bw -d cuda -m 1048576:4194304 D D
        cuda_mpirun 2 $B/collbench p2p --osu --test bw -d cuda -m 1048576:4194304 --backend cuda-mpi
        if [ -n "$nsys" ]; then
          echo "\$ cuda_mpirun -n 2 nsys profile --stats=true -t cuda collbench p2p --osu --test bw -d cuda -m 1048576:1048576 --backend cuda-mpi"
          timeout 200 "${CM[@]}" $nsys profile -o /tmp/p2p-%q{OMPI_COMM_WORLD_RANK} -f true --stats=true -t cuda $B/collbench p2p --osu --test bw -d cuda -m 1048576:1048576 --backend cuda-mpi 2>&1
        else echo "no nsys on this machine"; fi
      } > "$out/p2p-prof.txt" 2>&1
      grep -E "^\\$|^(1048576|2097152|4194304) |cuStream|cuEvent|cuPointer|cuMemcpy|cuIpc|no nsys" "$out/p2p-prof.txt" | head -50 ;;
    cudampi)
      source .gpu-box/env.sh >/dev/null 2>&1
      t=$(ls $T/cuda_mpi_collectives-* | grep -v '\.xz$' | head -1)
      { echo "\$ mpirun -n 2 cuda_mpi_collectives"
        timeout 150 mpirun -n 2 -x COLLECTIVES_EXPECT_CUDA_AWARE=0 $t 2>&1 | grep -v "^test .* ok$"
        echo "\$ cuda_mpirun -n 2 cuda_mpi_collectives"
        timeout 150 /opt/ompi-cuda/bin/mpirun -n 2 -x LD_LIBRARY_PATH -x COLLECTIVES_EXPECT_CUDA_AWARE=1 $t 2>&1 | grep -v "^test .* ok$"
      } > "$out/cuda-mpi-tests.txt" 2>&1
      grep -E "^\\$|mpi-tests|FAIL|rank [0-9]" "$out/cuda-mpi-tests.txt" | head -40 ;;
    osan)
      san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
      t=$(ls $T/nccl_one_shot-* | grep -v '\.xz$' | head -1)
      f="one_shot_floats,one_shot_integers,one_shot_complex_as_lanes,one_shot_inside_the_library_all_reduce"
      # memcheck on the one-shot kernel only, without CUDA API error reports (NCCL's own kernels and
      # probes, docs/logs/2026-11-27-latency/README.md)
      { for tool in "memcheck --kernel-name kns=one_shot_all_reduce --report-api-errors no" racecheck synccheck; do
          echo "\$ mpirun -n 2 compute-sanitizer --tool $tool nccl_one_shot ($f)"
          timeout 180 mpirun -n 2 -x MPI_TESTS_FILTER="$f" $san --tool $tool --error-exitcode 1 $t 2>&1 | grep -v "^test .* ok$"
          echo "exit ${PIPESTATUS[0]}"
        done; } > "$out/one-shot-sanitizer.txt" 2>&1
      grep -E "^\\$|SUMMARY|mpi-tests|^exit|FAIL" "$out/one-shot-sanitizer.txt" ;;
    mpi4)
      source .gpu-box/env.sh >/dev/null 2>&1
      wait
      allreduce_beside_omb 4 > "$out/mpi4-osu.txt" 2>&1
      grep -E "^\\$|^(8|32768|262144|2097152|4194304) " "$out/mpi4-osu.txt" ;;
    exit)
      stamp() { while IFS= read -r l; do printf '%(%T)T %s\n' -1 "$l"; done; }
      threads() { for p in $(pgrep -f "$T/nccl_collectives-" | grep -v "^$$\$"); do
          grep -q mpirun /proc/$p/cmdline 2>/dev/null && continue
          echo "-- pid $p"; for t in /proc/$p/task/*; do
            printf '%s %s %s %s\n' "$(cat $t/comm)" "$(awk '{print $3}' $t/stat)" "$(cat $t/wchan)" "$(cut -d' ' -f1 $t/syscall)"; done
          command -v gdb >/dev/null && timeout 20 gdb -p $p -batch -ex "thread apply all bt 12" 2>/dev/null | grep -E "^#|^Thread" | head -80
        done; }
      watch_exit() { # $1: log; sample threads every 3 s once the summary is there, while the job lives
        while kill -0 $2 2>/dev/null; do
          if grep -q "^..:..:.. mpi-tests:" $1; then sleep 3; kill -0 $2 2>/dev/null || break; echo "== $(date +%T) after summary"; threads; else sleep 1; fi
        done; }
      export CUDA_VISIBLE_DEVICES=0,1
      { echo "\$ mpirun -n 2 nccl_collectives (300 s)"
        ( timeout 300 mpirun -n 2 -x CUDA_VISIBLE_DEVICES $T/nccl_collectives-* 2>&1; echo "exit $?" ) | stamp > $out/exit-full.log &
        j=$!; watch_exit $out/exit-full.log $j; wait $j; cat $out/exit-full.log
        for f in cross_rank_root_mismatch use_after_a_timeout; do
          echo "\$ MPI_TESTS_FILTER=$f mpirun -n 2 nccl_collectives (60 s)"
          ( timeout 60 mpirun -n 2 -x CUDA_VISIBLE_DEVICES -x MPI_TESTS_FILTER=$f $T/nccl_collectives-* 2>&1; echo "exit $?" ) | stamp > $out/exit-$f.log &
          j=$!; watch_exit $out/exit-$f.log $j; wait $j; cat $out/exit-$f.log
        done; } > $out/exit.txt 2>&1
      grep -vE " test .* ok$" $out/exit.txt | head -150 ;;
    *) echo "paths.sh: unknown part $part" ;;
  esac
  echo "=== part $part: $SECONDS s"
done
