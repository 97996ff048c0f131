//! `cargo xtask gpu-stage`: everything the GPU suite needs on a GPU machine without a Rust
//! toolchain, in `.gpu-box/` at the workspace root.
//!
//! It builds in release (`cargo build --release --workspace --bins --examples`, and
//! `cargo test --release --workspace --no-run` for the test binaries, found in cargo's JSON
//! messages), then stages:
//!
//! | path | what |
//! |---|---|
//! | `bin/` | every binary and example of the workspace, `xtask` included, `strip --strip-debug`ped |
//! | `tests/` | the test binaries the GPU suite runs, under their hashed names, stripped too |
//! | `suite.json` | the suite's binaries: name, kind, path ([`gpu_suite::manifest_json`]) |
//! | `run-all.sh` | `bash .gpu-box/run-all.sh` there runs the suite and ends with `N passed, M failed` |
//! | `lib/libcollectives_interpose.so` | the MPI interposer (release), stripped |
//! | `interpose/` | its C check program, compiled there with `mpicc` |
//! | `run-interpose.sh` | `bash .gpu-box/run-interpose.sh` there runs the interposer's device checks ([`interpose`]) |
//! | `env.sh`, `ompi-cuda-*.tar.xz`, `peers/` | from the GPU kit directory, when there is one |
//!
//! The GPU kit is a directory holding `env.sh` (the GPU machine's settings; it unpacks the
//! CUDA-aware Open MPI tarball beside it): `$XTASK_GPU_KIT`, else `../shared/gpu-box` next to
//! the workspace (or next to the main checkout, from a git worktree).
//!
//! `run-all.sh` calls the staged `xtask gpu-suite --staged`, so the plan and the counting are the
//! ones `cargo xtask test` uses; xtask needs no system library, so it runs on any Linux machine
//! with a glibc at least as new as the build machine's.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use crate::artifacts::{self, Artifact};
use crate::gpu_suite::{self, BinaryKind, SuiteBinary, MANIFEST};
use crate::{cargo, host, interpose, jobs, workspace_root};

/// The staging directory, at the workspace root.
pub const STAGE_DIR: &str = ".gpu-box";

/// The generated entry point in the staging directory.
pub const RUN_ALL: &str = "run-all.sh";

/// Size the staging directory should stay under, in MiB, when `XTASK_STAGE_BUDGET_MIB` is unset.
pub const DEFAULT_BUDGET_MIB: u64 = 56;

/// The environment variable that names the GPU kit directory.
pub const KIT_VAR: &str = "XTASK_GPU_KIT";

/// Where `env.sh` installs the CUDA-aware Open MPI on the GPU machine; `run-all.sh` uses it as
/// `XTASK_CUDA_MPIRUN` when that is unset.
pub const KIT_CUDA_MPIRUN: &str = "/opt/ompi-cuda/bin/mpirun";

