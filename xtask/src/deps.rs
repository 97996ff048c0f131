//! System dependencies, declared in one place: [`PROGRAMS`], every external program xtask starts
//! (or that the builds it runs need), with the Debian package that provides it and whether it is
//! required or only used by some stages; and the libraries behind two of them, Open MPI's headers
//! (for `mpi-sys`) and libclang (for bindgen). Finds them, and installs what is missing with
//! apt-get when running as root, or prints the exact command.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use crate::host;

/// Where a program comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A Debian/Ubuntu package, which `deps` installs with apt-get.
    Apt(&'static str),
    /// Somewhere apt does not reach (rustup, the NVIDIA driver): `deps` only reports it.
    Elsewhere(&'static str),
}

/// Whether a program must be there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Without it `deps` fails (and so do `test` and `bench`, which run `deps` first).
    Required,
    /// Only the stages in [`Program::used_by`] use it; without it they are skipped with one
    /// printed line. `deps` installs it as root where apt has it, and otherwise only says so.
    Optional,
}

/// One external program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Program {
    /// The name it is started by, found on `PATH`.
    pub name: &'static str,
    /// Arguments it must exit 0 with to count as present (for a module of it, such as python3's
    /// `venv`); empty when being on `PATH` is enough.
    pub works_with: &'static [&'static str],
    /// Where it comes from.
    pub source: Source,
    /// Whether it is required.
    pub need: Need,
    /// The subcommands and stages that run it.
    pub used_by: &'static str,
}

/// A row of [`PROGRAMS`] found by being on `PATH`.
const fn program(name: &'static str, source: Source, need: Need, used_by: &'static str) -> Program {
    Program {
        name,
        works_with: &[],
        source,
        need,
        used_by,
    }
}

use Need::{Optional, Required};
use Source::{Apt, Elsewhere};

/// Every external program xtask starts, and those the README's set-up and the builds need. One row
/// per program; a unit test fails when xtask's sources start a program by a name not in here.
/// Rows for programs of the same package stay separate: each is checked on its own.
#[rustfmt::skip]
pub const PROGRAMS: &[Program] = &[
    // name                 source                                need      used by
    program("cargo",        Elsewhere("rustup"),                  Required, "everything"),
    program("rustfmt",      Elsewhere("rustup (rustfmt component)"), Optional, "nccl-bindings"),
    program("cc",           Apt("gcc"),                           Required, "every build (Rust links through it)"),
    program("git",          Apt("git"),                           Required, "the README's set-up, fresh"),
    program("sh",           Apt("dash"),                          Required, "test (xtask's unit tests), fresh"),
    program("bash",         Apt("bash"),                          Required, "gpu-stage's run-all.sh"),
    program("sleep",        Apt("coreutils"),                     Required, "test (xtask's unit tests)"),
    program("cp",           Apt("coreutils"),                     Required, "fresh"),
    program("apt-get",      Apt("apt"),                           Required, "deps (as root)"),
    program("mpicc",        Apt("libopenmpi-dev"),                Required, "every build (mpi-sys)"),
    program("mpirun",       Apt("openmpi-bin"),                   Required, "test, bench, fuzz, gpu-suite"),
    program("strip",        Apt("binutils"),                      Required, "gpu-stage"),
    program("nm",           Apt("binutils"),                      Required, "test (the interposer's exports)"),
    program("xz",           Apt("xz-utils"),                      Required, "gpu-stage, run-all.sh"),
    program("nvidia-smi",   Elsewhere("the NVIDIA driver"),       Optional, "GPU suite (detection, peer access)"),
    program("compute-sanitizer", Elsewhere("the CUDA toolkit"),   Optional, "GPU suite (sanitizer runs)"),
    program("nvcc",         Elsewhere("the CUDA toolkit"),        Optional, "interpose --device (where CUDA is)"),
    program("debootstrap",  Apt("debootstrap"),                   Optional, "fresh"),
    program("python3",      Apt("python3"),                       Optional, "python"),
    Program {
        works_with: &["-c", "import ensurepip, venv"],
        ..program("python3",Apt("python3-venv"),                  Optional, "python (python3 -m venv)")
    },
    program("ip",           Apt("iproute2"),                      Optional, "namespaces"),
    program("unshare",      Apt("util-linux"),                    Optional, "namespaces (the nodes' rsh agent)"),
    program("munge",        Apt("munge"),                         Optional, "slurm"),
    program("slurmctld",    Apt("slurmctld"),                     Optional, "slurm"),
    program("slurmd",       Apt("slurmd"),                        Optional, "slurm"),
    program("srun",         Apt("slurm-client"),                  Optional, "slurm"),
];

