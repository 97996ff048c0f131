//! OSU Micro-Benchmarks beside collbench: OMB 7.4 built once for the CPU from the peers' tarball
//! (`../shared/peers/omb-7.4.tar.xz` with its `build.sh`, beside the checkout or the main checkout
//! of a worktree; `XTASK_PEERS=DIR` names another folder), then `osu_allreduce` and
//! `collbench allreduce --osu` with the same flags through the same launcher, one after the other,
//! their latencies side by side.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::exec;
use crate::mpirun::Launch;
use crate::summary::Tally;

/// The variable that names the peers' folder.
pub const PEERS_VAR: &str = "XTASK_PEERS";

/// The flags both sides run with: 8 B to 16 KiB, 100 timed calls after 10.
pub const FLAGS: [&str; 6] = ["-m", "8:16384", "-i", "100", "-x", "10"];

/// OMB's all-reduce under the folder `build.sh DEST cpu` installs into.
pub fn osu_allreduce(dest: &Path) -> PathBuf {
    dest.join("omb/libexec/osu-micro-benchmarks/mpi/collective/osu_allreduce")
}

/// The peers' folder: `given`, else `../shared/peers` beside `root` or beside its main checkout,
/// the first that holds `omb-7.4.tar.xz` and `build.sh`.
pub fn find_peers(root: &Path, given: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let holds = |d: &Path| d.join("omb-7.4.tar.xz").is_file() && d.join("build.sh").is_file();
    if let Some(given) = given.filter(|g| !g.is_empty()) {
        return Some(PathBuf::from(given)).filter(|d| holds(d));
    }
    let mut roots = vec![root.to_path_buf()];
    roots.extend(crate::host::main_checkout(root));
    roots
        .iter()
        .filter_map(|r| r.parent())
        .map(|p| p.join("shared").join("peers"))
        .find(|d| holds(d))
}

/// `(size, value)` rows of an OSU-format table: lines whose first two words are numbers.
pub fn rows(table: &str) -> Vec<(u64, f64)> {
    table
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect()
}

/// The two tables side by side: size, OSU's and collbench's average latency (us), their ratio.
pub fn side_by_side(osu: &[(u64, f64)], ours: &[(u64, f64)]) -> String {
    let mut s = format!(
        "{:>10} {:>14} {:>16} {:>8}\n",
        "size (B)", "osu_allreduce", "collbench --osu", "ours/osu"
    );
    for (size, theirs) in osu {
        if let Some((_, mine)) = ours.iter().find(|(n, _)| n == size) {
            let ratio = if *theirs > 0.0 {
                mine / theirs
            } else {
                f64::NAN
            };
            s.push_str(&format!(
                "{size:>10} {theirs:>14.2} {mine:>16.2} {ratio:>8.2}\n"
            ));
        }
    }
    s
}

