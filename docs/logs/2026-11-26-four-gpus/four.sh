#!/usr/bin/env bash
# The GPU suite and the measurements that need 4 GPUs, in parts that each fit one 10-minute command.
# Run from the directory that holds .gpu-box/ (staged by `cargo xtask gpu-stage`):
#   bash docs/logs/2026-11-26-four-gpus/four.sh OUTDIR PART...
# Parts:
#   n3 / n4   run-all.sh --skip-sanitizer, the steps on 3 (4) ranks: nccl_*, cuda_mpi_* under both
#             MPIs, the GPU examples, the halo with CUDA IPC
#   san       the compute-sanitizer steps of run-all.sh, one after the other
#   sanpar    the same six sanitizer commands at once, spread over the GPUs (one process each)
#   agv       the uneven all-gather (collbench allgatherv) on 4 GPUs
#   socket    nccl_dead_peer and nccl_collectives over NCCL's socket transport on 2 and 4 ranks
#   latency   blocking latency (-z 1) and back to back (-z 0), 8 B to 64 KiB, on 4 GPUs: collbench
#             beside nccl-tests in the same job
#   perf      on 4 GPUs: every collective's busbw at 128 MiB beside nccl-tests, registered buffers
#             (-R 1, -R 2) and persistent plans (-G), the uneven all-gather
set -uo pipefail
out="${1:?usage: four.sh OUTDIR PART...}"; shift; mkdir -p "$out"
source .gpu-box/env.sh
export XTASK_MPI_TIMEOUT=300 XTASK_SANITIZER_TIMEOUT=400
B=.gpu-box/bin; T=.gpu-box/tests
[ -x $B/collbench ] || xz -dk $B/collbench.xz
[ -s "$out/machine.txt" ] || { gpu_box_info; nvidia-smi topo -m; } > "$out/machine.txt" 2>&1
peers=/tmp/peers; NT=$peers/nccl-tests/build
build_peers() {
  [ -x $NT/all_reduce_perf ] && return
  mkdir -p $peers && tar -xJf .gpu-box/peers/nccl-tests-2.19.6.tar.xz -C $peers &&
  make -C $peers/nccl-tests -j16 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > $peers/build.log 2>&1 || tail -20 $peers/build.log
}
case " $* " in *" latency "*|*" perf "*) build_peers & ;; esac
summary() { grep -E "^== \[|mpi-tests:|test result|passed, |FAIL|failed|panicked|timed out|^real" "$1" | grep -v "^test .* ok$" | sed 's/OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 //; s/--allow-run-as-root --oversubscribe //' | tail -${2:-60}; }
x="-x OMPI_MCA_orte_allowed_exit_without_sync=1"
for part in "$@"; do
  SECONDS=0
  case $part in
    n3|n4)
      n=${part#n}
      ( time bash .gpu-box/run-all.sh --skip-sanitizer --only "mpirun -n $n " ) > "$out/suite-$part.log" 2>&1
      summary "$out/suite-$part.log" ;;
    san)
      ( time bash .gpu-box/run-all.sh --only compute-sanitizer ) > "$out/suite-san.log" 2>&1
      summary "$out/suite-san.log" ;;
    sanpar)
      S=/usr/local/cuda/bin/compute-sanitizer; i=0
      for tool in memcheck racecheck synccheck; do
        ( export CUDA_VISIBLE_DEVICES=$((i % 4)); cd $T
          echo "\$ CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES DTP_POOL_LIMIT=60 compute-sanitizer --tool $tool --error-exitcode 7 gpu_pack --ignored --test-threads 4"
          time DTP_POOL_LIMIT=60 timeout 500 $S --tool $tool --error-exitcode 7 ./gpu_pack-* --ignored --test-threads 4; echo "exit $?" ) > "$out/san-gpu_pack-$tool.log" 2>&1 &
        i=$((i + 1))
        ( export CUDA_VISIBLE_DEVICES=$((i % 4))
          echo "\$ CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES mpirun -n 1 compute-sanitizer --tool $tool --error-exitcode 7 --report-api-errors no nccl_collectives"
          time timeout 500 mpirun -n 1 -x CUDA_VISIBLE_DEVICES $S --tool $tool --error-exitcode 7 --report-api-errors no $T/nccl_collectives-*; echo "exit $?" ) > "$out/san-nccl_collectives-$tool.log" 2>&1 &
        i=$((i + 1))
      done
      wait
      for f in "$out"/san-*.log; do echo "== $f"; grep -E "^\\$|ERROR SUMMARY|test result|mpi-tests:|^real|^exit|panicked|FAIL" "$f" | grep -v "^test .* ok$"; done ;;
    agv)
      echo "\$ mpirun -n 4 collbench allgatherv -b 1K -e 256M -f 4 -n 20 -w 5" > "$out/allgatherv.txt"
      timeout 60 mpirun -n 4 $B/collbench allgatherv -b 1K -e 256M -f 4 -n 20 -w 5 >> "$out/allgatherv.txt" 2>&1
      echo "exit $?" >> "$out/allgatherv.txt"; cat "$out/allgatherv.txt" ;;
    socket)
      for n in 2 4; do for bin in nccl_dead_peer nccl_collectives; do
        echo "\$ NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 mpirun -n $n $bin"; SECONDS=0
        OMPI_MCA_orte_allowed_exit_without_sync=1 timeout 250 mpirun -n $n -x NCCL_P2P_DISABLE=1 -x NCCL_SHM_DISABLE=1 \
          -x NCCL_DEBUG=INFO $x $T/$bin-* 2>&1 | grep -v "^test .* ok$" | awk '!/NCCL INFO/ || /Using network/'
        echo "exit ${PIPESTATUS[0]} after $SECONDS s"
      done; done > "$out/socket.log" 2>&1
      grep -E "^\\$|mpi-tests|FAIL|Timeout|exit|Using network" "$out/socket.log" | sort -u | head -40 ;;
    latency)
      wait
      sz=(-b 8 -e 64K -f 8 -n 1000 -w 100 -c 1)
      for z in 1 0; do
        for t in "all_reduce allreduce" "sendrecv sendrecv"; do set -- $t
          echo "### $1 -z $z"
          echo "\$ mpirun -n 4 $1_perf -g 1 ${sz[*]} -z $z"
          timeout 60 mpirun -n 4 $NT/$1_perf -g 1 "${sz[@]}" -z $z
          echo "\$ mpirun -n 4 collbench $2 --backend nccl --minmax ${sz[*]} -z $z"
          timeout 60 mpirun -n 4 $B/collbench $2 --backend nccl --minmax "${sz[@]}" -z $z
        done
        echo "\$ mpirun -n 4 collbench allreduce --backend nccl --baseline raw --minmax ${sz[*]} -z $z"
        timeout 60 mpirun -n 4 $B/collbench allreduce --backend nccl --baseline raw --minmax "${sz[@]}" -z $z
      done > "$out/latency.txt" 2>&1
      grep -E "^#|^\\$|^ +(8|64|512|4096|32768) " "$out/latency.txt" | grep -vE "^# (nThread|Using|  Rank|Collective|Out of|Avg|$)|^#$" | head -150 ;;
    perf)
      wait
      small=(-b 8 -e 1M -f 8 -n 200 -w 20 -c 1)
      {
        for R in 1 2; do
          echo "\$ mpirun -n 4 all_reduce_perf -g 1 -R $R ${small[*]}"
          timeout 60 mpirun -n 4 $NT/all_reduce_perf -g 1 -R $R "${small[@]}"
        done
        echo "\$ mpirun -n 4 all_reduce_perf -g 1 ${small[*]}"; timeout 60 mpirun -n 4 $NT/all_reduce_perf -g 1 "${small[@]}"
        echo "\$ mpirun -n 4 collbench allreduce --backend nccl --register all -z 0 ${small[*]}"
        timeout 90 mpirun -n 4 $B/collbench allreduce --backend nccl --register all -z 0 "${small[@]}"
        echo "\$ mpirun -n 4 all_reduce_perf -g 1 -G 1 ${small[*]}"; timeout 60 mpirun -n 4 $NT/all_reduce_perf -g 1 -G 1 "${small[@]}"
        echo "\$ mpirun -n 4 collbench allreduce --backend nccl --persistent -z 0 ${small[*]}"
        timeout 90 mpirun -n 4 $B/collbench allreduce --backend nccl --persistent -z 0 "${small[@]}"
      } > "$out/register-persistent.txt" 2>&1
      big=(-b 128M -e 128M -n 20 -w 5 -c 1)
      for pair in "allreduce all_reduce" "allgather all_gather" "reducescatter reduce_scatter" \
                  "broadcast broadcast" "reduce reduce" "alltoall alltoall" "gather gather" \
                  "scatter scatter" "sendrecv sendrecv"; do
        set -- $pair
        echo "### $1"
        echo "\$ mpirun -n 4 $2_perf -g 1 ${big[*]}"; timeout 90 mpirun -n 4 $NT/$2_perf -g 1 "${big[@]}" 2>&1
        echo "\$ mpirun -n 4 collbench $1 --backend nccl ${big[*]}"; timeout 90 mpirun -n 4 $B/collbench $1 --backend nccl "${big[@]}" 2>&1
      done > "$out/collectives.txt" 2>&1
      grep -E "^###|^\\$| 134217728 " "$out/collectives.txt" | head -60
      grep -E "^\\$|^ +(8|512|4096|32768|262144|1048576|1024|65536|67108864) |wrong|error|Error" "$out/register-persistent.txt" | head -80 ;;
    *) echo "four.sh: unknown part $part" ;;
  esac
  echo "=== part $part: $SECONDS s"
done