/// The first row of [`PROGRAMS`] named `name`.
///
/// # Panics
/// When there is none: every program xtask starts must be declared there.
pub fn declared(name: &str) -> &'static Program {
    PROGRAMS
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("`{name}` is not declared in deps::PROGRAMS"))
}

impl Program {
    /// `xz (xz-utils)`, `nvidia-smi (from the NVIDIA driver)`.
    pub fn describe(&self) -> String {
        let what = if self.works_with.is_empty() {
            self.name.to_owned()
        } else {
            format!("{} {}", self.name, self.works_with.join(" "))
        };
        match self.source {
            Apt(package) => format!("`{what}` ({package})"),
            Elsewhere(from) => format!("`{what}` (from {from})"),
        }
    }

    /// Where it is on `path`, if it is there and (with [`Program::works_with`]) works.
    ///
    /// # Errors
    /// Why it does not count as present.
    pub fn find(&self, path: &OsStr) -> Result<PathBuf, String> {
        let found =
            host::which(self.name, path).ok_or_else(|| format!("no `{}` on PATH", self.name))?;
        if !self.works_with.is_empty() {
            let ok = Command::new(&found)
                .args(self.works_with)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                return Err(format!(
                    "`{} {}` fails",
                    self.name,
                    self.works_with.join(" ")
                ));
            }
        }
        Ok(found)
    }
}

/// The marker that starts the line a test prints when it is skipped for want of a program;
/// `results::tally_cargo_test` counts such tests as skipped, not passed.
pub const SKIP_MARKER: &str = "xtask-skipped: ";

/// `program` (declared in [`PROGRAMS`]) on this process's `PATH`; when it is not there, prints one
/// line straight to stderr (libtest does not capture it), for instance
/// ``xtask-skipped: TEST: no `xz` on PATH; `xz` (xz-utils) is used by gpu-stage, run-all.sh``,
/// and returns `None`, for the test to return early.
#[cfg(test)]
pub fn find_or_skip(program: &str, test: &str) -> Option<PathBuf> {
    use std::io::Write as _;
    let row = declared(program);
    match row.find(&std::env::var_os("PATH").unwrap_or_default()) {
        Ok(path) => Some(path),
        Err(why) => {
            let _ = writeln!(
                std::io::stderr(),
                "{SKIP_MARKER}{test}: {why}; {} is used by {}",
                row.describe(),
                row.used_by
            );
            None
        }
    }
}

/// One system dependency checked more closely than by finding a program: the MPI headers behind
/// `mpicc`, `mpirun`'s flavour, libclang.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dep {
    /// `mpicc` and the `mpi.h` it compiles against.
    MpiHeaders,
    /// `mpirun`.
    MpiRuntime,
    /// `libclang.so`, loaded by bindgen.
    Libclang,
}

impl Dep {
    /// Every dependency, in the order they are checked and installed.
    pub const ALL: [Dep; 3] = [Dep::MpiHeaders, Dep::MpiRuntime, Dep::Libclang];

    /// How the dependency is named in messages.
    pub fn name(self) -> &'static str {
        match self {
            Dep::MpiHeaders => "MPI headers",
            Dep::MpiRuntime => "mpirun",
            Dep::Libclang => "libclang",
        }
    }

    /// The program of [`PROGRAMS`] this check covers, if any (its row is then not checked again).
    pub fn program(self) -> Option<&'static str> {
        match self {
            Dep::MpiHeaders => Some("mpicc"),
            Dep::MpiRuntime => Some("mpirun"),
            Dep::Libclang => None,
        }
    }

    /// The Debian/Ubuntu package that provides it: its program's, from [`PROGRAMS`].
    pub fn apt_package(self) -> &'static str {
        match self.program().map(|name| declared(name).source) {
            Some(Apt(package)) => package,
            // A library, not a program.
            _ => "libclang-dev",
        }
    }
}

