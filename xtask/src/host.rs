//! Facts about the host and acting on it: programs on `PATH`, whether we run as root, live
//! processes and signals to them, whether a shared library loads. Everything here is done by the
//! process itself (`/proc`, system calls), so none of it depends on an external program.

use std::ffi::{CString, OsStr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

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

/// Whether `path` is a file with an execute bit set.
pub fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether this process runs with effective user id 0.
pub fn is_root() -> bool {
    // SAFETY: geteuid(2) takes no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() == 0 }
}

/// The effective uid from the text of `/proc/<pid>/status` (`Uid: real effective saved fs`).
/// The main checkout of the git worktree at `root`: `root/.git` is then a file
/// `gitdir: <main>/.git/worktrees/<name>`, whose `commondir` leads to `<main>/.git`.
pub fn main_checkout(root: &Path) -> Option<PathBuf> {
    let dot_git = std::fs::read_to_string(root.join(".git")).ok()?;
    let gitdir = root.join(dot_git.trim().strip_prefix("gitdir:")?.trim());
    let common = std::fs::read_to_string(gitdir.join("commondir")).ok()?;
    let common = gitdir.join(common.trim()).canonicalize().ok()?;
    (common.file_name()? == ".git").then(|| common.parent().map(Path::to_path_buf))?
}

#[cfg(test)]
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

/// A signal xtask sends to the processes it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `SIGTERM`: asks to exit (`mpirun` then takes its ranks down).
    Term,
    /// `SIGKILL`: cannot be caught or ignored.
    Kill,
}

impl Signal {
    /// The signal's number.
    pub fn number(self) -> libc::c_int {
        match self {
            Signal::Term => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
        }
    }

    /// `SIGTERM`, `SIGKILL`.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Term => "SIGTERM",
            Signal::Kill => "SIGKILL",
        }
    }
}

/// Who receives a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// One process, by pid.
    Process(u32),
    /// Every process of a process group, by its id.
    Group(u32),
}

impl Target {
    /// The `pid` argument of kill(2): the pid, or minus the group id.
    ///
    /// # Errors
    /// For targets kill(2) would read as something else: pid 0 (our own group), group 0 or 1
    /// (`-1` is every process we may signal), and ids beyond `pid_t`.
    fn kill_arg(self) -> Result<libc::pid_t, String> {
        match self {
            Target::Process(pid) => match libc::pid_t::try_from(pid) {
                Ok(p) if p > 0 => Ok(p),
                _ => Err(format!("refusing to signal pid {pid}")),
            },
            Target::Group(pgid) => match libc::pid_t::try_from(pgid) {
                Ok(g) if g > 1 => Ok(-g),
                _ => Err(format!("refusing to signal process group {pgid}")),
            },
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Process(pid) => write!(f, "process {pid}"),
            Target::Group(pgid) => write!(f, "process group {pgid}"),
        }
    }
}

/// What became of a signal that was not an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The target exists and the signal was sent.
    Sent,
    /// No such process or group (`ESRCH`): it is gone already.
    Gone,
}

/// Sends `signal` to `target` with kill(2).
///
/// # Errors
/// Any failure other than `ESRCH` (which is [`Delivery::Gone`]): no permission, an invalid
/// target. The message names the signal, the target and the system's reason.
pub fn send_signal(signal: Signal, target: Target) -> Result<Delivery, String> {
    send_raw(signal.number(), target)
        .map_err(|e| format!("cannot send {} to {target}: {e}", signal.name()))
}

/// kill(2) with a raw signal number (the tests use an invalid one to see an error come back).
fn send_raw(signal: libc::c_int, target: Target) -> Result<Delivery, String> {
    let pid = target.kill_arg()?;
    // SAFETY: kill(2) reads only its two integer arguments; `pid` is a positive pid or a
    // negated group id above 1, never 0 or -1 (checked by `kill_arg`).
    let rc = unsafe { libc::kill(pid, signal) };
    if rc == 0 {
        return Ok(Delivery::Sent);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        Ok(Delivery::Gone)
    } else {
        Err(err.to_string())
    }
}

