//! `cargo xtask fresh`: the README's set-up, word for word, on a minimal Debian 12 root, as a
//! new user would run it; also a stage of `cargo xtask test`.
//!
//! | step | what |
//! |---|---|
//! | base | `debootstrap --variant=minbase bookworm` into `target/fresh/base/`, once: reruns reuse it |
//! | root | a copy of the base, `target/fresh/root/`, made again on every run: apt starts from nothing |
//! | checkout | `git clone --bare` of this checkout at `HEAD` as `/srv/collectives.git` in the root: the README's `<this repository>` |
//! | CA store | the host's `/etc/ssl/certs/ca-certificates.crt`, also under `/usr/local/share/ca-certificates/`, so that the root trusts what the host trusts even after installing `ca-certificates` |
//! | toolchain | the host's rustup home and `~/.cargo/bin` mounted read-only at `/root/.rustup`, `/root/.cargo/bin`; `~/.cargo/registry` copied (no crate downloaded twice) |
//! | README | every command of the README's set-up blocks, in order, as root in the root, each with its time and result |
//!
//! Each command runs in a mount namespace of its own (unshare(2) in the child before it execs),
//! with `/proc`, `/sys` and `/dev` mounted into the root and chroot(2) into it: the mounts exist
//! only while the command runs and vanish with it, however it ends, so nothing ever stays mounted
//! under `target/`. The build inside uses `CARGO_TARGET_DIR=/var/cache/xtask-target`, kept in
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

/// `PATH` inside the root: rustup's proxies first, as rustup's installer sets it.
const INNER_PATH: &str =
    "/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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

/// The command line of `cargo xtask fresh`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// Build the base and the inner target directory afresh instead of reusing them.
    pub cold: bool,
}

