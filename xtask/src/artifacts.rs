//! Building with cargo and collecting the executables it reports in its
//! `compiler-artifact` JSON messages.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// One executable that cargo built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// The target's name (`05_checked_mismatch`, `mpi_collectives`, `collbench`).
    pub name: String,
    /// The target's kinds (`example`, `test`, `bin`, ...).
    pub kinds: Vec<String>,
    /// Whether it was built with the test profile (a libtest harness or `harness = false` test).
    pub test_profile: bool,
    /// The `Cargo.toml` of the package it belongs to, when cargo says.
    pub manifest_path: Option<PathBuf>,
    /// The file to run.
    pub executable: PathBuf,
}

impl Artifact {
    /// Whether the target is of kind `kind`.
    pub fn is(&self, kind: &str) -> bool {
        self.kinds.iter().any(|k| k == kind)
    }

    /// Whether it belongs to the package whose manifest is `manifest` (true when cargo did not say).
    pub fn in_package(&self, manifest: &Path) -> bool {
        match &self.manifest_path {
            None => true,
            Some(m) => m == manifest || same_file(m, manifest),
        }
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// The executables in cargo's JSON messages (one JSON object per line; other lines are skipped).
pub fn parse_messages(stdout: &str) -> Vec<Artifact> {
    let mut found: Vec<Artifact> = Vec::new();
    for line in stdout.lines() {
        let line = line.trim();
        if !line.starts_with('{') {
            continue;
        }
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if let Some(artifact) = artifact_of(&message) {
            if !found.iter().any(|a| a.executable == artifact.executable) {
                found.push(artifact);
            }
        }
    }
    found
}

fn artifact_of(message: &Value) -> Option<Artifact> {
    if message.get("reason")?.as_str()? != "compiler-artifact" {
        return None;
    }
    let executable = message.get("executable")?.as_str()?;
    let target = message.get("target")?;
    let kinds = target
        .get("kind")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    Some(Artifact {
        name: target.get("name")?.as_str()?.to_owned(),
        kinds,
        test_profile: message
            .get("profile")
            .and_then(|p| p.get("test"))
            .and_then(Value::as_bool)
            .unwrap_or(false),
        manifest_path: message
            .get("manifest_path")
            .and_then(Value::as_str)
            .map(PathBuf::from),
        executable: PathBuf::from(executable),
    })
}

/// Appends the artifacts of `more` whose executable is not in `into` yet (a `cargo test --no-run`
/// after a `cargo build` reports the examples and binaries again).
pub fn merge(into: &mut Vec<Artifact>, more: Vec<Artifact>) {
    for artifact in more {
        if !into.iter().any(|a| a.executable == artifact.executable) {
            into.push(artifact);
        }
    }
}

/// Runs `cargo build <args> --message-format=json-render-diagnostics` in `root`, with cargo's
/// diagnostics and progress going to our stderr, and returns the executables it built.
///
/// # Errors
/// When cargo cannot be started or the build fails.
pub fn build(cargo: &Path, root: &Path, args: &[&str]) -> Result<Vec<Artifact>, String> {
    run_cargo(cargo, root, &[&["build"], args].concat())
}

/// Runs `cargo <command> --message-format=json-render-diagnostics` in `root` (a `build`, or a
/// `test --no-run`), with cargo's diagnostics and progress going to our stderr, and returns the
/// executables it reports.
///
/// # Errors
/// When cargo cannot be started or the command fails.
pub fn run_cargo(cargo: &Path, root: &Path, command: &[&str]) -> Result<Vec<Artifact>, String> {
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(command)
        .arg("--message-format=json-render-diagnostics")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let shown = format!("cargo {}", command.join(" "));
    eprintln!("xtask: {shown}");
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", cargo.display()))?;
    if !out.status.success() {
        return Err(format!("`{shown}` failed ({})", out.status));
    }
    Ok(parse_messages(&String::from_utf8_lossy(&out.stdout)))
}

/// A built artifact for unit tests: `name` of cargo kind `kind`, of the package at `manifest`.
#[cfg(test)]
pub fn fake(name: &str, kind: &str, test_profile: bool, manifest: &str) -> Artifact {
    Artifact {
        name: name.to_owned(),
        kinds: vec![kind.to_owned()],
        test_profile,
        manifest_path: Some(std::path::PathBuf::from(manifest)),
        executable: std::path::PathBuf::from(format!("/t/{name}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MESSAGES: &str = r#"{"reason":"compiler-artifact","package_id":"path+file:///w#collectives@0.1.0","manifest_path":"/w/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"collectives","src_path":"/w/src/lib.rs","edition":"2021","doc":true,"doctest":true,"test":true},"profile":{"opt_level":"0","debuginfo":2,"debug_assertions":true,"overflow_checks":true,"test":false},"features":[],"filenames":["/w/target/debug/libcollectives.rlib"],"executable":null,"fresh":true}
{"reason":"compiler-artifact","package_id":"path+file:///w#collectives@0.1.0","manifest_path":"/w/Cargo.toml","target":{"kind":["example"],"crate_types":["bin"],"name":"01_all_reduce","src_path":"/w/examples/01_all_reduce.rs","edition":"2021","doc":false,"doctest":false,"test":false},"profile":{"opt_level":"0","debuginfo":2,"debug_assertions":true,"overflow_checks":true,"test":false},"features":[],"filenames":["/w/target/debug/examples/01_all_reduce"],"executable":"/w/target/debug/examples/01_all_reduce","fresh":false}
{"reason":"compiler-artifact","package_id":"path+file:///w#collectives@0.1.0","manifest_path":"/w/Cargo.toml","target":{"kind":["test"],"crate_types":["bin"],"name":"mpi_collectives","src_path":"/w/tests/mpi_collectives.rs","edition":"2021","doc":false,"doctest":false,"test":true},"profile":{"opt_level":"0","debuginfo":2,"debug_assertions":true,"overflow_checks":true,"test":true},"features":[],"filenames":["/w/target/debug/deps/mpi_collectives-0123"],"executable":"/w/target/debug/deps/mpi_collectives-0123","fresh":false}
{"reason":"build-finished","success":true}
not json at all"#;

    #[test]
    fn merging_keeps_one_artifact_per_executable() {
        let mut all = parse_messages(MESSAGES);
        let again = parse_messages(MESSAGES);
        merge(&mut all, again);
        assert_eq!(all.len(), 2);
        let mut other = all[0].clone();
        other.executable = PathBuf::from("/w/target/debug/examples/other");
        merge(&mut all, vec![other]);
        assert_eq!(all.len(), 3);
    }

    #[test]
    fn keeps_only_executables() {
        let found = parse_messages(MESSAGES);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].name, "01_all_reduce");
        assert!(found[0].is("example") && !found[0].test_profile);
        assert!(found[0].in_package(Path::new("/w/Cargo.toml")));
        assert!(!found[0].in_package(Path::new("/x/Cargo.toml")));
        assert_eq!(found[1].name, "mpi_collectives");
        assert!(found[1].is("test") && found[1].test_profile);
        assert_eq!(
            found[1].executable,
            Path::new("/w/target/debug/deps/mpi_collectives-0123")
        );
    }
}
