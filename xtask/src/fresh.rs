//! `cargo xtask fresh`: the README's set-up, word for word, on a minimal Debian 12 root, as a
//! new user would run it; also a stage of `cargo xtask test`.
//!
//! The set-up runs twice, each time in a root of its own: as root, every command as written; as
//! a user with sudo (`sudo` before each `apt-get`, as the README says), up to `cargo xtask deps`,
//! which prints the install command, then that command, then `deps` again.
//!
//! | step | what |
//! |---|---|
//! | base | `debootstrap --variant=minbase bookworm` into `target/fresh/base/`, once: reruns reuse it |
//! | root | a copy of the base (`target/fresh/root/`, `target/fresh/user-root/`), made again on every run: apt starts from nothing |
//! | checkout | `git clone --bare` of this checkout at `HEAD` as `/srv/collectives.git` in the root: the README's `<this repository>` |
//! | CA store | the host's `/etc/ssl/certs/ca-certificates.crt`, also under `/usr/local/share/ca-certificates/`, so that the root trusts what the host trusts even after installing `ca-certificates` |
//! | toolchain | the host's rustup home and `~/.cargo/bin` mounted read-only in the persona's home; for root `~/.cargo/registry` copied (no crate downloaded twice) |
//! | user | for the user only: sudo, the user `fresh` with passwordless sudo |
//! | README | the README's set-up commands (as committed at `HEAD`), in order, each with its time and result |
//!
//! Each command runs in a mount namespace of its own (unshare(2) in the child before it execs),
//! with `/proc`, `/sys` and `/dev` mounted into the root and chroot(2) into it: the mounts exist
//! only while the command runs and vanish with it, however it ends, so nothing ever stays mounted
//! under `target/`. root's build inside uses `CARGO_TARGET_DIR=/var/cache/xtask-target`, kept in
//! `target/fresh/target/` between runs (`--cold` starts it, and the base, afresh).
//!
//! Skipped with one line where it cannot run: not root, no mount namespaces, no `debootstrap`
//! (and no base built before), no rustup toolchain, or inside a fresh root already
//! (`XTASK_FRESH_INSIDE`, set for the commands in the root, so that its `cargo xtask test` does
//! not start another).

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::summary::Tally;
use crate::{deps, exec, host, workspace_root};

/// The Debian release the root is made of.
pub const SUITE: &str = "bookworm";

/// Where debootstrap downloads it from.
pub const MIRROR: &str = "http://deb.debian.org/debian";

/// The working directory of this stage, under the workspace root.
pub const DIR: &str = "target/fresh";

/// Set (to `1`) for every command run in the root; the stage skips itself where it is set.
pub const INSIDE_VAR: &str = "XTASK_FRESH_INSIDE";

/// Inside a fresh root (its `cargo xtask test`), why the stages that make namespaces or start
/// daemons of their own (two nodes, Slurm) are left to the host's run: they would nest inside the
/// root's mount namespace and chroot, and they prove the library, not the README's set-up.
pub fn inside_why() -> Option<String> {
    std::env::var_os(INSIDE_VAR).map(|_| {
        format!("inside the fresh root ({INSIDE_VAR}): the host's `cargo xtask test` runs it")
    })
}

/// Where the checkout is, inside the root: what the README's `<this repository>` becomes.
pub const CLONE_SOURCE: &str = "/srv/collectives.git";

/// The README's placeholder for the repository's address.
pub const REPOSITORY_PLACEHOLDER: &str = "<this repository>";

/// The README section whose `sh` blocks are the set-up.
pub const README_SECTION: &str = "## Set up, benchmark, test";

/// `CARGO_TARGET_DIR` inside the root; `target/fresh/target` is mounted there.
pub const INNER_TARGET: &str = "/var/cache/xtask-target";

/// The file that marks a complete base (debootstrap finished).
const BASE_DONE: &str = ".xtask-debootstrap-done";

/// root's `PATH` inside the root, after rustup's `~/.cargo/bin` (first, as rustup sets it).
const ROOT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A user's `PATH` inside the root, after `~/.cargo/bin`: Debian's default for users.
const USER_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Variables passed from the host to the commands in the root when set.
const PASSED_ON: [&str; 9] = [
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "XTASK_JOBS",
    "XTASK_MPI_TIMEOUT",
    "CARGO_INCREMENTAL",
];

/// Wall-clock limit of one step, in seconds, when `XTASK_FRESH_STEP_TIMEOUT` is unset.
pub const DEFAULT_STEP_TIMEOUT_S: u64 = 2400;

/// The user the second run of the set-up makes and runs as (with sudo).
pub const USER: &str = "fresh";

/// Who runs the README's commands in a root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persona {
    /// root, as in a container or a new VM: every command as written.
    Root,
    /// A user with sudo: `sudo` before each `apt-get`, as the README says, up to and including
    /// `cargo xtask deps`, the command that prints, and `deps` again.
    SudoUser,
}

impl Persona {
    /// Both, in the order they run.
    pub const ALL: [Persona; 2] = [Persona::Root, Persona::SudoUser];