/// Where to look: the parts of the environment the checks read, so tests can change them.
#[derive(Debug, Clone)]
pub struct Probe {
    /// A `PATH` value in which to find `mpicc` and `mpirun`.
    pub path: OsString,
    /// `LIBCLANG_PATH`: when set, the only place libclang is looked for (as bindgen does).
    pub libclang_path: Option<OsString>,
    /// Directories searched for libclang when `LIBCLANG_PATH` is not set.
    pub lib_dirs: Vec<PathBuf>,
}

impl Probe {
    /// The probe for this process's environment.
    pub fn from_env() -> Self {
        Probe {
            path: std::env::var_os("PATH").unwrap_or_default(),
            libclang_path: std::env::var_os("LIBCLANG_PATH").filter(|p| !p.is_empty()),
            lib_dirs: system_lib_dirs(),
        }
    }
}

/// `/usr/lib/llvm-*/lib` (newest version first), then the multiarch and plain library directories.
fn system_lib_dirs() -> Vec<PathBuf> {
    let mut llvm: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version = name.strip_prefix("llvm-")?;
            let key = version.split('.').filter_map(|p| p.parse().ok()).collect();
            Some((key, entry.path().join("lib")))
        })
        .collect();
    llvm.sort_by(|a, b| b.0.cmp(&a.0));
    let mut dirs: Vec<PathBuf> = llvm.into_iter().map(|(_, dir)| dir).collect();
    let mut multiarch: Vec<PathBuf> = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with("-linux-gnu"))
        .map(|e| e.path())
        .collect();
    multiarch.sort();
    dirs.extend(multiarch);
    dirs.extend(["/usr/lib", "/usr/lib64", "/usr/local/lib"].map(PathBuf::from));
    dirs
}

/// What the checks found: a description of each present dependency, a reason for each missing one.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Present dependencies with what was found (paths, version).
    pub found: Vec<(Dep, String)>,
    /// Missing dependencies with why they count as missing.
    pub missing: Vec<(Dep, String)>,
    /// Every row of [`PROGRAMS`] not covered by a [`Dep`], with where it was found or why not.
    pub programs: Vec<(&'static Program, Result<PathBuf, String>)>,
    /// Things that work but may surprise (an MPI other than Open MPI).
    pub notes: Vec<String>,
    /// Whether `LIBCLANG_PATH` chose where libclang must be, so that installing it cannot help.
    pub libclang_pinned: bool,
}

impl Report {
    /// Prints one line per dependency and program (`found`, `MISSING` for a required one,
    /// `absent` for an optional one), then the notes.
    pub fn print(&self) {
        for dep in Dep::ALL {
            if let Some((_, detail)) = self.found.iter().find(|(d, _)| *d == dep) {
                println!("found   {:<17} {detail}", dep.name());
            }
            if let Some((_, why)) = self.missing.iter().find(|(d, _)| *d == dep) {
                println!("MISSING {:<17} {why}", dep.name());
            }
        }
        for (program, found) in &self.programs {
            let name = match (program.works_with, program.source) {
                ([], _) => program.name.to_owned(),
                (_, Apt(package) | Elsewhere(package)) => format!("{} ({package})", program.name),
            };
            match (found, program.need) {
                (Ok(path), _) => println!("found   {name:<17} {}", path.display()),
                (Err(why), Required) => {
                    println!("MISSING {name:<17} {why}: {}", program.describe());
                }
                (Err(why), Optional) => println!(
                    "absent  {name:<17} {why}: {} (optional; {} is skipped without it)",
                    program.describe(),
                    program.used_by
                ),
            }
        }
        for note in &self.notes {
            println!("note: {note}");
        }
    }

