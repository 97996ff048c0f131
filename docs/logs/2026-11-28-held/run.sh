#!/usr/bin/env bash
# bash docs/logs/2026-11-28-held/run.sh OUT PART...   (from the checkout, .gpu-box/ staged)
#   graphs  datatype-pack's relaunch tests on the GPU (gpu_pack --include-ignored relaunch)
#   launch  datatype-pack's launch host-time bench (criterion, short) on GPU 0
#   face    the faces' MPI_Sendrecv, LIB_A and LIB_B in turn (default s11 and s9; .gpu-box/lib/NAME.so),
#           the order swapped every round (6 rounds), into OUT/face-LIB_A-LIB_B/
#   fprof   the faces once each way with the interposer's profile (the staged library)
#   halo    the whole exchange, s11 and s9 in turn, the order swapped every round (4 rounds)
#   ichk    the device checks on 2 and 4 ranks (the staged library)
#   ichk3   the device checks on 3 ranks, and with ranks sharing GPUs
#   probe   the ping-pongs with and without a probe before each receive, LIB_A and LIB_B in
#           turn (default s16 and s13), the order swapped every round (2 rounds), into
#           OUT/probe-LIB_A-LIB_B/ and OUT/pingpong-LIB_A-LIB_B/
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$1"; shift
mkdir -p "$out"
quiet="$here/../2026-11-28-quiet"
pull="$here/../2026-11-27-pull"
for part in "$@"; do
  case "$part" in
    graphs) (source .gpu-box/env.sh; cd /tmp && "$OLDPWD/.gpu-box/dp/gpu_pack" --include-ignored relaunch) > "$out/gpu-pack-relaunch.txt" 2>&1
            tail -n 3 "$out/gpu-pack-relaunch.txt" ;;
    launch) (source .gpu-box/env.sh; cd /tmp && "$OLDPWD/.gpu-box/dp/gpu_pack_bench" --bench launch \
              --warm-up-time 1 --measurement-time 2) > "$out/gpu-pack-launch-bench.txt" 2>&1
            grep -E 'launch|time:' "$out/gpu-pack-launch-bench.txt" ;;
    face) a="${LIB_A:-s11}"; b="${LIB_B:-s9}"; d="$out/face-$a-$b"; mkdir -p "$d"
          bash "$quiet/halo-ab.sh" "$d" "${ROUNDS:-6}" ".gpu-box/lib/$a.so" ".gpu-box/lib/$b.so" 'MPI_Sendrecv face'
          python3 "$quiet/ratios.py" "$d/ab.txt" | tee "$d/ratios.txt" ;;
    fprof) bash "$pull/run.sh" "$out" fprof ;;
    halo) bash "$quiet/halo-ab.sh" "$out" 4 .gpu-box/lib/s11.so .gpu-box/lib/s9.so
          python3 "$quiet/ratios.py" "$out/halo-ab.txt" | tee "$out/halo-ratios.txt" ;;
    ichk) bash "$pull/run.sh" "$out" ichk ;;
    ichk3) bash "$pull/run.sh" "$out" ichk3 shared ;;
    probe) a="${LIB_A:-s16}"; b="${LIB_B:-s13}"
           for only in 'MPI_Probe/MPI_Recv' 'MPI_Send/MPI_Recv'; do
             d="$out/probe-$a-$b"; [ "$only" = 'MPI_Send/MPI_Recv' ] && d="$out/pingpong-$a-$b"
             mkdir -p "$d"; bash "$quiet/halo-ab.sh" "$d" "${ROUNDS:-2}" ".gpu-box/lib/$a.so" ".gpu-box/lib/$b.so" "$only"
             grep -E '^\$|bench' "$d/ab.txt" | sed -E 's/.*LD_PRELOAD=[^ ]*\/(s[0-9]+\.so).*/== \1/; s/^bench [^ ]+ ([^ ]+) [0-9]+ ([0-9.]+).*/\1 \2/' | paste -sd' ' | sed 's/ == /\n== /g'; echo
           done ;;
    *) echo "unknown part $part" ;;
  esac
done
