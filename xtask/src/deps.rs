//! System dependencies: Open MPI's headers (for `mpi-sys`) and `mpirun`, and libclang (for
//! bindgen); for the two-node and Slurm stages of `cargo xtask test`, `ip`, munge and Slurm's
//! daemons and clients (optional: without them those stages are skipped). Finds them, and installs
//! what is missing with apt-get when running as root.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use crate::host;

/// One system dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dep {
    /// `mpicc` and the `mpi.h` it compiles against.
    MpiHeaders,
    /// `mpirun`.
    MpiRuntime,
    /// `libclang.so`, loaded by bindgen.
    Libclang,
    /// `python3 -m venv`, for the Python stage of `cargo xtask test` only: not in [`Dep::ALL`],
    /// since that stage is skipped without it.
    PythonVenv,
    /// `ip`, which makes the two-node stage's network namespaces (optional).
    Ip,
    /// `munged`, Slurm's authentication (optional).
    Munge,
    /// `slurmctld` (optional).
    Slurmctld,
    /// `slurmd` (optional).
    Slurmd,
    /// `srun`, `sbatch`, `salloc`, `sinfo` (optional).
    SlurmClient,
}

impl Dep {
    /// Every dependency, in the order they are checked and installed.
    pub const ALL: [Dep; 8] = [
        Dep::MpiHeaders,
        Dep::MpiRuntime,
        Dep::Libclang,
        Dep::Ip,
        Dep::Munge,
        Dep::Slurmctld,
        Dep::Slurmd,
        Dep::SlurmClient,
    ];

    /// Whether a build and the core tests can do without it (the stages that need it are then
    /// skipped with one line), so that missing it is no error when it cannot be installed.
    pub fn optional(self) -> bool {
        self.program().is_some()
    }

    /// The program that shows an optional dependency is there.
    pub fn program(self) -> Option<&'static str> {
        match self {
            Dep::Ip => Some("ip"),
            Dep::Munge => Some("munged"),
            Dep::Slurmctld => Some("slurmctld"),
            Dep::Slurmd => Some("slurmd"),
            Dep::SlurmClient => Some("srun"),
            Dep::MpiHeaders | Dep::MpiRuntime | Dep::Libclang | Dep::PythonVenv => None,
        }
    }

    /// How the dependency is named in messages.
    pub fn name(self) -> &'static str {
        match self {
            Dep::MpiHeaders => "MPI headers",
            Dep::MpiRuntime => "mpirun",
            Dep::Libclang => "libclang",
            Dep::PythonVenv => "python3 venv",
            Dep::Ip => "ip",
            Dep::Munge => "munged",
            Dep::Slurmctld => "slurmctld",
            Dep::Slurmd => "slurmd",
            Dep::SlurmClient => "srun",
        }
    }

    /// The Debian/Ubuntu package that provides it.
    pub fn apt_package(self) -> &'static str {
        match self {
            Dep::MpiHeaders => "libopenmpi-dev",
            Dep::MpiRuntime => "openmpi-bin",
            Dep::Libclang => "libclang-dev",
            Dep::PythonVenv => "python3-venv",
            Dep::Ip => "iproute2",
            Dep::Munge => "munge",
            Dep::Slurmctld => "slurmctld",
            Dep::Slurmd => "slurmd",
            Dep::SlurmClient => "slurm-client",
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
    /// Things that work but may surprise (an MPI other than Open MPI).
    pub notes: Vec<String>,
    /// Whether `LIBCLANG_PATH` chose where libclang must be, so that installing it cannot help.
    pub libclang_pinned: bool,
}

impl Report {
    /// Prints one line per dependency, then the notes.
    pub fn print(&self) {
        for dep in Dep::ALL {
            if let Some((_, detail)) = self.found.iter().find(|(d, _)| *d == dep) {
                println!("found   {:<12} {detail}", dep.name());
            }
            if let Some((_, why)) = self.missing.iter().find(|(d, _)| *d == dep) {
                println!("MISSING {:<12} {why}", dep.name());
            }
        }
        for note in &self.notes {
            println!("note: {note}");
        }
    }

    /// The apt packages that would provide what is missing.
    pub fn packages(&self) -> Vec<&'static str> {
        self.missing
            .iter()
            .filter(|(d, _)| !(*d == Dep::Libclang && self.libclang_pinned))
            .map(|(d, _)| d.apt_package())
            .collect()
    }
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
    for dep in Dep::ALL {
        if let Some(program) = dep.program() {
            record(dep, check_program(program, &probe.path));
        }
    }
    report
}

