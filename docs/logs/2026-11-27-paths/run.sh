#!/usr/bin/env bash
# Point to point on the CUDA-aware backend beside osu_bw, the halo exchange with concurrent pulls,
# the pack kernels against their measured fetch bound, and the GPU suite on 1-4 ranks: parts that
# each fit one 10-minute command on a 4-GPU machine.
# Run from the directory that holds .gpu-box/ (staged by `cargo xtask gpu-stage`):
#   bash docs/logs/2026-11-27-paths/run.sh OUTDIR PART...
# Parts:
#   p2p     2 ranks (GPUs 0 and 1) under the CUDA-aware Open MPI: osu_bw -d cuda D D beside
#           collbench p2p --osu --test bw on cuda-mpi, 1 MiB to 64 MiB, twice each, alternating;
#           then collbench's 1-4 MiB rows with the per-call record (COLLECTIVES_RECORD=1)
#   pack    collbench pack on the last GPU, in the background (parts after it that use every GPU
#           wait for it): our kernels, the D2D copy, the measured fetch bound and the baselines
#   halo    collbench halo on 2x1x1 (GPUs 0 and 1, beside `pack`), then 2x2x1 and 4x1x1, 256^3
#           cells, radius 3, 8 quantities, 6 faces, transports auto and nccl, depths 1 and 2; each
#           grid also with CUDA_DEVICE_MAX_CONNECTIONS=32 (the driver's hardware queues: 8 by
#           default, which the exchange's streams share)
#   sN      (s1, s2, s3, s4) every step of the GPU suite on N ranks (run-all.sh --only "mpirun -n
#           N "; s1: the 1-rank steps and the libtest GPU tests)
#   san     the GPU suite's compute-sanitizer steps (run-all.sh --only compute-sanitizer)
#   ex12    examples/12_nccl_one_shot on 2, 3 and 4 ranks (8 B to 1 MiB)
source .gpu-box/env.sh >/dev/null 2>&1
out="${1:?usage: run.sh OUTDIR PART...}"; shift; mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
B=.gpu-box/bin; T=.gpu-box/tests
for packed in $B/*.xz $T/*.xz; do [ -e "$packed" ] && [ ! -e "${packed%.xz}" ] && xz -dk "$packed"; done
[ -s "$out/machine.txt" ] || { nvidia-smi -L; nvidia-smi topo -m; } > "$out/machine.txt" 2>&1
peers=/tmp/peers; omb=$peers/omb-cuda-aware/libexec/osu-micro-benchmarks/mpi
case " $* " in *" p2p "*) [ -x $omb/pt2pt/osu_bw ] || bash .gpu-box/peers/build.sh $peers gpu > $peers.build.log 2>&1 ;; esac
ngpu=$(nvidia-smi -L | wc -l)
# run LIMIT CMD...: the command echoed, run, and its exit status.
run() { local limit=$1; shift; echo "\$ $*"; timeout "$limit" "$@" 2>&1 | grep -v "^test .* ok$"; echo "exit ${PIPESTATUS[0]}"; }
cuda_mpirun() { local n=$1; shift; echo "\$ cuda_mpirun -n $n ${*#*/mpi/}"; timeout 120 /opt/ompi-cuda/bin/mpirun -n $n -x LD_LIBRARY_PATH "$@" 2>&1; }
pack_pid=
for part in "$@"; do
  SECONDS=0
  case $part in
    p2p)
      { for i in 1 2; do
          cuda_mpirun 2 -x CUDA_VISIBLE_DEVICES=0,1 $omb/pt2pt/osu_bw -d cuda -m 1048576:67108864 D D
          cuda_mpirun 2 -x CUDA_VISIBLE_DEVICES=0,1 $B/collbench p2p --osu --test bw -d cuda -m 1048576:67108864 --backend cuda-mpi
        done
        cuda_mpirun 2 -x CUDA_VISIBLE_DEVICES=0,1 -x COLLECTIVES_RECORD=1 $B/collbench p2p --osu --test bw -d cuda -m 1048576:4194304 --backend cuda-mpi
      } > "$out/p2p.txt" 2>&1
      grep -vE "^#|^\[" "$out/p2p.txt" | head -40 ;;
    pack)
      ( CUDA_VISIBLE_DEVICES=$((ngpu - 1)) run 560 $B/collbench pack > "$out/pack.txt" 2>&1 ) &
      pack_pid=$! ;;
    halo)
      h=(-N 256 -r 3 -q 8 -n 20 -w 5 -c 1 --chunks 1,2 --transport auto,nccl --neighbours faces)
      { for g in "2 2x1x1" "4 2x2x1" "4 4x1x1"; do set -- $g
          [ "$1" = 4 ] && [ -n "$pack_pid" ] && wait $pack_pid
          for conn in 8 32; do
            echo "\$ mpirun -n $1 -x CUDA_DEVICE_MAX_CONNECTIONS=$conn collbench halo --dims $2 ${h[*]}"
            timeout 100 mpirun -n $1 -x CUDA_DEVICE_MAX_CONNECTIONS=$conn $B/collbench halo --dims $2 "${h[@]}" 2>&1
          done
        done; } > "$out/halo.txt" 2>&1
      grep -vE "^#  |^# *$" "$out/halo.txt" | head -60 ;;
    s1|s2|s3|s4)
      n=${part#s}
      run 580 bash .gpu-box/run-all.sh --only "mpirun -n $n " $([ "$n" = 1 ] && echo --only --ignored) > "$out/suite-n$n.log" 2>&1
      grep -E "passed|failed|FAIL|^exit|^\\$" "$out/suite-n$n.log" | tail -40 ;;
    san)
      run 560 bash .gpu-box/run-all.sh --only compute-sanitizer > "$out/suite-sanitizer.log" 2>&1
      grep -E "SUMMARY|passed|failed|FAIL|^exit" "$out/suite-sanitizer.log" | tail -30 ;;
    ex12)
      { for n in 2 3 4; do run 120 mpirun -n $n $B/12_nccl_one_shot; done; } > "$out/ex12.txt" 2>&1
      cat "$out/ex12.txt" ;;
    *) echo "unknown part $part" ;;
  esac
  echo "== part $part: $SECONDS s"
done
[ -n "$pack_pid" ] && wait $pack_pid && tail -40 "$out/pack.txt"