    /// The apt packages that would provide what is missing and required, each once.
    pub fn packages(&self) -> Vec<&'static str> {
        let deps = self
            .missing
            .iter()
            .filter(|(d, _)| !(*d == Dep::Libclang && self.libclang_pinned))
            .map(|(d, _)| d.apt_package());
        unique(deps.chain(self.program_packages(Required)))
    }

    /// The apt packages of the optional programs that are absent, each once.
    pub fn optional_packages(&self) -> Vec<&'static str> {
        unique(self.program_packages(Optional))
    }

    /// Required programs that are missing and that apt cannot bring (`cargo`): `describe()`d.
    pub fn not_from_apt(&self) -> Vec<String> {
        self.programs
            .iter()
            .filter(|(p, found)| found.is_err() && p.need == Required)
            .filter(|(p, _)| matches!(p.source, Elsewhere(_)))
            .map(|(p, _)| p.describe())
            .collect()
    }

    /// Whether everything required is there.
    pub fn complete(&self) -> bool {
        self.missing.is_empty()
            && self
                .programs
                .iter()
                .all(|(p, found)| found.is_ok() || p.need == Optional)
    }

    fn program_packages(&self, need: Need) -> impl Iterator<Item = &'static str> + '_ {
        self.programs
            .iter()
            .filter(move |(p, found)| found.is_err() && p.need == need)
            .filter_map(|(p, _)| match p.source {
                Apt(package) => Some(package),
                Elsewhere(_) => None,
            })
    }
}

/// `items` without repeats, in order.
fn unique(items: impl Iterator<Item = &'static str>) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// Checks every dependency.
pub fn check(probe: &Probe) -> Report {
    let mut report = Report {
        libclang_pinned: probe.libclang_path.is_some(),
        ..Report::default()
    };
    let mut record = |dep: Dep, result: Result<String, String>| match result {
        Ok(detail) => report.found.push((dep, detail)),
        Err(why) => report.missing.push((dep, why)),
    };
    record(Dep::MpiHeaders, check_mpi_headers(&probe.path));
    let mut note = None;
    record(
        Dep::MpiRuntime,
        check_mpirun(&probe.path).map(|(detail, open_mpi)| {
            if !open_mpi {
                note = Some(
                    "mpirun is not Open MPI's; `cargo xtask test` passes Open MPI flags \
                     (--oversubscribe, --allow-run-as-root)"
                        .to_owned(),
                );
            }
            detail
        }),
    );
    record(
        Dep::Libclang,
        check_libclang(probe.libclang_path.as_deref(), &probe.lib_dirs),
    );
    report.notes.extend(note);
    let covered: Vec<&str> = Dep::ALL.iter().filter_map(|d| d.program()).collect();
    report.programs = PROGRAMS
        .iter()
        .filter(|p| !covered.contains(&p.name))
        .map(|p| (p, p.find(&probe.path)))
        .collect();
    report
}

/// Finds `mpicc`, asks it for its include directories, and finds `mpi.h` in one of them.
fn check_mpi_headers(path: &OsStr) -> Result<String, String> {
    let mpicc = host::which("mpicc", path).ok_or("no `mpicc` on PATH")?;
    let mut dirs = stdout_of(&mpicc, &["-showme:incdirs"])
        .map(|out| {
            out.split_whitespace()
                .map(PathBuf::from)
                .collect::<Vec<_>>()
        })
        .filter(|dirs| !dirs.is_empty())
        .or_else(|| stdout_of(&mpicc, &["-show"]).map(|out| include_dirs_of(&out)))
        .ok_or_else(|| {
            format!(
                "`{} -showme:incdirs` and `-show` both failed",
                mpicc.display()
            )
        })?;
    dirs.extend(["/usr/include", "/usr/local/include"].map(PathBuf::from));
    dirs.iter()
        .map(|dir| dir.join("mpi.h"))
        .find(|header| header.is_file())
        .map(|header| format!("{} (via {})", header.display(), mpicc.display()))
        .ok_or_else(|| format!("no mpi.h in the include directories of {}", mpicc.display()))
}

/// The `-I` directories of a compiler command line such as `mpicc -show` prints.
fn include_dirs_of(command_line: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut words = command_line.split_whitespace();
    while let Some(word) = words.next() {
        if let Some(dir) = word.strip_prefix("-I").filter(|d| !d.is_empty()) {
            dirs.push(PathBuf::from(dir));
        } else if word == "-I" || word == "-isystem" {
            dirs.extend(words.next().map(PathBuf::from));
        }
    }
    dirs
}

/// Finds `mpirun` and its version line; says whether it is Open MPI's.
fn check_mpirun(path: &OsStr) -> Result<(String, bool), String> {
    let mpirun = host::which("mpirun", path).ok_or("no `mpirun` on PATH")?;
    let version = stdout_of(&mpirun, &["--version"])
        .and_then(|out| {
            out.lines()
                .find(|l| !l.trim().is_empty())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "version unknown".to_owned());
    let open_mpi = version.contains("Open MPI") || version.contains("OpenRTE");
    Ok((
        format!("{} ({})", mpirun.display(), version.trim()),
        open_mpi,
    ))
}

/// Finds a libclang shared library in `LIBCLANG_PATH` (a directory or the file itself) when set,
/// else in `lib_dirs`.
fn check_libclang(libclang_path: Option<&OsStr>, lib_dirs: &[PathBuf]) -> Result<String, String> {
    if let Some(given) = libclang_path {
        let given = Path::new(given);
        let found = if given.is_file() {
            Some(given.to_path_buf())
        } else {
            find_libclang_in(given)
        };
        return found
            .map(|lib| format!("{} (from LIBCLANG_PATH)", lib.display()))
            .ok_or_else(|| format!("LIBCLANG_PATH={} holds no libclang", given.display()));
    }
    lib_dirs
        .iter()
        .find_map(|dir| find_libclang_in(dir))
        .map(|lib| lib.display().to_string())
        .ok_or_else(|| {
            "no libclang*.so* under /usr/lib/llvm-*/lib or the system library directories \
             (set LIBCLANG_PATH if it lives elsewhere)"
                .to_owned()
        })
}

fn find_libclang_in(dir: &Path) -> Option<PathBuf> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| is_libclang_name(name))
        .collect();
    // `libclang.so` before `libclang.so.1` before `libclang-14.so.1`: the plain name first.
    names.sort_by_key(|n| (n.len(), n.clone()));
    names.into_iter().map(|n| dir.join(n)).find(|p| p.exists())
}

