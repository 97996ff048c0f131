#!/usr/bin/env bash
# bash docs/logs/2026-11-28-events/run.sh OUT PART...   (from the checkout, .gpu-box/ staged)
#   seq     seq.cu (this directory) under the CUDA-aware Open MPI, 2 ranks on 2 GPUs, twice
#   mpis    seq.cu under each MPI: the system Open MPI, the CUDA-aware one, the CUDA-aware one
#           without its smcuda transport (--mca btl ^smcuda), the system one again
#   streams streams.cu (this directory), one process on GPU 0
#   ev      evbench.cu, chain.cu and floor.cu (this directory), built with nvcc against the system Open
#           MPI, 2 ranks on 2 GPUs (3000 rounds), then on one GPU (1000 rounds)
#   fprof   the faces once each way with the interposer's profile (the staged library)
#   face    the faces' MPI_Sendrecv, LIB_A and LIB_B in turn (.gpu-box/lib/NAME.so), the order
#           swapped every round (ROUNDS, default 4), into OUT/face-LIB_A-LIB_B/
#   tline   the faces and the whole exchange, once each, with the timeline alone
#           (COLLECTIVES_INTERPOSE_PROFILE=timeline; the staged library), direct path on
#   ichk    the device checks on 2 and 4 ranks (the staged library)
#   ichk3   the device checks on 3 ranks, and with ranks sharing GPUs
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$1"; shift
mkdir -p "$out"
held="$here/../2026-11-28-held"
for part in "$@"; do
  case "$part" in
    ev) (source .gpu-box/env.sh
         for p in evbench chain floor; do
           nvcc -O2 -arch=sm_90 -o "/tmp/$p" "$here/$p.cu" $(mpicc --showme:compile) $(mpicc --showme:link) -lcuda -lrt 2>&1 | grep -i error
         done
         for p in evbench chain floor; do
           mpirun -n 2 --bind-to core "/tmp/$p" 3000 > "$out/$p-2gpu.txt" 2>&1
           CUDA_VISIBLE_DEVICES=0 mpirun -n 2 --bind-to core "/tmp/$p" 1000 > "$out/$p-1gpu.txt" 2>&1
         done)
        cat "$out"/chain-2gpu.txt "$out"/floor-2gpu.txt ;;
    tline) (source .gpu-box/env.sh
            exe=/tmp/interpose_bench
            mpicc -O2 -o "$exe" -DUSE_CUDA -I/usr/local/cuda/include .gpu-box/interpose/interpose_bench.c \
              -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64 -lcudart
            for only in 'MPI_Sendrecv face' 'halo-3d'; do
              echo "\$ COLLECTIVES_INTERPOSE_DIRECT=1 COLLECTIVES_INTERPOSE_PROFILE=timeline mpirun -n 2 -x LD_PRELOAD=libcollectives_interpose.so interpose_bench --budget 0.5 --only '$only'"
              COLLECTIVES_INTERPOSE_DIRECT=1 COLLECTIVES_INTERPOSE_PROFILE=timeline \
                LD_LIBRARY_PATH=/opt/ompi-cuda/lib:${LD_LIBRARY_PATH:-} timeout 120 /opt/ompi-cuda/bin/mpirun -n 2 \
                --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -x COLLECTIVES_INTERPOSE_DIRECT \
                -x COLLECTIVES_INTERPOSE_PROFILE -x LD_PRELOAD="$PWD/.gpu-box/lib/libcollectives_interpose.so" \
                "$exe" --budget 0.5 --only "$only"
            done) > "$out/timeline.txt" 2>&1
           grep -E '^\$|^bench|r0\] profile' "$out/timeline.txt" ;;
    seq) (source .gpu-box/env.sh
          nvcc -O2 -arch=sm_90 -I/opt/ompi-cuda/include -L/opt/ompi-cuda/lib -Xlinker -rpath=/opt/ompi-cuda/lib \
            -o /tmp/seq "$here/seq.cu" -lmpi 2>&1 | grep -i error
          for i in 1 2; do cuda_mpirun -np 2 /tmp/seq 3000 2>&1 | grep -v -i -E 'cuMemHostRegister|Host:|Registration|^---|help' ; done) > "$out/seq.txt"
         cat "$out/seq.txt" ;;
    mpis) (source .gpu-box/env.sh
           nvcc -O2 -arch=sm_90 -o /tmp/seqsys "$here/seq.cu" $(mpicc --showme:compile) $(mpicc --showme:link) 2>&1 | grep -i error
           nvcc -O2 -arch=sm_90 -I/opt/ompi-cuda/include -L/opt/ompi-cuda/lib -Xlinker -rpath=/opt/ompi-cuda/lib \
             -o /tmp/seq "$here/seq.cu" -lmpi 2>&1 | grep -i error
           quiet() { grep -v -i -E 'cuMemHostRegister|Host:|Registration|^---|help'; }
           echo "== system Open MPI 4.1.6"; mpirun -n 2 --bind-to core /tmp/seqsys 3000
           echo "== CUDA-aware Open MPI 4.1.4"; cuda_mpirun -np 2 /tmp/seq 3000 2>&1 | quiet
           echo "== CUDA-aware Open MPI 4.1.4, --mca btl ^smcuda"; cuda_mpirun -np 2 --mca btl ^smcuda /tmp/seq 3000 2>&1 | quiet
           echo "== system Open MPI 4.1.6 again"; mpirun -n 2 --bind-to core /tmp/seqsys 3000) > "$out/seq-mpis.txt" 2>&1
          cat "$out/seq-mpis.txt" ;;
    streams) (source .gpu-box/env.sh; nvcc -O2 -arch=sm_90 -o /tmp/streams "$here/streams.cu" && /tmp/streams 3000) > "$out/streams.txt" 2>&1
             cat "$out/streams.txt" ;;
    fprof|ichk|ichk3) bash "$held/run.sh" "$out" "$part" ;;
    face) LIB_A="${LIB_A:-s17}" LIB_B="${LIB_B:-s16}" ROUNDS="${ROUNDS:-4}" bash "$held/run.sh" "$out" face ;;
    *) echo "unknown part $part" >&2 ;;
  esac
done