/// `cargo xtask gpu-stage`.
pub fn run(args: &[String]) -> ExitCode {
    if let Some(arg) = args.first() {
        eprintln!("xtask gpu-stage: unknown argument `{arg}`\n(see `cargo xtask help`)");
        return ExitCode::from(2);
    }
    match stage(&workspace_root()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask gpu-stage: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Builds and stages into `root/.gpu-box`.
fn stage(root: &Path) -> Result<(), String> {
    let jobs = jobs();
    println!("== release build ==");
    let mut built = artifacts::build(
        &cargo(),
        root,
        &[
            "--release",
            "--workspace",
            "--bins",
            "--examples",
            "-j",
            &jobs,
        ],
    )?;
    let tests = artifacts::run_cargo(
        &cargo(),
        root,
        &["test", "--release", "--workspace", "--no-run", "-j", &jobs],
    )?;
    artifacts::merge(&mut built, tests);

    let (mut suite, candidates) = gpu_suite::classify(&built, &root.join("Cargo.toml"));
    let (libtest, problems) = gpu_suite::with_ignored_tests(&candidates);
    if !problems.is_empty() {
        return Err(format!(
            "cannot list the ignored tests of every test binary:\n  {}",
            problems.join("\n  ")
        ));
    }
    suite.extend(libtest);
    if !built.iter().any(is_xtask) {
        return Err("cargo built no xtask binary to stage".to_owned());
    }

    let dir = root.join(STAGE_DIR);
    println!("== staging into {} ==", dir.display());
    fresh_dir(&dir)?;
    let (bin, tests) = (dir.join("bin"), dir.join("tests"));
    for d in [&bin, &tests] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }

    let mut copied: Vec<PathBuf> = Vec::new();
    for a in built.iter().filter(|a| is_tool(a)) {
        let to = bin.join(file_name(&a.executable)?);
        if copied.contains(&to) {
            return Err(format!("two binaries would be staged as {}", to.display()));
        }
        copy(&a.executable, &to)?;
        copied.push(to);
    }
    let mut staged_suite = Vec::new();
    for b in &suite {
        let to = match b.kind {
            BinaryKind::Example | BinaryKind::Benchmark => bin.join(file_name(&b.path)?),
            BinaryKind::Libtest | BinaryKind::MpiTest => {
                let to = tests.join(file_name(&b.path)?);
                copy(&b.path, &to)?;
                copied.push(to.clone());
                to
            }
        };
        if !to.is_file() {
            return Err(format!("{} was not staged as {}", b.name, to.display()));
        }
        staged_suite.push(SuiteBinary {
            path: to,
            ..b.clone()
        });
    }
    strip_all(&copied);
    compress_large(&copied)?;
    stage_interposer(root, &dir)?;

    match find_kit(root, std::env::var_os(KIT_VAR).as_deref())? {
        Some(kit) => copy_kit(&kit, &dir)?,
        None => println!(
            "warning: no GPU kit (a directory with env.sh): set {KIT_VAR}, or put it in \
             ../shared/gpu-box; run-all.sh will run without env.sh's settings"
        ),
    }

    write(
        &dir.join(MANIFEST),
        &gpu_suite::manifest_json(&staged_suite, &dir),
    )?;
    let run_all = dir.join(RUN_ALL);
    write(&run_all, &render_run_all())?;
    set_mode(&run_all, 0o755)?;

    staged_suite.sort_by(|a, b| (a.kind.as_str(), &a.name).cmp(&(b.kind.as_str(), &b.name)));
    println!("the GPU suite's binaries:");
    for b in &staged_suite {
        let rel = b.path.strip_prefix(&dir).unwrap_or(&b.path);
        println!("  {:<8} {:<24} {}", b.kind.as_str(), b.name, rel.display());
    }
    report_size(&dir, budget_mib())
}

/// The interposer's library (a release build), its C sources and `run-interpose.sh`.
fn stage_interposer(root: &Path, dir: &Path) -> Result<(), String> {
    let library = interpose::release_library(root)?;
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).map_err(|e| format!("cannot create {}: {e}", lib.display()))?;
    let to = lib.join(interpose::LIBRARY);
    copy(&library, &to)?;
    strip_all(std::slice::from_ref(&to));
    let sources = dir.join("interpose");
    std::fs::create_dir_all(&sources)
        .map_err(|e| format!("cannot create {}: {e}", sources.display()))?;
    let from = root.join(interpose::SOURCES);
    for source in [interpose::CHECK_SOURCE, interpose::BENCH_SOURCE] {
        copy(&from.join(source), &sources.join(source))?;
    }
    let script = dir.join(interpose::RUN_SCRIPT);
    write(&script, &interpose::render_run_script())?;
    set_mode(&script, 0o755)
}

fn is_xtask(a: &Artifact) -> bool {
    a.name == "xtask" && a.is("bin") && !a.test_profile
}

/// A workspace binary or example (not a test build of one).
fn is_tool(a: &Artifact) -> bool {
    (a.is("bin") || a.is("example")) && !a.test_profile
}

fn file_name(path: &Path) -> Result<&std::ffi::OsStr, String> {
    path.file_name()
        .ok_or_else(|| format!("{} has no file name", path.display()))
}