/// `libclang.so`, `libclang.so.1`, `libclang-14.so.1`: yes; `libclang-cpp.so.14`, `libclangAST.a`: no.
fn is_libclang_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("libclang") else {
        return false;
    };
    let versioned = rest
        .strip_prefix('-')
        .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()));
    (rest.starts_with(".so") || versioned) && rest.contains(".so")
}

/// The stdout of `program args` when it exits 0.
fn stdout_of(program: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The command a user runs to install `packages`: `sudo apt-get update && sudo apt-get install -y ...`.
pub fn install_hint(packages: &[&str]) -> String {
    format!(
        "sudo apt-get update && sudo apt-get install -y {}",
        packages.join(" ")
    )
}

/// Checks the dependencies and, when some are missing, installs them with apt-get if we run as
/// root on a system that has it; otherwise prints the command to run. Absent optional programs
/// are installed the same way as root (each package on its own, so that one apt cannot find
/// costs only its stage), and otherwise only named.
///
/// # Errors
/// When something required is still missing afterwards (the message says what to do).
pub fn ensure() -> Result<(), String> {
    println!("== system dependencies ==");
    let report = check(&Probe::from_env());
    report.print();
    let elsewhere = report.not_from_apt();
    if !elsewhere.is_empty() {
        return Err(format!(
            "missing, and not from apt: {}",
            elsewhere.join(", ")
        ));
    }
    let required = report.packages();
    let optional = report.optional_packages();
    if !report.missing.is_empty() && required.is_empty() {
        return Err(
            "LIBCLANG_PATH names no libclang: point it at the directory that holds \
             libclang.so, or unset it"
                .to_owned(),
        );
    }
    if required.is_empty() && optional.is_empty() {
        return Ok(());
    }
    let apt = host::which_in_path("apt-get");
    if !host::is_root() || apt.is_none() {
        if !optional.is_empty() {
            println!(
                "optional programs absent (their stages are skipped); to add them:\n  {}",
                install_hint(&optional)
            );
        }
        if required.is_empty() {
            return Ok(());
        }
        let why = if apt.is_none() {
            "apt-get not found: install these with the system's package manager; \
             on Debian/Ubuntu:"
        } else {
            "not running as root; install them with:"
        };
        return Err(format!("{why}\n  {}", install_hint(&required)));
    }
    // Without a required package to install, a failed update (no network) only costs the
    // optional stages.
    let updated = apt_get(&["update"]);
    if !required.is_empty() {
        updated.clone()?;
        apt_get(&[&["install", "-y", "--no-install-recommends"][..], &required].concat())?;
    }
    if let Err(e) = updated {
        println!("note: optional packages not installed ({e}): their stages are skipped");
        return Ok(());
    }
    for package in &optional {
        if let Err(e) = apt_get(&["install", "-y", "--no-install-recommends", package]) {
            println!("note: optional package {package} not installed ({e}): its stage is skipped");
        }
    }
    let after = check(&Probe::from_env());
    after.print();
    if after.complete() {
        Ok(())
    } else {
        let mut names: Vec<String> = after
            .missing
            .iter()
            .map(|(d, _)| d.name().to_owned())
            .collect();
        names.extend(
            after
                .programs
                .iter()
                .filter(|(p, found)| found.is_err() && p.need == Required)
                .map(|(p, _)| p.describe()),
        );
        Err(format!(
            "still missing after apt-get install: {}",
            names.join(", ")
        ))
    }
}

/// `apt-get ARGS` with `DEBIAN_FRONTEND=noninteractive`, output streamed.
fn apt_get(args: &[&str]) -> Result<(), String> {
    println!("xtask: apt-get {}", args.join(" "));
    let status = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run apt-get: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`apt-get {}` failed ({status})", args.join(" ")))
    }
}