    /// `root`, `user+sudo`: the first column of the report.
    pub fn label(self) -> &'static str {
        match self {
            Persona::Root => "root",
            Persona::SudoUser => "user+sudo",
        }
    }

    /// The home directory, where rustup's toolchain is mounted and the commands start.
    pub fn home(self) -> &'static str {
        match self {
            Persona::Root => "/root",
            Persona::SudoUser => "/home/fresh",
        }
    }

    /// The root's directory under [`DIR`].
    fn dir_name(self) -> &'static str {
        match self {
            Persona::Root => "root",
            Persona::SudoUser => "user-root",
        }
    }

    /// `command` as this persona types it: for a user, `sudo` before each `apt-get`; the
    /// repository placeholder replaced by [`CLONE_SOURCE`] for both.
    pub fn typed(self, command: &str) -> String {
        let command = command.replace(REPOSITORY_PLACEHOLDER, CLONE_SOURCE);
        match self {
            Persona::Root => command,
            Persona::SudoUser => {
                let mut out = String::new();
                for (i, part) in command.split("apt-get").enumerate() {
                    if i > 0 {
                        if !out.ends_with("sudo ") {
                            out.push_str("sudo ");
                        }
                        out.push_str("apt-get");
                    }
                    out.push_str(part);
                }
                out
            }
        }
    }
}

/// The command line of `cargo xtask fresh`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// Build the base and the inner target directory afresh instead of reusing them.
    pub cold: bool,
    /// Run the set-up only as this persona (`--as root|user`); both when `None`.
    pub only: Option<Persona>,
}

/// Parses the arguments after `fresh`.
///
/// # Errors
/// A message naming the bad argument.
pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut options = Options::default();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--cold" => options.cold = true,
            "--as" => {
                options.only = match iter.next().map(String::as_str) {
                    Some("root") => Some(Persona::Root),
                    Some("user") => Some(Persona::SudoUser),
                    _ => return Err("--as needs `root` or `user`".to_owned()),
                }
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(options)
}

/// The commands of the README's set-up: every line of the `sh` blocks of [`README_SECTION`],
/// without comments, in order, with [`REPOSITORY_PLACEHOLDER`] as written.
///
/// # Errors
/// When the section or its commands are not there.
pub fn readme_commands(readme: &str) -> Result<Vec<String>, String> {
    let at = readme
        .find(README_SECTION)
        .ok_or_else(|| format!("the README has no `{README_SECTION}` section"))?;
    let section = &readme[at + README_SECTION.len()..];
    let section = section.find("\n## ").map_or(section, |end| &section[..end]);
    let mut commands = Vec::new();
    let mut in_sh = false;
    for line in section.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_sh = !in_sh && trimmed == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let command = strip_comment(line).trim();
        if !command.is_empty() {
            commands.push(command.to_owned());
        }
    }
    if commands.is_empty() {
        return Err(format!("no sh commands in the README's `{README_SECTION}`"));
    }
    Ok(commands)
}

/// `line` up to a `#` that starts a comment (at the start or after a space).
fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let at = (0..bytes.len()).find(|&i| bytes[i] == b'#' && (i == 0 || bytes[i - 1] == b' '));
    at.map_or(line, |i| &line[..i])
}

/// One reported step: what ran, how long it took, how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Whose step: [`Persona::label`], or `host` for the base.
    pub who: &'static str,
    /// The step: a README command as typed, or a preparation step.
    pub step: String,
    /// How long it took.
    pub took: Duration,
    /// `ok`, `reused ...`, or what failed.
    pub result: String,
    /// Whether it is one of the README's commands (counted in the tally).
    pub readme: bool,
    /// Whether it went well.
    pub ok: bool,
}

/// The steps as a Markdown table: `| as | step | time | result |`.
pub fn render_reports(reports: &[Report]) -> String {
    let mut out = String::from("| as | step | time | result |\n|---|---|---|---|\n");
    for r in reports {
        let step = if r.readme {
            format!("`{}`", r.step)
        } else {
            r.step.clone()
        };
        out.push_str(&format!(
            "| {} | {step} | {:.1} s | {} |\n",
            r.who,
            r.took.as_secs_f64(),
            r.result
        ));
    }
    out
}

/// Why the stage cannot run here, or `None` when it can.
fn why_not(dir: &Path, cold: bool) -> Option<String> {
    if std::env::var_os(INSIDE_VAR).is_some() {
        return Some(format!(
            "running inside a fresh root already ({INSIDE_VAR})"
        ));
    }
    if !host::is_root() {
        return Some("needs root (debootstrap, chroot, mounts)".to_owned());
    }
    if let Err(e) = probe_namespace() {
        return Some(format!("cannot make a mount namespace: {e}"));
    }
    if (cold || !dir.join("base").join(BASE_DONE).is_file())
        && host::which_in_path("debootstrap").is_none()
    {
        return Some(format!(
            "no debootstrap on PATH and no base built before ({})",
            deps::declared("debootstrap").describe()
        ));
    }
    if Toolchain::from_env().is_none() {
        return Some("no rustup toolchain (~/.rustup, ~/.cargo/bin) to copy in".to_owned());
    }
    None
}

