#!/usr/bin/env bash
# Issue 26: the README's set-up on a fresh minimal Debian 12, as root and as a user with sudo, by
# `cargo xtask fresh`, on a 2-core Debian 12 VM without a GPU, as root (machine.txt). The VM was
# shared with other engineers' builds (load average 5 to 9 on 2 cores), so the times are upper
# bounds: the same steps alone on the machine take less.
# From the checkout:  bash docs/logs/2026-11-26-fresh/run.sh OUT
set -uo pipefail
out="${1:?usage: run.sh OUT}"; mkdir -p "$out"
export CARGO_INCREMENTAL=0   # as .ci/run sets it
apt-get install -y debootstrap
# 1. cold: the base made by debootstrap (what `fresh` does when target/fresh/base is missing: 58.7 s),
#    then the README as root with an empty inner target directory (cold-root.txt). This ran at
#    54cc339, whose `fresh` had only the root run (so no --as there).
time unshare --mount --propagation private \
  debootstrap --variant=minbase bookworm target/fresh/base.partial http://deb.debian.org/debian
mv target/fresh/base.partial target/fresh/base && touch target/fresh/base/.xtask-debootstrap-done
cargo xtask fresh --as root > "$out/cold-root.log" 2>&1; echo "exit $?" >> "$out/cold-root.log"
# 2. both runs, root and user+sudo, base and root's inner target directory reused (fresh.txt).
cargo xtask fresh > "$out/fresh.log" 2>&1; echo "exit $?" >> "$out/fresh.log"
# The logs here keep the steps, the dependency reports and the summaries of the inner runs:
keep='^(==|--) fresh|^== (summary|system dependencies)|^\| |^(found|MISSING|absent) |^xtask: |^note: '
keep+='|^total |^[A-Za-z][^:]*: [0-9]+ passed, [0-9]+ failed|^[0-9]+ passed, [0-9]+ failed|: skipped$'
keep+='|^exit |skipped:|skipped \(|no GPU \(|install them with|results: '
for log in cold-root fresh; do
  grep -E "$keep" "$out/$log.log" | grep -vE '^mpi-tests:|^test |^== (building|cargo|RUSTDOCFLAGS|mpirun|OMPI)' \
    > "docs/logs/2026-11-26-fresh/$log.txt"
done