/// `cargo xtask deps`.
pub fn run() -> ExitCode {
    match ensure() {
        Ok(()) => {
            println!("all system dependencies present");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh empty directory under the system temp dir.
    fn scratch_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn everything_missing_on_an_empty_machine() {
        let probe = Probe {
            path: OsString::from("/nonexistent"),
            libclang_path: None,
            lib_dirs: vec![PathBuf::from("/nonexistent")],
        };
        let report = check(&probe);
        assert!(report.found.is_empty());
        assert_eq!(
            report.packages(),
            [
                "libopenmpi-dev",
                "openmpi-bin",
                "libclang-dev",
                "gcc",
                "git",
                "dash",
                "bash",
                "coreutils",
                "apt",
                "binutils",
                "xz-utils"
            ]
        );
        assert_eq!(
            install_hint(&report.packages()[..3]),
            "sudo apt-get update && sudo apt-get install -y libopenmpi-dev openmpi-bin libclang-dev"
        );
        assert_eq!(
            report.optional_packages(),
            [
                "debootstrap",
                "python3",
                "python3-venv",
                "iproute2",
                "util-linux",
                "munge",
                "slurmctld",
                "slurmd",
                "slurm-client"
            ]
        );
        assert_eq!(report.not_from_apt(), ["`cargo` (from rustup)"]);
        assert!(!report.complete());
        // mpicc and mpirun are checked as MPI headers and runtime, not twice.
        assert!(report.programs.iter().all(|(p, _)| p.name != "mpirun"));
    }

    #[test]
    fn a_program_counts_only_where_it_works() {
        let row = Program {
            works_with: &["-c", "exit 3"],
            ..*declared("sh")
        };
        let path = std::env::var_os("PATH").unwrap_or_default();
        assert!(row
            .find(&path)
            .unwrap_err()
            .contains("`sh -c exit 3` fails"));
        assert!(declared("sh").find(&path).is_ok());
        assert_eq!(declared("xz").describe(), "`xz` (xz-utils)");
        assert_eq!(
            declared("nvidia-smi").describe(),
            "`nvidia-smi` (from the NVIDIA driver)"
        );
    }

    /// Every program started by a literal name in xtask's sources (through `Command::new`,
    /// `which_in_path`, `which` or `find_or_skip`) is a program of [`PROGRAMS`].
    #[test]
    fn every_program_xtask_starts_is_declared() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut seen = Vec::new();
        let mut undeclared = Vec::new();
        for entry in std::fs::read_dir(&src).unwrap() {
            let path = entry.unwrap().path();
            if path.extension() != Some(OsStr::new("rs")) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for name in started_programs(&text) {
                if !PROGRAMS.iter().any(|p| p.name == name) {
                    undeclared.push(format!("{}: {name}", path.display()));
                }
                seen.push(name);
            }
        }
        assert!(
            undeclared.is_empty(),
            "not in deps::PROGRAMS: {undeclared:?}"
        );
        // The scan sees what it must: programs started in several ways, in several files.
        for name in [
            "apt-get",
            "xz",
            "strip",
            "nvidia-smi",
            "mpicc",
            "sh",
            "bash",
            "git",
        ] {
            assert!(seen.iter().any(|s| s == name), "scan missed {name}");
        }
    }

    #[test]
    fn started_programs_are_read_from_source_text() {
        let text = concat!(
            "let a = Command::new(\"foo\");\n",
            "let b = Command::new(&path);\n",
            "host::which_in_path(\"bar-1\")\n",
            "host::which(\"baz\", path)\n",
            "find_or_skip(\"qux\", \"t\")\n",
        );
        assert_eq!(started_programs(text), ["foo", "bar-1", "baz", "qux"]);
    }

    /// The program names in `text` right after `Command::new("`, `which_in_path("`, `which("`
    /// and `find_or_skip("`, in order.
    fn started_programs(text: &str) -> Vec<String> {
        let openers = [
            "Command::new(\"",
            "which_in_path(\"",
            "which(\"",
            "find_or_skip(\"",
        ];
        let mut found: Vec<(usize, String)> = Vec::new();
        for opener in openers {
            for (at, _) in text.match_indices(opener) {
                let rest = &text[at + opener.len()..];
                let name: String = rest.chars().take_while(|c| *c != '"').collect();
                // Only plain program names: not format strings or paths.
                if !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c))
                {
                    found.push((at, name));
                }
            }
        }
        found.sort();
        found.into_iter().map(|(_, name)| name).collect()
    }

    #[test]
    fn fake_mpicc_and_mpirun_are_found() {
        let dir = scratch_dir("mpi");
        let include = dir.join("include");
        std::fs::create_dir_all(&include).unwrap();
        std::fs::write(include.join("mpi.h"), "").unwrap();
        let script = |name: &str, body: String| {
            let path = dir.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            let mut perms = std::fs::metadata(&path).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
            std::fs::set_permissions(&path, perms).unwrap();
        };
        // An MPICH-style wrapper: no -showme, only -show.
        script(
            "mpicc",
            format!(
                "[ \"$1\" = -show ] && echo gcc -I{} -L/x -lmpi && exit 0; exit 1",
                include.display()
            ),
        );
        script("mpirun", "echo 'HYDRA build details:'".to_owned());
        let probe = Probe {
            path: dir.clone().into_os_string(),
            libclang_path: Some(OsString::from("/nonexistent")),
            lib_dirs: vec![],
        };
        let report = check(&probe);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(report.found.len(), 2, "{report:?}");
        assert!(report.found[0].1.contains("include/mpi.h"));
        assert!(report.found[1].1.contains("HYDRA"));
        assert_eq!(report.notes.len(), 1);
        // A wrong LIBCLANG_PATH is not fixed by installing libclang.
        assert_eq!(report.missing.len(), 1);
        assert!(!report.packages().contains(&"libclang-dev"));
    }

    #[test]
    fn libclang_is_found_by_name_in_dirs_and_libclang_path() {
        let dir = scratch_dir("clang");
        for name in ["libclang-cpp.so.14", "libclangAST.a", "libclang-14.so.1"] {
            std::fs::write(dir.join(name), "").unwrap();
        }
        let in_dirs = check_libclang(None, &[PathBuf::from("/nonexistent"), dir.clone()]);
        let via_env = check_libclang(Some(dir.as_os_str()), &[]);
        let via_file = check_libclang(Some(dir.join("libclang-14.so.1").as_os_str()), &[]);
        let wrong_env =
            check_libclang(Some(OsStr::new("/nonexistent")), std::slice::from_ref(&dir));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(in_dirs.unwrap().ends_with("libclang-14.so.1"));
        assert!(via_env.unwrap().contains("(from LIBCLANG_PATH)"));
        assert!(via_file.is_ok());
        assert!(wrong_env.is_err());
    }

    #[test]
    fn libclang_names() {
        for yes in [
            "libclang.so",
            "libclang.so.1",
            "libclang-14.so.1",
            "libclang-14.0.6.so",
        ] {
            assert!(is_libclang_name(yes), "{yes}");
        }
        for no in [
            "libclang-cpp.so.14",
            "libclangAST.a",
            "libclang.a",
            "libfoo.so",
        ] {
            assert!(!is_libclang_name(no), "{no}");
        }
    }

    #[test]
    fn include_dirs_from_show() {
        assert_eq!(
            include_dirs_of("gcc -I/a -I /b -isystem /c -L/d -lmpi"),
            [
                PathBuf::from("/a"),
                PathBuf::from("/b"),
                PathBuf::from("/c")
            ]
        );
    }
}