/// Whether a child can make a private mount namespace.
fn probe_namespace() -> Result<(), String> {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "exit 0"]).stdin(Stdio::null());
    // SAFETY: the closure only makes system calls (unshare(2), mount(2)) with no allocation,
    // which is what may run between fork and exec.
    unsafe {
        cmd.pre_exec(private_namespace);
    }
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("unshare(CLONE_NEWNS) in a child: {s}")),
        Err(e) => Err(e.to_string()),
    }
}

/// unshare(2) a mount namespace and make every mount in it private, so nothing mounted in it
/// reaches the host's.
fn private_namespace() -> std::io::Result<()> {
    // SAFETY: unshare(2) takes a flag word and touches no memory of ours.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let root = c"/";
    // SAFETY: mount(2) with a NUL-terminated target and null source, type and data, which
    // MS_PRIVATE allows.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The host's Rust toolchain: rustup's home and cargo's.
#[derive(Debug, Clone)]
struct Toolchain {
    rustup_home: PathBuf,
    cargo_home: PathBuf,
}

impl Toolchain {
    /// `RUSTUP_HOME` and `CARGO_HOME`, else `~/.rustup` and `~/.cargo`, when both exist.
    fn from_env() -> Option<Self> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let dir = |var: &str, default: &str| {
            std::env::var_os(var)
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(default)))
                .filter(|d| d.is_dir())
        };
        let rustup_home = dir("RUSTUP_HOME", ".rustup")?;
        let cargo_home = dir("CARGO_HOME", ".cargo")?;
        cargo_home.join("bin").is_dir().then_some(Toolchain {
            rustup_home,
            cargo_home,
        })
    }
}

/// One mount made in a command's namespace before it enters the root.
#[derive(Debug, Clone)]
struct Mount {
    source: CString,
    target: CString,
    fstype: Option<CString>,
    flags: libc::c_ulong,
    read_only: bool,
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{} holds a NUL byte", path.display()))
}

impl Mount {
    fn fs(fstype: &str, target: &Path) -> Result<Self, String> {
        Ok(Mount {
            source: CString::new(fstype).map_err(|e| e.to_string())?,
            target: c_path(target)?,
            fstype: Some(CString::new(fstype).map_err(|e| e.to_string())?),
            flags: 0,
            read_only: false,
        })
    }

    fn bind(source: &Path, target: &Path, read_only: bool) -> Result<Self, String> {
        Ok(Mount {
            source: c_path(source)?,
            target: c_path(target)?,
            fstype: None,
            flags: libc::MS_BIND | libc::MS_REC,
            read_only,
        })
    }