/// Whether the dynamic loader can open the shared library `name` (a file name such as
/// `libcuda.so.1`, looked up as dlopen(3) does); the loader's message when it cannot.
///
/// The library is opened and closed again; its initializers run, as they would in any
/// program that uses it.
///
/// # Errors
/// The loader's reason (`libcuda.so.1: cannot open shared object file: ...`).
pub fn library_loads(name: &str) -> Result<(), String> {
    let c_name = CString::new(name).map_err(|_| format!("bad library name {name:?}"))?;
    // SAFETY: `c_name` is a valid NUL-terminated string that outlives the call.
    let handle = unsafe { libc::dlopen(c_name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror(3) returns NULL or a NUL-terminated message owned by the loader,
        // valid until the next dl* call on this thread; it is copied before any other call.
        let message = unsafe {
            let text = libc::dlerror();
            if text.is_null() {
                format!("{name}: cannot be opened")
            } else {
                std::ffi::CStr::from_ptr(text)
                    .to_string_lossy()
                    .into_owned()
            }
        };
        return Err(message);
    }
    // SAFETY: `handle` came from a successful dlopen above and is closed exactly once; no
    // symbol of it was looked up, so nothing refers into the library afterwards.
    unsafe { libc::dlclose(handle) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;

    #[test]
    fn which_finds_sh_and_misses_with_empty_path() {
        assert!(which("sh", OsStr::new("/nonexistent:/bin:/usr/bin")).is_some());
        assert!(which("sh", OsStr::new("/nonexistent")).is_none());
        assert!(which("sh", OsStr::new("")).is_none());
    }

    #[test]
    fn is_root_agrees_with_proc_status() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let euid = effective_uid_from_status(&status).unwrap();
        assert_eq!(is_root(), euid == 0);
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

    #[test]
    fn signals_are_delivered_without_an_external_program() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        assert_eq!(
            send_signal(Signal::Term, Target::Process(pid)),
            Ok(Delivery::Sent)
        );
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
        // Reaped: the pid names no process now (unless reused within these microseconds).
        assert_eq!(
            send_signal(Signal::Kill, Target::Process(pid)),
            Ok(Delivery::Gone)
        );
    }

    #[test]
    fn a_group_signal_reaches_every_member() {
        use std::os::unix::process::CommandExt;
        let mut leader = Command::new("sh");
        leader.args(["-c", "sleep 30 & wait"]).process_group(0);
        let mut leader = leader.spawn().unwrap();
        let pgid = leader.id();
        // Wait until the shell has started its `sleep`, so both are in the group.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let member = loop {
            if let Some(p) = descendants(pgid).first() {
                break *p;
            }
            assert!(std::time::Instant::now() < deadline, "sleep never started");
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(
            send_signal(Signal::Kill, Target::Group(pgid)),
            Ok(Delivery::Sent)
        );
        assert_eq!(leader.wait().unwrap().signal(), Some(libc::SIGKILL));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while member.is_alive() {
            let zombie = std::fs::read_to_string(format!("/proc/{}/stat", member.pid))
                .is_ok_and(|s| s.contains(") Z"));
            if zombie {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "group member survived"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn failures_other_than_a_gone_target_are_errors() {
        let me = std::process::id();
        // An invalid signal number: EINVAL, which must come back as an error.
        let err = send_raw(100_000, Target::Process(me)).unwrap_err();
        assert!(err.contains("Invalid argument"), "{err}");
        let err = send_signal(Signal::Term, Target::Process(0)).unwrap_err();
        assert!(err.contains("pid 0"), "{err}");
        for pgid in [0, 1, u32::MAX] {
            assert!(send_signal(Signal::Kill, Target::Group(pgid)).is_err());
        }
        assert_eq!(Target::Group(42).kill_arg(), Ok(-42));
        assert_eq!(Target::Process(42).kill_arg(), Ok(42));
    }

    #[test]
    fn libraries_load_or_say_why_not() {
        assert_eq!(library_loads("libc.so.6"), Ok(()));
        let err = library_loads("libno-such-library-xtask.so.9").unwrap_err();
        assert!(err.contains("libno-such-library-xtask.so.9"), "{err}");
    }
}
