#!/usr/bin/env bash
# Issue 26: the README's set-up on a fresh minimal Debian 12, as root and as a user with sudo, by
# `cargo xtask fresh`, on a 2-core Debian 12 VM without a GPU, as root (machine.txt). The VM was
# shared with other builds (load average 5 to 8 on 2 cores), so the times are upper bounds.
# From the checkout:  bash docs/logs/2026-11-26-fresh/run.sh OUT
set -uo pipefail
out="${1:?usage: run.sh OUT}"; mkdir -p "$out"
export CARGO_INCREMENTAL=0   # as .ci/run sets it
apt-get install -y debootstrap
# 1. cold: the base made by debootstrap (what `fresh` does when target/fresh/base is missing), then
#    the README as root with an empty inner target directory (fresh-cold-root.txt).
time unshare --mount --propagation private \
  debootstrap --variant=minbase bookworm target/fresh/base.partial http://deb.debian.org/debian
mv target/fresh/base.partial target/fresh/base && touch target/fresh/base/.xtask-debootstrap-done
cargo xtask fresh --as root > "$out/cold-root.log" 2>&1
# 2. both personas at the final commit, base and root's inner target directory reused (fresh.txt).
cargo xtask fresh > "$out/fresh.log" 2>&1
# The logs here keep the steps, the dependency reports and the summaries of the inner runs:
for log in cold-root fresh; do
  grep -E '^(==|--) |^\| |^(found|MISSING|absent) |^xtask: |^total |passed, .* failed|skipped|^  [a-z]' \
    "$out/$log.log" | grep -vE '^== (building|cargo|RUSTDOCFLAGS|mpirun -n)' > "$out/$log.txt"
done
