//! Facts about the host: programs on `PATH`, whether we run as root, live processes.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The first executable file called `name` in the directories of `path_var` (a `PATH` value).
pub fn which(name: &str, path_var: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path_var)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// `which` over the current process's `PATH`.
pub fn which_in_path(name: &str) -> Option<PathBuf> {
    which(name, &std::env::var_os("PATH").unwrap_or_default())
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether this process runs with effective user id 0.
///
/// Reads `Uid:` in `/proc/self/status`, else asks `id -u`, else trusts `$USER`.
pub fn is_root() -> bool {
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        if let Some(euid) = effective_uid_from_status(&status) {
            return euid == 0;
        }
    }
    if let Ok(out) = Command::new("id").arg("-u").stderr(Stdio::null()).output() {
        if out.status.success() {
            if let Ok(uid) = String::from_utf8_lossy(&out.stdout).trim().parse::<u32>() {
                return uid == 0;
            }
        }
    }
    std::env::var("USER").is_ok_and(|u| u == "root")
}

/// The effective uid from the text of `/proc/<pid>/status` (`Uid: real effective saved fs`).
fn effective_uid_from_status(status: &str) -> Option<u32> {
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// A process identified by pid and start time, so that a reused pid is never mistaken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessId {
    /// The process id.
    pub pid: u32,
    /// Start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
    pub start: u64,
}

impl ProcessId {
    /// Whether this very process (same pid, same start time) still exists.
    pub fn is_alive(self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|s| parse_stat(&s))
            .is_some_and(|(_, start)| start == self.start)
    }
}

/// `(ppid, starttime)` from the text of `/proc/<pid>/stat`.
///
/// The command name (field 2) may hold spaces and parentheses, so fields are counted from the last `)`.
fn parse_stat(stat: &str) -> Option<(u32, u64)> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state): ppid is field 4, starttime field 22.
    let ppid = fields.get(1)?.parse().ok()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((ppid, start))
}

/// Every live descendant of `root` (children, their children, ...), read from `/proc`.
///
/// Open MPI puts each rank in a process group of its own, so killing `mpirun`'s group
/// does not reach the ranks; this finds them.
pub fn descendants(root: u32) -> Vec<ProcessId> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let table: Vec<(u32, u32, u64)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (ppid, start) = parse_stat(&stat)?;
            Some((pid, ppid, start))
        })
        .collect();
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid, start) in &table {
            if ppid == parent && !found.iter().any(|p: &ProcessId| p.pid == pid) {
                found.push(ProcessId { pid, start });
                frontier.push(pid);
            }
        }
    }
    found
}

/// Sends `signal` (a name such as `TERM` or `KILL`) with the `kill` command to `target`
/// (a pid, or `-PGID` for a process group). Errors are ignored: the target may be gone already.
pub fn kill(signal: &str, target: &str) {
    let _ = Command::new("kill")
        .args([format!("-{signal}").as_str(), "--", target])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_finds_sh_and_misses_with_empty_path() {
        assert!(which("sh", OsStr::new("/nonexistent:/bin:/usr/bin")).is_some());
        assert!(which("sh", OsStr::new("/nonexistent")).is_none());
        assert!(which("sh", OsStr::new("")).is_none());
    }

    #[test]
    fn effective_uid_is_the_second_number() {
        let status = "Name:\tx\nUid:\t1000\t0\t0\t0\nGid:\t5\t5\t5\t5\n";
        assert_eq!(effective_uid_from_status(status), Some(0));
        assert_eq!(effective_uid_from_status("Name: x\n"), None);
    }

    #[test]
    fn stat_fields_count_from_the_last_paren() {
        let stat = "42 (a) b (c)) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 12345 1000 10";
        assert_eq!(parse_stat(stat), Some((7, 12345)));
    }

    #[test]
    fn own_process_is_alive_and_child_is_a_descendant() {
        let me = std::process::id();
        let stat = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
        let (_, start) = parse_stat(&stat).unwrap();
        assert!(ProcessId { pid: me, start }.is_alive());
        assert!(!ProcessId {
            pid: me,
            start: start + 1
        }
        .is_alive());

        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let found = descendants(me);
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.iter().any(|p| p.pid == child.id()));
    }
}