/// Parses the arguments after `fresh`.
///
/// # Errors
/// A message naming the bad argument.
pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut options = Options::default();
    for arg in args {
        match arg.as_str() {
            "--cold" => options.cold = true,
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

/// `command` as it runs in the root: the placeholder replaced by [`CLONE_SOURCE`].
pub fn in_root(command: &str) -> String {
    command.replace(REPOSITORY_PLACEHOLDER, CLONE_SOURCE)
}

/// One reported step: what ran, how long it took, how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The step: a README command as written, or a preparation step.
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

/// The steps as a Markdown table: `| step | time | result |`.
pub fn render_reports(reports: &[Report]) -> String {
    let mut out = String::from("| step | time | result |\n|---|---|---|\n");
    for r in reports {
        let step = if r.readme {
            format!("`{}`", r.step)
        } else {
            r.step.clone()
        };
        out.push_str(&format!(
            "| {step} | {:.1} s | {} |\n",
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

/// Everything a command in the root needs: the root, what to mount into it, where to start.
#[derive(Debug)]
struct Jail {
    root: PathBuf,
    mounts: Vec<Mount>,
}

impl Jail {
    fn new(root: &Path, toolchain: &Toolchain, target: &Path) -> Result<Self, String> {
        let inside = |p: &str| root.join(p.trim_start_matches('/'));
        let mounts = vec![
            Mount::fs("proc", &inside("/proc"))?,
            Mount::fs("sysfs", &inside("/sys"))?,
            Mount::bind(Path::new("/dev"), &inside("/dev"), false)?,
            Mount::bind(&toolchain.rustup_home, &inside("/root/.rustup"), true)?,
            Mount::bind(
                &toolchain.cargo_home.join("bin"),
                &inside("/root/.cargo/bin"),
                true,
            )?,
            Mount::bind(target, &inside(INNER_TARGET), false)?,
        ];
        Ok(Jail {
            root: root.to_path_buf(),
            mounts,
        })
    }

    /// `sh -c SCRIPT sh ARGS...` run as root in the root, in a namespace of its own.
    fn command(&self, script: &str, args: &[&str]) -> Result<Command, String> {
        let root = c_path(&self.root)?;
        let mounts = self.mounts.clone();
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script).arg("sh").args(args);
        cmd.env_clear()
            .env("HOME", "/root")
            .env("PATH", INNER_PATH)
            .env("LANG", "C.UTF-8")
            .env(INSIDE_VAR, "1")
            .env("CARGO_TARGET_DIR", INNER_TARGET);
        for var in PASSED_ON {
            if let Some(value) = std::env::var_os(var) {
                cmd.env(var, value);
            }
        }
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
            Ok(())
        };
        // SAFETY: `enter` makes only system calls (unshare, mount, chroot, chdir) on strings
        // prepared before the fork; it allocates nothing, as is required between fork and exec.
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
    match exec::run_tee(cmd, Some(limit), true) {
        Ok(outcome) if outcome.success() => Ok(()),
        Ok(outcome) => Err(outcome.describe()),
        Err(e) => Err(format!("cannot start: {e}")),
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
    step: &str,
    work: impl FnOnce() -> Result<String, String>,
) -> bool {
    println!("== fresh: {step} ==");
    let t0 = Instant::now();
    let result = work();
    let ok = result.is_ok();
    let result = result.unwrap_or_else(|e| format!("FAILED: {e}"));
    println!(
        "-- fresh: {step}: {result} ({:.1} s)",
        t0.elapsed().as_secs_f64()
    );
    reports.push(Report {
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
fn new_root(dir: &Path, limit: Duration) -> Result<String, String> {
    let root = dir.join("root");
    remove_tree(&root)?;
    let mut cmd = Command::new("cp");
    cmd.arg("-a").arg(dir.join("base")).arg(&root);
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

/// The host's CA bundle, DNS settings and cargo registry into the root.
fn host_files(root: &Path, toolchain: &Toolchain, limit: Duration) -> Result<String, String> {
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
    let resolv = Path::new("/etc/resolv.conf");
    if resolv.is_file() {
        let to = root.join("etc/resolv.conf");
        let _ = std::fs::remove_file(&to);
        copy(resolv, &to)?;
        done.push("resolv.conf");
    }
    let registry = toolchain.cargo_home.join("registry");
    if registry.is_dir() {
        let mut cmd = Command::new("cp");
        cmd.arg("-a").arg(&registry).arg(root.join("root/.cargo/"));
        run_step(cmd, limit).map_err(|e| format!("cp -a registry: {e}"))?;
        done.push("~/.cargo/registry");
    }
    Ok(format!("copied {}", done.join(", ")))
}

/// Runs the stage: prepares the root, then the README's commands in it. The tally has one check
/// per README command and one failure for a failed preparation; `None` when skipped (after one
/// printed line). `reports` receives every step.
pub fn stage(options: Options, reports: &mut Vec<Report>) -> Option<Tally> {
    let workspace = workspace_root();
    let dir = workspace.join(DIR);
    if let Some(why) = why_not(&dir, options.cold) {
        println!("fresh Debian root skipped: {why}");
        return None;
    }
    let mut tally = Tally::default();
    let limit = step_limit();
    let toolchain = Toolchain::from_env()?;
    let commands = match std::fs::read_to_string(workspace.join("README.md"))
        .map_err(|e| format!("cannot read README.md: {e}"))
        .and_then(|text| readme_commands(&text))
    {
        Ok(commands) => commands,
        Err(e) => {
            tally.fail(1, format!("fresh: {e}"));
            return Some(tally);
        }
    };
    let target = dir.join("target");
    let root = dir.join("root");
    let prepared = std::fs::create_dir_all(&dir).is_ok()
        && prepare(reports, "base: debootstrap --variant=minbase", || {
            base(&dir, options.cold, limit)
        })
        && prepare(reports, "root: a copy of the base", || {
            new_root(&dir, limit)
        })
        && prepare(reports, "checkout: git clone --bare HEAD", || {
            checkout(&workspace, &root, limit)
        })
        && prepare(
            reports,
            "host CA store, resolv.conf, cargo registry",
            || host_files(&root, &toolchain, limit),
        )
        && prepare(reports, "inner target directory", || {
            if options.cold {
                remove_tree(&target)?;
            }
            std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
            Ok(format!(
                "{} (CARGO_TARGET_DIR={INNER_TARGET})",
                target.display()
            ))
        });
    if !prepared {
        let failed = reports.iter().rfind(|r| !r.ok).map(|r| r.step.clone());
        tally.fail(
            1,
            format!(
                "fresh: {}",
                failed.unwrap_or_else(|| "cannot create target/fresh".into())
            ),
        );
        return Some(tally);
    }
    let jail = match Jail::new(&root, &toolchain, &target) {
        Ok(jail) => jail,
        Err(e) => {
            tally.fail(1, format!("fresh: {e}"));
            return Some(tally);
        }
    };
    // Each command starts where the one before it left off (`cd collectives`).
    let cwd_file = root.join("tmp/.xtask-fresh-cwd");
    let mut cwd = "/root".to_owned();
    let script =
        "cd \"$1\" || exit 1\neval \"$2\"\nstatus=$?\npwd > /tmp/.xtask-fresh-cwd\nexit $status\n";
    for (i, command) in commands.iter().enumerate() {
        let shown = format!("fresh: README step {}/{}: {command}", i + 1, commands.len());
        println!("== {shown} ==");
        let t0 = Instant::now();
        let result = jail
            .command(script, &[&cwd, &in_root(command)])
            .and_then(|cmd| run_step(cmd, limit));
        let took = t0.elapsed();
        if let Ok(dir) = std::fs::read_to_string(&cwd_file) {
            if !dir.trim().is_empty() {
                cwd = dir.trim().to_owned();
            }
        }
        let ok = result.is_ok();
        let result = match result {
            Ok(()) => "ok".to_owned(),
            Err(e) => format!("FAILED: {e}"),
        };
        println!("-- {shown}: {result} ({:.1} s)", took.as_secs_f64());
        reports.push(Report {
            step: command.clone(),
            took,
            result: result.clone(),
            readme: true,
            ok,
        });
        if ok {
            tally.pass(1);
        } else {
            tally.fail(1, format!("fresh root: `{command}`: {result}"));
            // Later commands build on this one: each of them fails too, unrun.
            for later in &commands[i + 1..] {
                tally.fail(1, format!("fresh root: `{later}`: not run"));
            }
            break;
        }
    }
    Some(tally)
}

/// `cargo xtask fresh [--cold]`.
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
            in_root("git clone <this repository> x"),
            "git clone /srv/collectives.git x"
        );
        assert!(readme_commands("## Set up, benchmark, test\nno blocks\n").is_err());
        assert!(readme_commands("# nothing\n").is_err());
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
                step: "base: debootstrap --variant=minbase".into(),
                took: Duration::from_millis(1),
                result: "reused target/fresh/base".into(),
                readme: false,
                ok: true,
            },
            Report {
                step: "cargo xtask deps".into(),
                took: Duration::from_millis(24_250),
                result: "ok".into(),
                readme: true,
                ok: true,
            },
        ];
        assert_eq!(
            render_reports(&reports),
            "| step | time | result |\n|---|---|---|\n\
             | base: debootstrap --variant=minbase | 0.0 s | reused target/fresh/base |\n\
             | `cargo xtask deps` | 24.2 s | ok |\n"
        );
    }

    #[test]
    fn options() {
        assert_eq!(parse_args(&[]).unwrap(), Options { cold: false });
        assert!(parse_args(&["--cold".to_owned()]).unwrap().cold);
        assert!(parse_args(&["-x".to_owned()]).is_err());
    }
}