/// Removes `dir` if it exists (refusing a symbolic link) and creates it empty.
fn fresh_dir(dir: &Path) -> Result<(), String> {
    if let Ok(meta) = std::fs::symlink_metadata(dir) {
        if !meta.is_dir() {
            return Err(format!(
                "{} exists and is not a directory; remove it first",
                dir.display()
            ));
        }
        std::fs::remove_dir_all(dir)
            .map_err(|e| format!("cannot remove {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn set_mode(path: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot chmod {}: {e}", path.display()))
}

/// `strip --strip-debug` on each file, saying so when `strip` is missing or fails (the files are
/// then staged with their debug information, and the size check shows what that costs).
fn strip_all(files: &[PathBuf]) {
    let Some(strip) = host::which_in_path("strip") else {
        println!(
            "warning: no `strip` on PATH (binutils): binaries staged with their debug information"
        );
        return;
    };
    for file in files {
        let status = Command::new(&strip)
            .arg("--strip-debug")
            .arg(file)
            .stdin(Stdio::null())
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => println!("warning: strip --strip-debug {}: {s}", file.display()),
            Err(e) => println!("warning: cannot run {}: {e}", strip.display()),
        }
    }
}

/// Staged files larger than this are carried compressed (`NAME.xz`); `run-all.sh` unpacks them.
pub const COMPRESS_FROM_BYTES: u64 = 8 * 1024 * 1024;

/// Compresses every staged file of [`COMPRESS_FROM_BYTES`] or more with `xz` (the file becomes
/// `NAME.xz`), so that the kit stays within what travels to the GPU machine: the benchmark binary,
/// generic over every element type, collective and backend, is tens of MiB of code.
///
/// # Errors
/// `xz` missing or failing on a file that needs it.
fn compress_large(files: &[PathBuf]) -> Result<(), String> {
    let large: Vec<&PathBuf> = files
        .iter()
        .filter(|f| std::fs::metadata(f).is_ok_and(|m| m.len() >= COMPRESS_FROM_BYTES))
        .collect();
    if large.is_empty() {
        return Ok(());
    }
    let xz = host::which_in_path("xz")
        .ok_or("no `xz` on PATH (xz-utils): cannot compress the large staged binaries")?;
    for file in large {
        let status = Command::new(&xz)
            .args(["-T0", "-6", "-f"])
            .arg(file)
            .stdin(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run {}: {e}", xz.display()))?;
        if !status.success() {
            return Err(format!("xz {}: {status}", file.display()));
        }
        println!("compressed {} (run-all.sh unpacks it)", file.display());
    }
    Ok(())
}

/// The GPU kit directory: `given` (it must hold `env.sh`), else the first of
/// `../shared/gpu-box` beside `root` and beside the main checkout of a worktree that holds
/// `env.sh`; `Ok(None)` when there is none.
///
/// # Errors
/// When `given` names a directory without `env.sh`.
pub fn find_kit(root: &Path, given: Option<&std::ffi::OsStr>) -> Result<Option<PathBuf>, String> {
    if let Some(given) = given.filter(|g| !g.is_empty()) {
        let kit = PathBuf::from(given);
        return if kit.join("env.sh").is_file() {
            Ok(Some(kit))
        } else {
            Err(format!("{KIT_VAR}={} holds no env.sh", kit.display()))
        };
    }
    let mut roots = vec![root.to_path_buf()];
    roots.extend(host::main_checkout(root));
    Ok(roots
        .iter()
        .filter_map(|r| r.parent())
        .map(|parent| parent.join("shared").join("gpu-box"))
        .find(|kit| kit.join("env.sh").is_file()))
}

/// Copies `env.sh`, every `ompi-cuda-*.tar.xz` and `peers/` from `kit` into `dir`.
fn copy_kit(kit: &Path, dir: &Path) -> Result<(), String> {
    println!("GPU kit: {}", kit.display());
    copy(&kit.join("env.sh"), &dir.join("env.sh"))?;
    let entries =
        std::fs::read_dir(kit).map_err(|e| format!("cannot read {}: {e}", kit.display()))?;
    let mut tarballs = 0;
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let name_str = name.to_string_lossy();
        if name_str.starts_with("ompi-cuda-") && name_str.ends_with(".tar.xz") {
            copy(&entry.path(), &dir.join(&name))?;
            tarballs += 1;
        }
    }
    if tarballs == 0 {
        println!(
            "warning: no ompi-cuda-*.tar.xz in {}: no CUDA-aware Open MPI will be unpacked there",
            kit.display()
        );
    }
    let peers = kit.parent().map(|p| p.join("peers"));
    if let Some(peers) = peers.filter(|p| p.is_dir()) {
        copy_dir(&peers, &dir.join("peers"))?;
    }
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let entries =
        std::fs::read_dir(from).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_dir(&path, &target)?;
        } else {
            copy(&path, &target)?;
        }
    }
    Ok(())
}