    /// mount(2), then for a read-only bind the remount that makes it so.
    fn apply(&self) -> std::io::Result<()> {
        let fstype = self
            .fstype
            .as_ref()
            .map_or(std::ptr::null(), |t| t.as_ptr());
        // SAFETY: every pointer is a NUL-terminated string owned by `self` or null where
        // mount(2) allows it (no type for a bind); data is null.
        let rc = unsafe {
            libc::mount(
                self.source.as_ptr(),
                self.target.as_ptr(),
                fstype,
                self.flags,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if self.read_only {
            // SAFETY: as above; a remount of the bind just made, with no source or type.
            let rc = unsafe {
                libc::mount(
                    std::ptr::null(),
                    self.target.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                    std::ptr::null(),
                )
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Everything a command in a root needs: the root, what to mount into it, who runs it.
#[derive(Debug)]
struct Jail {
    root: PathBuf,
    mounts: Vec<Mount>,
    persona: Persona,
    /// The user's uid and gid, for [`Persona::SudoUser`].
    ids: Option<(libc::uid_t, libc::gid_t)>,
    /// Whether [`INNER_TARGET`] is mounted (and so `CARGO_TARGET_DIR` set).
    target: bool,
}

impl Jail {
    /// `/proc`, `/sys` and `/dev` in `root`, for root: what setting the root up needs.
    fn bare(root: &Path) -> Result<Self, String> {
        let inside = |p: &str| root.join(p.trim_start_matches('/'));
        Ok(Jail {
            root: root.to_path_buf(),
            mounts: vec![
                Mount::fs("proc", &inside("/proc"))?,
                Mount::fs("sysfs", &inside("/sys"))?,
                Mount::bind(Path::new("/dev"), &inside("/dev"), false)?,
            ],
            persona: Persona::Root,
            ids: None,
            target: false,
        })
    }

    /// [`Jail::bare`] with the toolchain mounted read-only in the persona's home, `target` (if
    /// any) at [`INNER_TARGET`], run as `ids` (if any).
    fn new(
        root: &Path,
        persona: Persona,
        toolchain: &Toolchain,
        target: Option<&Path>,
        ids: Option<(libc::uid_t, libc::gid_t)>,
    ) -> Result<Self, String> {
        let mut jail = Jail::bare(root)?;
        let inside = |p: &str| root.join(p.trim_start_matches('/'));
        let home = persona.home();
        jail.mounts.push(Mount::bind(
            &toolchain.rustup_home,
            &inside(&format!("{home}/.rustup")),
            true,
        )?);
        jail.mounts.push(Mount::bind(
            &toolchain.cargo_home.join("bin"),
            &inside(&format!("{home}/.cargo/bin")),
            true,
        )?);
        if let Some(target) = target {
            jail.mounts
                .push(Mount::bind(target, &inside(INNER_TARGET), false)?);
            jail.target = true;
        }
        jail.persona = persona;
        jail.ids = ids;
        Ok(jail)
    }

    /// `sh -c SCRIPT sh ARGS...` run in the root as its persona, in a namespace of its own.
    fn command(&self, script: &str, args: &[&str]) -> Result<Command, String> {
        let root = c_path(&self.root)?;
        let mounts = self.mounts.clone();
        let home = self.persona.home();
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script).arg("sh").args(args);
        cmd.env_clear()
            .env("HOME", home)
            .env("LANG", "C.UTF-8")
            .env(INSIDE_VAR, "1");
        match self.persona {
            Persona::Root => cmd.env("PATH", format!("{home}/.cargo/bin:{ROOT_PATH}")),
            Persona::SudoUser => cmd
                .env("PATH", format!("{home}/.cargo/bin:{USER_PATH}"))
                .env("USER", USER)
                .env("LOGNAME", USER),
        };
        if self.target {
            cmd.env("CARGO_TARGET_DIR", INNER_TARGET);
        }
        for var in PASSED_ON {
            if let Some(value) = std::env::var_os(var) {
                cmd.env(var, value);
            }
        }
        let ids = self.ids;
        let enter = move || {
            private_namespace()?;
            for mount in &mounts {
                mount.apply()?;
            }
            // SAFETY: chroot(2) on a NUL-terminated path owned by the closure.
            if unsafe { libc::chroot(root.as_ptr()) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: chdir(2) on a NUL-terminated literal.
            if unsafe { libc::chdir(c"/".as_ptr()) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some((uid, gid)) = ids {
                // SAFETY: setgroups(2) with an empty list (a null pointer and 0 entries), then
                // setgid(2) and setuid(2) on plain integers: root's groups and ids are dropped.
                let dropped = unsafe {
                    libc::setgroups(0, std::ptr::null()) == 0
                        && libc::setgid(gid) == 0
                        && libc::setuid(uid) == 0
                };
                if !dropped {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        };
        // SAFETY: `enter` makes only system calls (unshare, mount, chroot, chdir, setgroups,
        // setgid, setuid) on values prepared before the fork; it allocates nothing, as is
        // required between fork and exec.
        unsafe {
            cmd.pre_exec(enter);
        }
        Ok(cmd)
    }
}

/// Removes `dir` (when there) after making sure nothing is mounted under it, so that a bind of
/// `/dev` can never be deleted through.
fn remove_tree(dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        return Ok(());
    }
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if let Some(mounted) = mounts_under(&mountinfo, &dir).first() {
        return Err(format!(
            "{mounted} is mounted under {}: unmount it (umount -R) before removing",
            dir.display()
        ));
    }
    std::fs::remove_dir_all(&dir).map_err(|e| format!("cannot remove {}: {e}", dir.display()))
}

/// The mount points (field 5 of `/proc/self/mountinfo`) at or under `dir`.
fn mounts_under(mountinfo: &str, dir: &Path) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|point| Path::new(point).starts_with(dir))
        .map(str::to_owned)
        .collect()
}

/// Runs `cmd` with its output shown, within `limit`: `Ok` when it exits 0, else how it ended.
fn run_step(cmd: Command, limit: Duration) -> Result<(), String> {
    run_output(cmd, limit).map(drop).map_err(|(why, _)| why)
}

/// [`run_step`] that also returns what the command printed, either way.
fn run_output(cmd: Command, limit: Duration) -> Result<String, (String, String)> {
    match exec::run_tee(cmd, Some(limit), true) {
        Ok(outcome) if outcome.success() => Ok(outcome.output),
        Ok(outcome) => Err((outcome.describe(), outcome.output)),
        Err(e) => Err((format!("cannot start: {e}"), String::new())),
    }
}

/// The limit of one step: `XTASK_FRESH_STEP_TIMEOUT` seconds, default [`DEFAULT_STEP_TIMEOUT_S`].
fn step_limit() -> Duration {
    let secs = std::env::var("XTASK_FRESH_STEP_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&s| s > 0)
        .unwrap_or(DEFAULT_STEP_TIMEOUT_S);
    Duration::from_secs(secs)
}

/// Times `work` as one reported preparation step.
fn prepare(
    reports: &mut Vec<Report>,
    who: &'static str,
    step: &str,
    work: impl FnOnce() -> Result<String, String>,
) -> bool {
    println!("== fresh ({who}): {step} ==");
    let t0 = Instant::now();
    let result = work();
    let ok = result.is_ok();
    let result = result.unwrap_or_else(|e| format!("FAILED: {e}"));
    println!(
        "-- fresh ({who}): {step}: {result} ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    reports.push(Report {
        who,
        step: step.to_owned(),
        took: t0.elapsed(),
        result,
        readme: false,
        ok,
    });
    ok
}

/// The base root: reused when complete (and not `cold`), else made with debootstrap.
fn base(dir: &Path, cold: bool, limit: Duration) -> Result<String, String> {
    let base = dir.join("base");
    if !cold && base.join(BASE_DONE).is_file() {
        return Ok(format!("reused {}", base.display()));
    }
    remove_tree(&base)?;
    let partial = dir.join("base.partial");
    remove_tree(&partial)?;
    let mut cmd = Command::new("debootstrap");
    cmd.args(["--variant=minbase", SUITE])
        .arg(&partial)
        .arg(MIRROR);
    // SAFETY: only system calls between fork and exec (see `private_namespace`): the /proc
    // debootstrap mounts in the new root then never outlives it.
    unsafe {
        cmd.pre_exec(private_namespace);
    }
    run_step(cmd, limit).map_err(|e| format!("debootstrap: {e}"))?;
    std::fs::write(partial.join(BASE_DONE), "").map_err(|e| e.to_string())?;
    std::fs::rename(&partial, &base).map_err(|e| e.to_string())?;
    Ok(format!(
        "debootstrap --variant=minbase {SUITE} {}",
        base.display()
    ))
}

/// A new root: a copy of the base (`cp -a`), with the mount points the commands need.
fn new_root(dir: &Path, root: &Path, limit: Duration) -> Result<String, String> {
    remove_tree(root)?;
    let mut cmd = Command::new("cp");
    cmd.arg("-a").arg(dir.join("base")).arg(root);
    run_step(cmd, limit).map_err(|e| format!("cp -a: {e}"))?;
    for point in [
        "root/.rustup",
        "root/.cargo/bin",
        INNER_TARGET.trim_start_matches('/'),
    ] {
        std::fs::create_dir_all(root.join(point)).map_err(|e| e.to_string())?;
    }
    std::fs::remove_file(root.join(BASE_DONE)).map_err(|e| e.to_string())?;
    Ok(format!("cp -a base {}", root.display()))
}

/// What makes [`USER`] in a root: sudo (installed, then apt's lists dropped again, so that the
/// user's `apt-get update` is needed as on any fresh machine), the user with passwordless sudo,
/// the mount points in its home, and the checkout its own (git refuses another user's).
const USER_SETUP: &str = "set -e
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends sudo >/dev/null
apt-get clean
rm -rf /var/lib/apt/lists/*
useradd -m -s /bin/bash fresh
echo 'fresh ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/fresh
chmod 0440 /etc/sudoers.d/fresh
mkdir -p /home/fresh/.rustup /home/fresh/.cargo/bin
chown -R fresh:fresh /home/fresh /srv/collectives.git
";

/// Runs [`USER_SETUP`] in `root` and returns the user's uid and gid.
fn make_user(root: &Path, limit: Duration) -> Result<(libc::uid_t, libc::gid_t), String> {
    let cmd = Jail::bare(root)?.command(USER_SETUP, &[])?;
    run_step(cmd, limit).map_err(|e| format!("user set-up: {e}"))?;
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).map_err(|e| e.to_string())?;
    passwd_ids(&passwd, USER).ok_or_else(|| format!("no {USER} in the root's /etc/passwd"))
}

/// The uid and gid of `user` from the text of an `/etc/passwd`.
fn passwd_ids(passwd: &str, user: &str) -> Option<(libc::uid_t, libc::gid_t)> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&user) && fields.len() > 3)
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))?
    })
}

/// `git clone --bare` of the workspace into the root at [`CLONE_SOURCE`], `HEAD` detached at
/// the workspace's `HEAD`.
fn checkout(workspace: &Path, root: &Path, limit: Duration) -> Result<String, String> {
    let head = Command::new("git")
        .arg("-C")
        .arg(workspace)
        .args(["rev-parse", "HEAD"])
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !head.status.success() {
        return Err("git rev-parse HEAD failed".to_owned());
    }
    let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    let dest = root.join(CLONE_SOURCE.trim_start_matches('/'));
    let mut clone = Command::new("git");
    clone
        .args(["clone", "--bare", "--quiet"])
        .arg(workspace)
        .arg(&dest);
    run_step(clone, limit).map_err(|e| format!("git clone --bare: {e}"))?;
    let mut detach = Command::new("git");
    detach
        .arg("--git-dir")
        .arg(&dest)
        .args(["update-ref", "--no-deref", "HEAD", &head]);
    run_step(detach, limit).map_err(|e| format!("git update-ref HEAD: {e}"))?;
    let dirty = Command::new("git")
        .arg("-C")
        .arg(workspace)
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .is_ok_and(|o| !o.stdout.is_empty());
    Ok(format!(
        "HEAD {}{}",
        &head[..head.len().min(12)],
        if dirty {
            " (uncommitted changes are not in it)"
        } else {
            ""
        }
    ))
}

/// The README as committed at `HEAD`, which is what the root's clone holds.
fn committed_readme(workspace: &Path) -> Result<String, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(workspace)
        .args(["show", "HEAD:README.md"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err("git show HEAD:README.md failed".to_owned())
    }
}

/// The host's CA bundle, name settings (`resolv.conf`, `hosts`, `hostname`) and (with
/// `registry`) cargo registry into the root.
fn host_files(
    root: &Path,
    toolchain: &Toolchain,
    registry: bool,
    limit: Duration,
) -> Result<String, String> {
    let copy = |from: &Path, to: &Path| -> Result<(), String> {
        std::fs::create_dir_all(to.parent().unwrap_or(root)).map_err(|e| e.to_string())?;
        std::fs::copy(from, to)
            .map(|_| ())
            .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
    };
    let bundle = Path::new("/etc/ssl/certs/ca-certificates.crt");
    let mut done = Vec::new();
    if bundle.is_file() {
        copy(bundle, &root.join("etc/ssl/certs/ca-certificates.crt"))?;
        // update-ca-certificates (run when the README installs ca-certificates) rebuilds the
        // bundle from Debian's list and this directory: the host's store stays trusted.
        copy(
            bundle,
            &root.join("usr/local/share/ca-certificates/xtask-host-bundle.crt"),
        )?;
        done.push("CA bundle");
    }
    // The host's name resolves in the root as on any installed machine (sudo looks it up).
    for name in ["resolv.conf", "hosts", "hostname"] {
        let from = Path::new("/etc").join(name);
        if from.is_file() {
            let to = root.join("etc").join(name);
            let _ = std::fs::remove_file(&to);
            copy(&from, &to)?;
            done.push(name);
        }
    }
    let from = toolchain.cargo_home.join("registry");
    if registry && from.is_dir() {
        let mut cmd = Command::new("cp");
        cmd.arg("-a").arg(&from).arg(root.join("root/.cargo/"));
        run_step(cmd, limit).map_err(|e| format!("cp -a registry: {e}"))?;
        done.push("~/.cargo/registry");
    }
    Ok(format!("copied {}", done.join(", ")))
}

/// What every persona's run shares.
#[derive(Debug)]
struct Context {
    workspace: PathBuf,
    dir: PathBuf,
    toolchain: Toolchain,
    limit: Duration,
    cold: bool,
}

/// Runs the stage: the base, then the README's commands as each [`Persona`], each in a root of
/// its own. The tally has one check per command run (and per command left unrun after a failure,
/// as a failure) and one failure per failed preparation; `None` when skipped (after one printed
/// line). `reports` receives every step.
pub fn stage(options: Options, reports: &mut Vec<Report>) -> Option<Tally> {
    let workspace = workspace_root();
    let dir = workspace.join(DIR);
    if let Some(why) = why_not(&dir, options.cold) {
        println!("fresh Debian root skipped: {why}");
        return None;
    }
    let mut tally = Tally::default();
    let commands = match committed_readme(&workspace).and_then(|text| readme_commands(&text)) {
        Ok(commands) => commands,
        Err(e) => {
            tally.fail(1, format!("fresh: {e}"));
            return Some(tally);
        }
    };
    let context = Context {
        toolchain: Toolchain::from_env()?,
        limit: step_limit(),
        cold: options.cold,
        workspace,
        dir,
    };
    let based = std::fs::create_dir_all(&context.dir).is_ok()
        && prepare(
            reports,
            "host",
            "base: debootstrap --variant=minbase",
            || base(&context.dir, context.cold, context.limit),
        );
    if !based {
        tally.fail(1, "fresh: no base root (see the base step)");
        return Some(tally);
    }
    for persona in Persona::ALL {
        if options.only.is_some_and(|only| only != persona) {
            continue;
        }
        tally.absorb(run_as(persona, &context, &commands, reports));
    }
    Some(tally)
}

/// The preparation of `persona`'s root, then its commands.
fn run_as(
    persona: Persona,
    ctx: &Context,
    commands: &[String],
    reports: &mut Vec<Report>,
) -> Tally {
    let who = persona.label();
    let mut tally = Tally::default();
    let root = ctx.dir.join(persona.dir_name());
    let target = ctx.dir.join("target");
    let mut ids = None;
    let prepared = prepare(reports, who, "a copy of the base", || {
        new_root(&ctx.dir, &root, ctx.limit)
    }) && prepare(reports, who, "checkout: git clone --bare HEAD", || {
        checkout(&ctx.workspace, &root, ctx.limit)
    }) && prepare(reports, who, "host files", || {
        host_files(&root, &ctx.toolchain, persona == Persona::Root, ctx.limit)
    }) && match persona {
        Persona::Root => prepare(reports, who, "inner target directory", || {
            if ctx.cold {
                remove_tree(&target)?;
            }
            std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
            Ok(format!(
                "{} (CARGO_TARGET_DIR={INNER_TARGET})",
                target.display()
            ))
        }),
        Persona::SudoUser => prepare(reports, who, "sudo and a user with it", || {
            let made = make_user(&root, ctx.limit)?;
            ids = Some(made);
            Ok(format!("user {USER} (uid {}), NOPASSWD sudo", made.0))
        }),
    };
    let jail = if prepared {
        let target = (persona == Persona::Root).then_some(target.as_path());
        Jail::new(&root, persona, &ctx.toolchain, target, ids)
    } else {
        Err("see the preparation steps".to_owned())
    };
    let jail = match jail {
        Ok(jail) => jail,
        Err(e) => {
            tally.fail(1, format!("fresh ({who}): not prepared: {e}"));
            return tally;
        }
    };
    // A user runs the commands up to `cargo xtask deps`, which prints the command it cannot run
    // itself; that command, then `deps` again. root runs them all.
    let mut steps: Vec<String> = match persona {
        Persona::Root => commands.to_vec(),
        Persona::SudoUser => {
            let deps = commands
                .iter()
                .position(|c| c == DEPS)
                .map_or(commands.len(), |i| i + 1);
            commands[..deps].to_vec()
        }
    };
    let cwd_file = root.join("tmp/.xtask-fresh-cwd");
    let mut cwd = persona.home().to_owned();
    let script =
        "cd \"$1\" || exit 1\neval \"$2\"\nstatus=$?\npwd > /tmp/.xtask-fresh-cwd\nexit $status\n";
    let readme_steps = steps.len();
    let mut i = 0;
    while i < steps.len() {
        let typed = persona.typed(&steps[i]);
        let shown = format!("fresh ({who}): step {}: {typed}", i + 1);
        println!("== {shown} ==");
        let _ = std::fs::remove_file(&cwd_file);
        let t0 = Instant::now();
        let ran = jail
            .command(script, &[&cwd, &typed])
            .map_err(|e| (e, String::new()))
            .and_then(|cmd| run_output(cmd, ctx.limit));
        let took = t0.elapsed();
        if let Ok(dir) = std::fs::read_to_string(&cwd_file) {
            if !dir.trim().is_empty() {
                cwd = dir.trim().to_owned();
            }
        }
        // A user's first `deps` may fail, as the README says, printing what to run with sudo.
        let printed = match (&ran, persona) {
            (Err((_, output)), Persona::SudoUser) if steps[i] == DEPS && i + 1 == readme_steps => {
                printed_install(output)
            }
            _ => None,
        };
        let (ok, result) = match (&ran, &printed) {
            (Ok(_), _) => (true, "ok".to_owned()),
            (Err((why, _)), Some(line)) => {
                (true, format!("{why}, printing `{line}` as the README says"))
            }
            (Err((why, _)), None) => (false, format!("FAILED: {why}")),
        };
        println!("-- {shown}: {result} ({:.1} s)", took.as_secs_f64());
        reports.push(Report {
            who,
            step: typed.clone(),
            took,
            result: result.clone(),
            readme: true,
            ok,
        });
        if !ok {
            tally.fail(1, format!("fresh ({who}): `{typed}`: {result}"));
            // Later commands build on this one: each of them fails too, unrun.
            for later in &steps[i + 1..] {
                tally.fail(1, format!("fresh ({who}): `{later}`: not run"));
            }
            break;
        }
        tally.pass(1);
        if let Some(line) = printed {
            steps.push(line);
            steps.push(DEPS.to_owned());
        }
        i += 1;
    }
    tally
}

/// The README's command that checks and installs the system dependencies.
pub const DEPS: &str = "cargo xtask deps";

/// The install command of the required packages that `cargo xtask deps` printed (`sudo apt-get
/// update && sudo apt-get install -y ...`, on the line after "install them with:"). It may also
/// print one for the optional programs, and its error (standard error) and its table (standard
/// output) can arrive in either order, so the command is found by the line before it, not by
/// its place.
fn printed_install(output: &str) -> Option<String> {
    let lines: Vec<&str> = output.lines().map(str::trim).collect();
    lines
        .windows(2)
        .find(|pair| {
            pair[0].ends_with("install them with:")
                && pair[1].starts_with("sudo apt-get update && sudo apt-get install -y ")
        })
        .map(|pair| pair[1].to_owned())
}

/// `cargo xtask fresh [--cold] [--as root|user]`.
pub fn run(args: &[String]) -> ExitCode {
    let options = match parse_args(args) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("xtask fresh: {e}\n(see `cargo xtask help`)");
            return ExitCode::from(2);
        }
    };
    let t0 = Instant::now();
    let mut reports = Vec::new();
    let Some(tally) = stage(options, &mut reports) else {
        return ExitCode::SUCCESS;
    };
    println!("\n== fresh Debian root ({SUITE}, minbase): README set-up ==");
    print!("{}", render_reports(&reports));
    println!("total {:.1} s", t0.elapsed().as_secs_f64());
    for failure in &tally.failures {
        println!("  {failure}");
    }
    println!("{}", tally.line());
    if tally.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_set_up_is_read_from_its_sh_blocks() {
        let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
        let commands = readme_commands(&readme).unwrap();
        assert!(
            commands[0].starts_with("apt-get update && apt-get install -y gcc git"),
            "{commands:?}"
        );
        assert!(commands.iter().any(|c| c.contains(REPOSITORY_PLACEHOLDER)));
        assert!(commands.contains(&"cargo xtask deps".to_owned()));
        assert_eq!(
            commands.last().map(String::as_str),
            Some("cargo xtask test")
        );
    }

    #[test]
    fn comments_blocks_and_sections_are_told_apart() {
        let readme = "\
## Other\n```sh\nnot this\n```\n\
## Set up, benchmark, test\ntext\n```sh\n\
apt-get install -y gcc       # or build-essential\n\
git clone <this repository> x && cd x\n\
                      # a comment line\n\
echo a#b\n```\n```rust\nfn main() {}\n```\n```sh\ncargo xtask test\n```\n\
## Next\n```sh\nnor this\n```\n";
        assert_eq!(
            readme_commands(readme).unwrap(),
            [
                "apt-get install -y gcc",
                "git clone <this repository> x && cd x",
                "echo a#b",
                "cargo xtask test"
            ]
        );
        assert_eq!(
            Persona::Root.typed("git clone <this repository> x"),
            "git clone /srv/collectives.git x"
        );
        assert_eq!(
            Persona::SudoUser.typed("apt-get update && apt-get install -y gcc"),
            "sudo apt-get update && sudo apt-get install -y gcc"
        );
        assert_eq!(
            Persona::SudoUser.typed("sudo apt-get update"),
            "sudo apt-get update"
        );
        assert!(readme_commands("## Set up, benchmark, test\nno blocks\n").is_err());
        assert!(readme_commands("# nothing\n").is_err());
    }

    #[test]
    fn the_command_deps_prints_and_the_users_ids_are_read() {
        let output =
            "MISSING xz  no `xz` on PATH\nxtask: not running as root; install them with:\n  \
                      sudo apt-get update && sudo apt-get install -y xz-utils libclang-dev\n";
        assert_eq!(
            printed_install(output).as_deref(),
            Some("sudo apt-get update && sudo apt-get install -y xz-utils libclang-dev")
        );
        assert_eq!(printed_install("all system dependencies present\n"), None);
        // The error first, the optional programs' command last (as seen in CI's output).
        let interleaved = "xtask: not running as root; install them with:\n  \
                           sudo apt-get update && sudo apt-get install -y xz-utils\n\
                           absent  ip  no `ip` on PATH\n\
                           optional programs absent (their stages are skipped); to add them:\n  \
                           sudo apt-get update && sudo apt-get install -y iproute2\n";
        assert_eq!(
            printed_install(interleaved).as_deref(),
            Some("sudo apt-get update && sudo apt-get install -y xz-utils")
        );
        let passwd = "root:x:0:0:root:/root:/bin/bash\nfresh:x:1000:1001::/home/fresh:/bin/bash\n";
        assert_eq!(passwd_ids(passwd, "fresh"), Some((1000, 1001)));
        assert_eq!(passwd_ids(passwd, "nobody"), None);
    }

    #[test]
    fn mounts_under_a_directory_are_found() {
        let mountinfo = "\
22 1 8:1 / / rw - ext4 /dev/vda rw\n\
90 22 0:5 / /work/t/fresh/root/dev rw - devtmpfs udev rw\n\
91 22 0:6 / /work/t/fresh/rootfs rw - tmpfs x rw\n";
        assert_eq!(
            mounts_under(mountinfo, Path::new("/work/t/fresh/root")),
            ["/work/t/fresh/root/dev"]
        );
        assert!(mounts_under(mountinfo, Path::new("/elsewhere")).is_empty());
    }

    #[test]
    fn reports_render_as_a_table() {
        let reports = [
            Report {
                who: "host",
                step: "base: debootstrap --variant=minbase".into(),
                took: Duration::from_millis(1),
                result: "reused target/fresh/base".into(),
                readme: false,
                ok: true,
            },
            Report {
                who: "root",
                step: "cargo xtask deps".into(),
                took: Duration::from_millis(24_250),
                result: "ok".into(),
                readme: true,
                ok: true,
            },
        ];
        assert_eq!(
            render_reports(&reports),
            "| as | step | time | result |\n|---|---|---|---|\n\
             | host | base: debootstrap --variant=minbase | 0.0 s | reused target/fresh/base |\n\
             | root | `cargo xtask deps` | 24.2 s | ok |\n"
        );
    }

    #[test]
    fn options() {
        let args = |a: &[&str]| parse_args(&a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
        assert_eq!(args(&[]).unwrap(), Options::default());
        assert!(args(&["--cold"]).unwrap().cold);
        assert_eq!(
            args(&["--as", "user"]).unwrap().only,
            Some(Persona::SudoUser)
        );
        assert_eq!(args(&["--as", "root"]).unwrap().only, Some(Persona::Root));
        for bad in [&["-x"][..], &["--as"], &["--as", "nobody"]] {
            assert!(args(bad).is_err(), "{bad:?}");
        }
    }
}
