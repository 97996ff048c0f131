#!/usr/bin/env bash
# Why a survivor of nccl_dead_peer ends with SIGSEGV when the one-shot path is on (3 and 4 ranks).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
export OMPI_MCA_orte_allowed_exit_without_sync=1 COLLECTIVES_ONE_SHOT_MAX_BYTES=32768
T=.gpu-box/tests; for p in $T/nccl_dead_peer-*.xz; do [ -e "${p%.xz}" ] || xz -dk "$p"; done
bin=$(ls $T/nccl_dead_peer-* | grep -v '\.xz$' | head -1)
gdb=$(command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null | head -1); echo "cuda-gdb: $gdb"
cat > /tmp/wrap.sh <<W
#!/usr/bin/env bash
r=\$OMPI_COMM_WORLD_RANK
case " \$DBG " in *" \$r "*)
  $gdb -q -batch -ex "set pagination off" -ex "set cuda break_on_launch none" -ex run -ex "info threads" -ex "thread apply all bt 14" --args $bin > /tmp/gdb-\$r.txt 2>&1
  echo "rank \$r under cuda-gdb: \$(grep -E 'SIG|exited' /tmp/gdb-\$r.txt | head -3 | tr '\n' ' ')";;
*) $bin; echo "rank \$r exit \$?";; esac
W
chmod +x /tmp/wrap.sh
for n in 3 3 4; do echo "\$ mpirun -n $n wrap nccl_dead_peer"; timeout 60 mpirun -n $n -x COLLECTIVES_ONE_SHOT_MAX_BYTES -x OMPI_MCA_orte_allowed_exit_without_sync /tmp/wrap.sh 2>&1 | grep -E "rank [0-9] exit|mpi-tests|Segm"; done
echo "\$ DBG='1' mpirun -n 3"; DBG=1 timeout 120 mpirun -n 3 -x DBG -x COLLECTIVES_ONE_SHOT_MAX_BYTES -x OMPI_MCA_orte_allowed_exit_without_sync /tmp/wrap.sh 2>&1 | grep -E "rank [0-9]|mpi-tests"
echo "\$ DBG='1 2' mpirun -n 4"; DBG="1 2" timeout 120 mpirun -n 4 -x DBG -x COLLECTIVES_ONE_SHOT_MAX_BYTES -x OMPI_MCA_orte_allowed_exit_without_sync /tmp/wrap.sh 2>&1 | grep -E "rank [0-9]|mpi-tests"
for f in /tmp/gdb-*.txt; do echo "=== $f"; grep -vE "^\[New Thread|^\[Thread .* exited|^\[Detaching|^\[Inferior" $f | grep -A400 -E "SIGSEGV|signal" | head -150; done
mkdir -p $OUT && cp /tmp/gdb-*.txt $OUT/ 2>/dev/null; true