/// Finds an optional dependency's program on `path` (as root, `PATH` holds `/usr/sbin`).
fn check_program(name: &str, path: &OsStr) -> Result<String, String> {
    host::which(name, path)
        .map(|p| p.display().to_string())
        .ok_or_else(|| {
            format!("no `{name}` (the two-node and Slurm stages are skipped without it)")
        })
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

/// The command a user runs to install `packages`.
pub fn install_hint(packages: &[&str]) -> String {
    format!("sudo apt-get install -y {}", packages.join(" "))
}

/// Checks the dependencies and, when some are missing, installs them with apt-get if we run as
/// root on a system that has it; otherwise prints the command to run.
///
/// # Errors
/// When something is still missing afterwards (the message says what to do).
pub fn ensure() -> Result<(), String> {
    println!("== system dependencies ==");
    let report = check(&Probe::from_env());
    report.print();
    if report.missing.is_empty() {
        return Ok(());
    }
    let packages = report.packages();
    if packages.is_empty() {
        return Err(
            "LIBCLANG_PATH names no libclang: point it at the directory that holds \
             libclang.so, or unset it"
                .to_owned(),
        );
    }
    let apt = host::which_in_path("apt-get");
    let required_missing = report.missing.iter().any(|(d, _)| !d.optional());
    if !required_missing && (!host::is_root() || apt.is_none()) {
        println!(
            "note: the stages that need what is missing are skipped; to run them: {}",
            install_hint(&packages)
        );
        return Ok(());
    }
    if !host::is_root() || apt.is_none() {
        let why = if apt.is_none() {
            "apt-get not found: install Open MPI (headers and mpirun) and libclang with the \
             system's package manager; on Debian/Ubuntu:"
        } else {
            "not running as root; install them with:"
        };
        return Err(format!("{why}\n  {}", install_hint(&packages)));
    }
    if let Err(e) = apt_install(&packages) {
        if required_missing {
            return Err(e);
        }
        println!("note: {e}; the stages that need what is missing are skipped");
        return Ok(());
    }
    let after = check(&Probe::from_env());
    after.print();
    if after.missing.iter().all(|(d, _)| d.optional()) {
        Ok(())
    } else {
        let names: Vec<&str> = after.missing.iter().map(|(d, _)| d.name()).collect();
        Err(format!(
            "still missing after apt-get install: {}",
            names.join(", ")
        ))
    }
}

/// `apt-get update` then `apt-get install -y --no-install-recommends PACKAGES`, output streamed.
pub fn apt_install(packages: &[&str]) -> Result<(), String> {
    let steps: [Vec<&str>; 2] = [
        vec!["update"],
        [&["install", "-y", "--no-install-recommends"][..], packages].concat(),
    ];
    for args in steps {
        println!("xtask: apt-get {}", args.join(" "));
        let status = Command::new("apt-get")
            .args(&args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run apt-get: {e}"))?;
        if !status.success() {
            return Err(format!("`apt-get {}` failed ({status})", args.join(" ")));
        }
    }
    Ok(())
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
                "iproute2",
                "munge",
                "slurmctld",
                "slurmd",
                "slurm-client"
            ]
        );
        assert_eq!(
            install_hint(&report.packages()[..3]),
            "sudo apt-get install -y libopenmpi-dev openmpi-bin libclang-dev"
        );
        let optional: Vec<Dep> = Dep::ALL.into_iter().filter(|d| d.optional()).collect();
        assert_eq!(
            optional,
            [
                Dep::Ip,
                Dep::Munge,
                Dep::Slurmctld,
                Dep::Slurmd,
                Dep::SlurmClient
            ]
        );
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
        let mut report = check(&probe);
        let _ = std::fs::remove_dir_all(&dir);
        // The optional programs depend on this machine; the required ones do not.
        report.found.retain(|(d, _)| !d.optional());
        report.missing.retain(|(d, _)| !d.optional());
        assert_eq!(report.found.len(), 2, "{report:?}");
        assert!(report.found[0].1.contains("include/mpi.h"));
        assert!(report.found[1].1.contains("HYDRA"));
        assert_eq!(report.notes.len(), 1);
        // A wrong LIBCLANG_PATH is not fixed by installing libclang.
        assert_eq!(report.missing.len(), 1);
        assert!(report.packages().is_empty());
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