/// Builds OMB into `dest` with the peers' `build.sh` unless it is there already.
fn build(peers: &Path, dest: &Path) -> Result<PathBuf, String> {
    let exe = osu_allreduce(dest);
    if exe.is_file() {
        return Ok(exe);
    }
    println!(
        "== bash {}/build.sh {} cpu ==",
        peers.display(),
        dest.display()
    );
    let out = Command::new("bash")
        .arg(peers.join("build.sh"))
        .arg(dest)
        .arg("cpu")
        .output()
        .map_err(|e| format!("cannot run build.sh: {e}"))?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if !out.status.success() || !exe.is_file() {
        return Err(format!(
            "OMB build failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(exe)
}

/// OMB's `osu_allreduce` and `collbench allreduce --osu` with [`FLAGS`], each launched by
/// `launch(exe, args)`; each run that exits 0 is a pass, and so is finding a row of collbench for
/// every size of OMB's. `None` (with one printed line) where OMB's source is not found.
pub fn beside<F>(root: &Path, collbench: &Path, limit: Duration, launch: F) -> Option<Tally>
where
    F: Fn(&Path, &[String]) -> Launch,
{
    let Some(peers) = find_peers(root, std::env::var_os(PEERS_VAR).as_deref()) else {
        println!(
            "OMB beside collbench skipped: no omb-7.4.tar.xz with build.sh in ../shared/peers \
             beside the checkout (set {PEERS_VAR}=DIR)"
        );
        return None;
    };
    let mut tally = Tally::default();
    let osu = match build(&peers, &root.join("target").join("peers")) {
        Ok(exe) => exe,
        Err(e) => {
            tally.fail(1, e);
            return Some(tally);
        }
    };
    let flags: Vec<String> = FLAGS.map(str::to_owned).to_vec();
    let ours_args: Vec<String> = ["allreduce", "--osu"]
        .map(str::to_owned)
        .into_iter()
        .chain(flags.iter().cloned())
        .collect();
    let mut tables = Vec::new();
    for (name, exe, args) in [
        ("osu_allreduce", osu.as_path(), &flags),
        ("collbench allreduce --osu", collbench, &ours_args),
    ] {
        let l = launch(exe, args);
        let what = format!("{name} {}", flags.join(" "));
        println!("== {what} ==");
        match exec::run_tee(l.command(), Some(limit), true) {
            Ok(o) if o.success() => {
                tally.pass(1);
                tables.push(rows(&o.output));
            }
            Ok(o) => {
                tally.fail(1, format!("{what}: {}", o.describe()));
                println!("xtask: rerun with: {}", l.shell_line());
                tables.push(Vec::new());
            }
            Err(e) => {
                tally.fail(1, format!("{what}: cannot start: {e}"));
                tables.push(Vec::new());
            }
        }
    }
    let (theirs, ours) = (&tables[0], &tables[1]);
    let paired = !theirs.is_empty() && theirs.iter().all(|(n, _)| ours.iter().any(|(m, _)| m == n));
    if paired {
        tally.pass(1);
        print!(
            "average latency (us), same flags, same launcher:\n{}",
            side_by_side(theirs, ours)
        );
    } else {
        tally.fail(
            1,
            "collbench --osu did not report every size osu_allreduce did",
        );
    }
    Some(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn osu_tables_are_read_and_paired() {
        let osu = "# OSU MPI Allreduce Latency Test v7.4\n# Size       Avg Latency(us)\n\
                   8                       4.10\n16                      4.50\n";
        let ours = "# collbench\n# Size       Avg Latency(us)\n8   3.90\n16  5.40\n32 6.0\n";
        let (a, b) = (rows(osu), rows(ours));
        assert_eq!(a, [(8, 4.10), (16, 4.50)]);
        assert_eq!(b.len(), 3);
        let table = side_by_side(&a, &b);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["8", "4.10", "3.90", "0.95"]
        );
        assert_eq!(lines[2].split_whitespace().last(), Some("1.20"));
    }

    #[test]
    fn peers_are_found_beside_the_checkout_or_named() {
        let base = std::env::temp_dir().join(format!("xtask-peers-{}", std::process::id()));
        let peers = base.join("shared/peers");
        std::fs::create_dir_all(&peers).unwrap();
        std::fs::create_dir_all(base.join("repo")).unwrap();
        let none = find_peers(&base.join("repo"), None);
        std::fs::write(peers.join("omb-7.4.tar.xz"), "").unwrap();
        std::fs::write(peers.join("build.sh"), "").unwrap();
        let found = find_peers(&base.join("repo"), None);
        let named = find_peers(Path::new("/nonexistent"), Some(peers.as_os_str()));
        let wrong = find_peers(
            &base.join("repo"),
            Some(std::ffi::OsStr::new("/nonexistent")),
        );
        let _ = std::fs::remove_dir_all(&base);
        assert_eq!(none, None);
        assert_eq!(found, Some(peers.clone()));
        assert_eq!(named, Some(peers));
        assert_eq!(wrong, None);
    }
}