/// `$XTASK_STAGE_BUDGET_MIB`, else [`DEFAULT_BUDGET_MIB`].
fn budget_mib() -> u64 {
    std::env::var("XTASK_STAGE_BUDGET_MIB")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_BUDGET_MIB)
}

/// Every file under `dir` with its size, largest first.
pub fn files_by_size(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
        {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                files.push((entry.path(), meta.len()));
            }
        }
    }
    files.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    files
}

/// Prints the staged size; an error when it is over `budget_mib`, naming the largest files.
fn report_size(dir: &Path, budget_mib: u64) -> Result<(), String> {
    let files = files_by_size(dir);
    let total: u64 = files.iter().map(|(_, n)| n).sum();
    let mib = total as f64 / (1024.0 * 1024.0);
    println!(
        "staged {}: {} files, {mib:.1} MiB (budget {budget_mib} MiB)",
        dir.display(),
        files.len()
    );
    if total <= budget_mib * 1024 * 1024 {
        println!("run it on the GPU machine with: bash {STAGE_DIR}/{RUN_ALL}");
        return Ok(());
    }
    let mut largest = String::new();
    for (path, n) in files.iter().take(8) {
        let rel = path.strip_prefix(dir).unwrap_or(path);
        let _ = write!(
            largest,
            "\n  {:>7.1} MiB  {}",
            *n as f64 / 1048576.0,
            rel.display()
        );
    }
    Err(format!(
        "{} is {mib:.1} MiB, over the {budget_mib} MiB budget (XTASK_STAGE_BUDGET_MIB); \
         the largest files:{largest}",
        dir.display()
    ))
}

/// The text of `run-all.sh`.
pub fn render_run_all() -> String {
    format!(
        r#"#!/usr/bin/env bash
# The GPU suite of this workspace, staged by `cargo xtask gpu-stage` for a GPU machine without a
# Rust toolchain. From the directory that holds {STAGE_DIR}/:
#   bash {STAGE_DIR}/{RUN_ALL}                    every step
#   bash {STAGE_DIR}/{RUN_ALL} --dry-run          print the steps, run nothing
#   bash {STAGE_DIR}/{RUN_ALL} --only TEXT        only the steps whose command contains TEXT
#   bash {STAGE_DIR}/{RUN_ALL} --skip-sanitizer   leave out the compute-sanitizer runs
# The last line is always `N passed, M failed`; the exit status is 0 when M is 0.
# Settings: XTASK_MPI_TIMEOUT, XTASK_SANITIZER_TIMEOUT (seconds per step), XTASK_CUDA_MPIRUN,
# XTASK_GPUS, HALO_EXPECT_IPC (see the xtask usage text).
set -u
here="${{BASH_SOURCE[0]}}"
case "$here" in */*) here="${{here%/*}}" ;; *) here=. ;; esac
box="$(cd "$here" && pwd)"
# Large binaries travel compressed (NAME.xz): unpack each once, beside itself.
for packed in "$box"/bin/*.xz "$box"/tests/*.xz; do
  [ -e "$packed" ] || continue
  [ -e "${{packed%.xz}}" ] && continue
  if ! xz -dk "$packed"; then
    echo "{RUN_ALL}: cannot unpack $packed (xz)" >&2
    echo "0 passed, 1 failed"
    exit 1
  fi
done
xtask="$box/bin/xtask"
if [ ! -x "$xtask" ]; then
  echo "{RUN_ALL}: $xtask is missing; stage again with cargo xtask gpu-stage" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
# env.sh sets what runs there need and unpacks the CUDA-aware Open MPI once: only on a machine
# with a GPU to run on.
if "$xtask" gpu-suite --detect >/dev/null 2>&1; then
  if [ -f "$box/env.sh" ]; then
    # shellcheck source=/dev/null
    source "$box/env.sh"
  else
    echo "{RUN_ALL}: no env.sh in $box: running in the environment as it is" >&2
  fi
  if [ -z "${{XTASK_CUDA_MPIRUN:-}}" ] && [ -x {KIT_CUDA_MPIRUN} ]; then
    export XTASK_CUDA_MPIRUN={KIT_CUDA_MPIRUN}
  fi
fi
"$xtask" gpu-suite --staged "$box" "$@"
status=$?
case $status in
  0|1) exit "$status" ;;
  *)
    echo "{RUN_ALL}: xtask gpu-suite ended with status $status, without its summary" >&2
    echo "0 passed, 1 failed"
    exit 1
    ;;
esac
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-stage-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn script(path: &Path, body: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
        set_mode(path, 0o755).unwrap();
    }

    /// Runs the generated run-all.sh in `dir` (with a fake `bin/xtask`) and returns its
    /// stdout and exit code.
    fn run_all(dir: &Path) -> (String, Option<i32>) {
        let out = Command::new("bash")
            .arg(dir.join(RUN_ALL))
            .arg("--skip-sanitizer")
            .env_remove("XTASK_CUDA_MPIRUN")
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            out.status.code(),
        )
    }

    #[test]
    fn large_files_are_compressed_and_run_all_unpacks_them() {
        let test = "gpu_stage::tests::large_files_are_compressed_and_run_all_unpacks_them";
        if crate::deps::find_or_skip("xz", test).is_none() {
            return;
        }
        let dir = scratch("run-all-xz");
        write(&dir.join(RUN_ALL), &render_run_all()).unwrap();
        // A staged binary at the threshold, and the fake xtask it must find unpacked.
        let big = dir.join("bin/xtask");
        script(
            &big,
            r#"[ "$2" = --detect ] && exit 1
echo "unpacked and ran"; echo "1 passed, 0 failed"; exit 0"#,
        );
        let mut body = std::fs::read(&big).unwrap();
        body.resize(COMPRESS_FROM_BYTES as usize, b'\n');
        std::fs::write(&big, &body).unwrap();
        let small = dir.join("tests/small");
        script(&small, "true");
        compress_large(&[big.clone(), small.clone()]).unwrap();
        let packed = dir.join("bin/xtask.xz");
        let (compressed, small_left) = (packed.is_file() && !big.exists(), small.is_file());
        let (out, code) = run_all(&dir);
        let unpacked = big.is_file();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(compressed, "the large file was not replaced by NAME.xz");
        assert!(small_left, "a small file was compressed");
        assert!(unpacked, "run-all.sh did not unpack bin/xtask.xz");
        assert!(out.contains("unpacked and ran"), "{out}");
        assert_eq!(code, Some(0));
    }

    #[test]
    fn run_all_passes_arguments_and_always_ends_with_a_summary() {
        let dir = scratch("run-all");
        write(&dir.join(RUN_ALL), &render_run_all()).unwrap();
        // No xtask staged: a failure line, not a crash.
        let (missing, code) = run_all(&dir);
        // A GPU is "absent" (--detect fails) and the suite prints its own summary.
        script(
            &dir.join("bin/xtask"),
            r#"[ "$2" = --detect ] && exit 1
echo "args: $*"; echo "3 passed, 0 failed"; exit 0"#,
        );
        let (passing, passing_code) = run_all(&dir);
        // The suite dies by a signal before its summary.
        script(
            &dir.join("bin/xtask"),
            r#"[ "$2" = --detect ] && exit 1
kill -9 $$"#,
        );
        let (killed, killed_code) = run_all(&dir);
        // A GPU is present: env.sh is sourced first.
        std::fs::write(dir.join("env.sh"), "export FROM_ENV_SH=yes\n").unwrap();
        script(
            &dir.join("bin/xtask"),
            r#"[ "$2" = --detect ] && exit 0
echo "env.sh: ${FROM_ENV_SH:-no}"; echo "1 passed, 1 failed"; exit 1"#,
        );
        let (with_gpu, with_gpu_code) = run_all(&dir);
        let _ = std::fs::remove_dir_all(&dir);

        assert_eq!(missing.lines().last(), Some("0 passed, 1 failed"));
        assert_eq!(code, Some(1));
        assert!(
            passing.contains(&format!(
                "args: gpu-suite --staged {} --skip-sanitizer",
                dir.display()
            )),
            "{passing}"
        );
        assert_eq!(passing.lines().last(), Some("3 passed, 0 failed"));
        assert_eq!(passing_code, Some(0));
        assert_eq!(
            killed.lines().last(),
            Some("0 passed, 1 failed"),
            "{killed}"
        );
        assert_eq!(killed_code, Some(1));
        assert!(with_gpu.contains("env.sh: yes"), "{with_gpu}");
        assert_eq!(with_gpu_code, Some(1));
    }

    #[test]
    fn run_all_is_valid_bash() {
        let dir = scratch("syntax");
        let file = dir.join(RUN_ALL);
        write(&file, &render_run_all()).unwrap();
        let status = Command::new("bash").arg("-n").arg(&file).status().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(status.success());
    }

    #[test]
    fn the_kit_is_found_beside_the_checkout_or_its_main_checkout() {
        let base = scratch("kit");
        let kit = base.join("shared/gpu-box");
        std::fs::create_dir_all(&kit).unwrap();
        std::fs::write(kit.join("env.sh"), "").unwrap();
        // /base/main is a checkout, /base/wt/feature one of its worktrees.
        let main = base.join("main");
        let worktree = base.join("wt/feature");
        let gitdir = main.join(".git/worktrees/feature");
        std::fs::create_dir_all(&gitdir).unwrap();
        std::fs::create_dir_all(&worktree).unwrap();
        std::fs::write(gitdir.join("commondir"), "../..\n").unwrap();
        std::fs::write(
            worktree.join(".git"),
            format!("gitdir: {}\n", gitdir.display()),
        )
        .unwrap();

        let from_main = find_kit(&main, None);
        let from_worktree = find_kit(&worktree, None);
        let main_of_worktree = crate::host::main_checkout(&worktree);
        let given = find_kit(&worktree, Some(kit.as_os_str()));
        let given_wrong = find_kit(&worktree, Some(base.as_os_str()));
        let nowhere = find_kit(&main.join("sub"), None);
        let canonical_main = main.canonicalize().unwrap();
        let _ = std::fs::remove_dir_all(&base);

        assert_eq!(from_main, Ok(Some(kit.clone())));
        assert_eq!(main_of_worktree, Some(canonical_main.clone()));
        assert_eq!(
            from_worktree,
            Ok(Some(
                canonical_main.parent().unwrap().join("shared/gpu-box")
            ))
        );
        assert_eq!(given, Ok(Some(kit)));
        assert!(given_wrong.unwrap_err().contains("holds no env.sh"));
        assert_eq!(nowhere, Ok(None));
    }

    #[test]
    fn size_report_names_the_largest_files_over_budget() {
        let dir = scratch("size");
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::write(dir.join("bin/big"), vec![0u8; 3 * 1024 * 1024]).unwrap();
        std::fs::write(dir.join("small"), b"x").unwrap();
        let files = files_by_size(&dir);
        let within = report_size(&dir, 4);
        let over = report_size(&dir, 2);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].1, 3 * 1024 * 1024);
        assert!(files[0].0.ends_with("bin/big"));
        assert!(within.is_ok());
        let err = over.unwrap_err();
        assert!(
            err.contains("over the 2 MiB budget") && err.contains("bin/big"),
            "{err}"
        );
    }
}
