//! What a machine offers the GPU suite: how many GPUs (or why none), a CUDA-aware `mpirun`,
//! `compute-sanitizer`, and whether every pair of GPUs has peer access. Each fact is read by a
//! probe of the host and decided by a pure function, so the decisions are tested without a GPU.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::host;

/// The environment variable that sets the GPU count, skipping detection (`0` skips the suite).
pub const GPUS_VAR: &str = "XTASK_GPUS";

/// The environment variable that names a CUDA-aware `mpirun`.
pub const CUDA_MPIRUN_VAR: &str = "XTASK_CUDA_MPIRUN";

/// The environment variable that names the CUDA-aware Open MPI's library directory, when it is
/// not `lib/` beside its `bin/`.
pub const CUDA_MPIRUN_LIB_VAR: &str = "XTASK_CUDA_MPIRUN_LIB";

/// The environment variable that names `compute-sanitizer`, when it is neither on `PATH` nor in
/// [`SANITIZER_FALLBACK`].
pub const SANITIZER_VAR: &str = "XTASK_COMPUTE_SANITIZER";

/// Where CUDA installs `compute-sanitizer` when `PATH` does not lead to it.
pub const SANITIZER_FALLBACK: &str = "/usr/local/cuda/bin/compute-sanitizer";

/// The CUDA driver library whose loading, with a `/dev/nvidiaN` device, counts as a GPU.
pub const LIBCUDA: &str = "libcuda.so.1";

/// The GPUs the suite may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gpus {
    /// `count` GPUs (at least one), found as `how` says.
    Found {
        /// How many.
        count: u32,
        /// How they were found (`nvidia-smi -L`, `/dev/nvidia* and libcuda.so.1`, `XTASK_GPUS=2`).
        how: String,
    },
    /// None, for the reason given.
    Absent {
        /// What the probes saw.
        why: String,
    },
}

impl Gpus {
    /// The count; 0 when absent.
    pub fn count(&self) -> u32 {
        match self {
            Gpus::Found { count, .. } => *count,
            Gpus::Absent { .. } => 0,
        }
    }

    /// One line saying what was found, or that the GPU suite is skipped and why.
    pub fn line(&self) -> String {
        match self {
            Gpus::Found { count, how } => {
                let s = if *count == 1 { "" } else { "s" };
                format!("GPU suite: {count} GPU{s} ({how})")
            }
            Gpus::Absent { why } => format!("no GPU ({why}): GPU suite skipped"),
        }
    }
}

/// What the GPU probes saw on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuProbe {
    /// `XTASK_GPUS`, when set.
    pub forced: Option<String>,
    /// `nvidia-smi -L`: `None` when there is no `nvidia-smi`, else its stdout or why it failed.
    pub smi: Option<Result<String, String>>,
    /// How many `/dev/nvidiaN` device files exist.
    pub device_files: u32,
    /// Whether `libcuda.so.1` loads (only probed when there are device files).
    pub libcuda: Result<(), String>,
    /// `CUDA_VISIBLE_DEVICES`, when set.
    pub visible: Option<String>,
}

impl GpuProbe {
    /// Probes this machine.
    pub fn from_host() -> Self {
        let forced = std::env::var(GPUS_VAR).ok();
        let smi = host::which_in_path("nvidia-smi").map(|smi| stdout_of(&smi, &["-L"]));
        let device_files = count_device_files(Path::new("/dev"));
        let libcuda = if device_files > 0 {
            host::library_loads(LIBCUDA)
        } else {
            Err("not tried".to_owned())
        };
        GpuProbe {
            forced,
            smi,
            device_files,
            libcuda,
            visible: std::env::var("CUDA_VISIBLE_DEVICES").ok(),
        }
    }
}

/// Detects the GPUs of this machine.
pub fn detect() -> Gpus {
    decide(&GpuProbe::from_host())
}

/// Decides from what the probes saw: `XTASK_GPUS` when it is a count; else the GPUs that
/// `nvidia-smi -L` lists; else the `/dev/nvidiaN` devices when `libcuda.so.1` loads. A
/// `CUDA_VISIBLE_DEVICES` list caps the count.
pub fn decide(probe: &GpuProbe) -> Gpus {
    let mut ignored = String::new();
    if let Some(forced) = &probe.forced {
        match forced.trim().parse::<u32>() {
            Ok(0) => {
                return Gpus::Absent {
                    why: format!("{GPUS_VAR}=0"),
                }
            }
            Ok(count) => {
                return Gpus::Found {
                    count,
                    how: format!("{GPUS_VAR}={count}"),
                }
            }
            Err(_) => ignored = format!("; ignored {GPUS_VAR}={forced:?}, not a count"),
        }
    }
    let smi_listed = match &probe.smi {
        Some(Ok(out)) => count_smi_gpus(out),
        _ => 0,
    };
    let (count, how) = if smi_listed > 0 {
        (smi_listed, "nvidia-smi -L".to_owned())
    } else if probe.device_files > 0 && probe.libcuda.is_ok() {
        (probe.device_files, format!("/dev/nvidia0.. and {LIBCUDA}"))
    } else {
        let smi = match &probe.smi {
            None => "no nvidia-smi on PATH".to_owned(),
            Some(Ok(_)) => "nvidia-smi -L listed no GPU".to_owned(),
            Some(Err(e)) => format!("nvidia-smi -L failed: {e}"),
        };
        let dev = if probe.device_files == 0 {
            "no /dev/nvidia0".to_owned()
        } else {
            match &probe.libcuda {
                Ok(()) => unreachable!("device files with a loadable libcuda count as GPUs"),
                Err(e) => format!("/dev/nvidia0 present but {LIBCUDA} does not load: {e}"),
            }
        };
        return Gpus::Absent {
            why: format!("{smi}; {dev}{ignored}"),
        };
    };
    match probe.visible.as_deref().map(visible_count) {
        Some(0) => Gpus::Absent {
            why: format!(
                "CUDA_VISIBLE_DEVICES={:?} hides the {count} found by {how}",
                probe.visible.as_deref().unwrap_or_default()
            ),
        },
        Some(visible) if visible < count => Gpus::Found {
            count: visible,
            how: format!(
                "{how}, {visible} of {count} visible through CUDA_VISIBLE_DEVICES{ignored}"
            ),
        },
        _ => Gpus::Found {
            count,
            how: format!("{how}{ignored}"),
        },
    }
}

/// The GPUs in `nvidia-smi -L` output: its `GPU n: ...` lines (MIG instances below a GPU are
/// not counted separately).
pub fn count_smi_gpus(output: &str) -> u32 {
    let lines = output.lines().filter(|line| {
        line.strip_prefix("GPU ")
            .and_then(|rest| rest.split_once(':'))
            .is_some_and(|(index, _)| {
                !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit())
            })
    });
    u32::try_from(lines.count()).unwrap_or(u32::MAX)
}

/// How many devices a `CUDA_VISIBLE_DEVICES` value lets CUDA see: the entries before the first
/// invalid one (CUDA ignores the rest), where an entry is an index or a `GPU-`/`MIG-` UUID.
pub fn visible_count(value: &str) -> u32 {
    let valid = value
        .split(',')
        .map(str::trim)
        .take_while(|entry| {
            entry.starts_with("GPU-")
                || entry.starts_with("MIG-")
                || (!entry.is_empty() && entry.bytes().all(|b| b.is_ascii_digit()))
        })
        .count();
    u32::try_from(valid).unwrap_or(u32::MAX)
}

/// The `nvidiaN` device files in `dev` (not `nvidiactl`, `nvidia-uvm`, ...).
fn count_device_files(dev: &Path) -> u32 {
    let count = std::fs::read_dir(dev)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .and_then(|name| name.strip_prefix("nvidia"))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .count();
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// The stdout of `program args` when it exits 0, else what went wrong.
fn stdout_of(program: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let said = String::from_utf8_lossy(&out.stdout);
        let first = said
            .lines()
            .chain(String::from_utf8_lossy(&out.stderr).lines())
            .find(|l| !l.trim().is_empty())
            .map(|l| format!(": {}", l.trim()))
            .unwrap_or_default();
        Err(format!("{}{first}", out.status))
    }
}

/// A CUDA-aware `mpirun` and what its ranks need to find its libraries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaMpirun {
    /// The launcher.
    pub program: PathBuf,
    /// `LD_LIBRARY_PATH` for the launcher and its ranks: its library directory first, when
    /// known; `None` to leave the variable alone.
    pub ld_library_path: Option<String>,
}

/// The CUDA-aware `mpirun` named by `XTASK_CUDA_MPIRUN` (a path, or a name looked up in `PATH`),
/// with the library directory from `XTASK_CUDA_MPIRUN_LIB` or else `lib/` beside its `bin/`.
///
/// # Errors
/// When the variable names nothing executable: a CUDA-aware run was asked for and cannot happen.
pub fn cuda_mpirun(
    given: Option<&OsStr>,
    lib: Option<&OsStr>,
    path_var: &OsStr,
    ld_library_path: Option<&OsStr>,
) -> Result<Option<CudaMpirun>, String> {
    let Some(given) = given.filter(|g| !g.is_empty()) else {
        return Ok(None);
    };
    let given_path = Path::new(given);
    let program = if given_path.components().count() > 1 {
        Some(given_path.to_path_buf()).filter(|p| host::is_executable(p))
    } else {
        host::which(&given.to_string_lossy(), path_var)
    }
    .ok_or_else(|| {
        format!(
            "{CUDA_MPIRUN_VAR}={} is not an executable file",
            given_path.display()
        )
    })?;
    let lib_dir = match lib.filter(|l| !l.is_empty()) {
        Some(lib) => Some(PathBuf::from(lib)),
        None => program
            .parent()
            .and_then(Path::parent)
            .map(|prefix| prefix.join("lib"))
            .filter(|dir| dir.is_dir()),
    };
    let ld_library_path = lib_dir.map(|dir| {
        let rest = ld_library_path
            .map(|v| v.to_string_lossy().into_owned())
            .filter(|v| !v.is_empty());
        match rest {
            Some(rest) => format!("{}:{rest}", dir.display()),
            None => dir.display().to_string(),
        }
    });
    Ok(Some(CudaMpirun {
        program,
        ld_library_path,
    }))
}

/// [`cuda_mpirun`] over this process's environment.
///
/// # Errors
/// As [`cuda_mpirun`].
pub fn cuda_mpirun_from_env() -> Result<Option<CudaMpirun>, String> {
    cuda_mpirun(
        std::env::var_os(CUDA_MPIRUN_VAR).as_deref(),
        std::env::var_os(CUDA_MPIRUN_LIB_VAR).as_deref(),
        &std::env::var_os("PATH").unwrap_or_default(),
        std::env::var_os("LD_LIBRARY_PATH").as_deref(),
    )
}

/// `compute-sanitizer`: the file `XTASK_COMPUTE_SANITIZER` names, else the first on `path_var`,
/// else `fallback` when it exists.
///
/// # Errors
/// When `XTASK_COMPUTE_SANITIZER` names no executable file. `Ok(None)` when there is none.
pub fn find_sanitizer(
    given: Option<&OsStr>,
    path_var: &OsStr,
    fallback: &Path,
) -> Result<Option<PathBuf>, String> {
    if let Some(given) = given.filter(|g| !g.is_empty()) {
        let given = Path::new(given);
        return if host::is_executable(given) {
            Ok(Some(given.to_path_buf()))
        } else {
            Err(format!(
                "{SANITIZER_VAR}={} is not an executable file",
                given.display()
            ))
        };
    }
    Ok(host::which("compute-sanitizer", path_var)
        .or_else(|| Some(fallback.to_path_buf()).filter(|f| host::is_executable(f))))
}

/// [`find_sanitizer`] over this process's environment.
///
/// # Errors
/// As [`find_sanitizer`].
pub fn sanitizer_from_env() -> Result<Option<PathBuf>, String> {
    find_sanitizer(
        std::env::var_os(SANITIZER_VAR).as_deref(),
        &std::env::var_os("PATH").unwrap_or_default(),
        Path::new(SANITIZER_FALLBACK),
    )
}

/// Whether multi-rank halo runs must use CUDA IPC between GPUs (`HALO_EXPECT_IPC=1`), with why.
///
/// `HALO_EXPECT_IPC` in the environment decides when set (`1` yes, anything else no). Else it is
/// yes when `p2p_read` (the output of `nvidia-smi topo -p2p r`) says every pair of the first
/// `gpus` GPUs can read each other's memory, and no otherwise.
pub fn halo_expect_ipc(
    given: Option<&str>,
    p2p_read: Option<&Result<String, String>>,
    gpus: u32,
) -> (bool, String) {
    if let Some(given) = given {
        return (given == "1", format!("HALO_EXPECT_IPC={given} given"));
    }
    match p2p_read {
        None => (false, "no nvidia-smi to ask for peer access".to_owned()),
        Some(Err(e)) => (false, format!("nvidia-smi topo -p2p r failed: {e}")),
        Some(Ok(out)) => {
            if all_pairs_ok(out, gpus) {
                (
                    true,
                    format!("nvidia-smi topo -p2p r: every pair of the {gpus} GPUs is OK"),
                )
            } else {
                (
                    false,
                    format!("nvidia-smi topo -p2p r: not every pair of the {gpus} GPUs is OK"),
                )
            }
        }
    }
}

/// [`halo_expect_ipc`] on this machine (asks `nvidia-smi` only when more than one GPU is used).
pub fn halo_expect_ipc_from_host(gpus: u32) -> (bool, String) {
    let given = std::env::var("HALO_EXPECT_IPC").ok();
    if given.is_none() && gpus < 2 {
        return (false, "one GPU: no peer to reach".to_owned());
    }
    let p2p = host::which_in_path("nvidia-smi").map(|smi| stdout_of(&smi, &["topo", "-p2p", "r"]));
    halo_expect_ipc(given.as_deref(), p2p.as_ref(), gpus)
}

/// Whether a `nvidia-smi topo -p2p r` matrix (rows `GPUi` then one status per column, `X` on the
/// diagonal) says `OK` for every pair among GPUs `0..gpus`.
pub fn all_pairs_ok(matrix: &str, gpus: u32) -> bool {
    let n = gpus as usize;
    let rows: Vec<Vec<&str>> = matrix
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let head = words.next()?;
            let index = head.strip_prefix("GPU")?;
            let statuses: Vec<&str> = words.collect();
            // The header row names the columns (`GPU0 GPU1`); data rows hold statuses.
            let header = statuses.iter().any(|w| w.starts_with("GPU"));
            (!header && !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()))
                .then_some(statuses)
        })
        .collect();
    if rows.len() < n {
        return false;
    }
    (0..n).all(|i| (0..n).all(|j| i == j || rows[i].get(j).is_some_and(|status| *status == "OK")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe() -> GpuProbe {
        GpuProbe {
            forced: None,
            smi: None,
            device_files: 0,
            libcuda: Err("not tried".to_owned()),
            visible: None,
        }
    }

    const SMI_TWO: &str = "GPU 0: NVIDIA H200 (UUID: GPU-1b2c)\n\
                           GPU 1: NVIDIA H200 (UUID: GPU-3d4e)\n";

    #[test]
    fn nvidia_smi_lists_the_gpus() {
        let p = GpuProbe {
            smi: Some(Ok(SMI_TWO.to_owned())),
            ..probe()
        };
        assert_eq!(
            decide(&p),
            Gpus::Found {
                count: 2,
                how: "nvidia-smi -L".to_owned()
            }
        );
        let mig = "GPU 0: NVIDIA A100 (UUID: GPU-x)\n  MIG 1g.10gb Device 0: (UUID: MIG-y)\n";
        assert_eq!(count_smi_gpus(mig), 1);
        assert_eq!(count_smi_gpus("No devices were found\n"), 0);
        assert_eq!(count_smi_gpus("GPU x: odd\nGPU : odd\n"), 0);
    }

    #[test]
    fn absent_gpus_say_why_in_one_line() {
        let none = decide(&probe());
        assert_eq!(none.count(), 0);
        assert_eq!(
            none.line(),
            "no GPU (no nvidia-smi on PATH; no /dev/nvidia0): GPU suite skipped"
        );
        let failed = decide(&GpuProbe {
            smi: Some(Err("exit status: 9: NVIDIA-SMI has failed".to_owned())),
            device_files: 1,
            libcuda: Err("libcuda.so.1: cannot open shared object file".to_owned()),
            ..probe()
        });
        let line = failed.line();
        assert!(
            line.starts_with("no GPU (nvidia-smi -L failed: exit status: 9"),
            "{line}"
        );
        assert!(
            line.contains("/dev/nvidia0 present but libcuda.so.1 does not load"),
            "{line}"
        );
        assert!(!line.contains('\n'));
        let empty = decide(&GpuProbe {
            smi: Some(Ok("No devices were found\n".to_owned())),
            ..probe()
        });
        assert!(
            empty.line().contains("nvidia-smi -L listed no GPU"),
            "{empty:?}"
        );
    }

    #[test]
    fn device_files_count_only_with_a_loadable_driver() {
        let with_driver = GpuProbe {
            device_files: 4,
            libcuda: Ok(()),
            ..probe()
        };
        assert_eq!(decide(&with_driver).count(), 4);
        let without = GpuProbe {
            device_files: 4,
            libcuda: Err("no".to_owned()),
            ..probe()
        };
        assert_eq!(decide(&without).count(), 0);
    }

    #[test]
    fn visible_devices_cap_the_count() {
        assert_eq!(visible_count("0,1"), 2);
        assert_eq!(visible_count("GPU-abc, 3"), 2);
        assert_eq!(visible_count("0,-1,1"), 1);
        assert_eq!(visible_count(""), 0);
        assert_eq!(visible_count("NoDevFiles"), 0);
        let capped = decide(&GpuProbe {
            smi: Some(Ok(SMI_TWO.to_owned())),
            visible: Some("1".to_owned()),
            ..probe()
        });
        assert_eq!(capped.count(), 1);
        assert!(capped.line().contains("1 of 2 visible"), "{capped:?}");
        let hidden = decide(&GpuProbe {
            smi: Some(Ok(SMI_TWO.to_owned())),
            visible: Some(String::new()),
            ..probe()
        });
        assert_eq!(hidden.count(), 0);
        assert!(hidden.line().contains("hides the 2"), "{hidden:?}");
        let more_listed_than_present = decide(&GpuProbe {
            smi: Some(Ok(SMI_TWO.to_owned())),
            visible: Some("0,1,2,3".to_owned()),
            ..probe()
        });
        assert_eq!(more_listed_than_present.count(), 2);
    }

    #[test]
    fn the_count_can_be_forced() {
        let forced = |v: &str| {
            decide(&GpuProbe {
                forced: Some(v.to_owned()),
                smi: Some(Ok(SMI_TWO.to_owned())),
                ..probe()
            })
        };
        assert_eq!(forced("0").count(), 0);
        assert_eq!(
            forced("0").line(),
            "no GPU (XTASK_GPUS=0): GPU suite skipped"
        );
        assert_eq!(forced("3").count(), 3);
        let typo = forced("two");
        assert_eq!(typo.count(), 2);
        assert!(
            typo.line().contains("ignored XTASK_GPUS=\"two\""),
            "{typo:?}"
        );
        assert_eq!(
            Gpus::Found {
                count: 1,
                how: "x".into()
            }
            .line(),
            "GPU suite: 1 GPU (x)"
        );
    }

    #[test]
    fn device_files_are_nvidia_and_a_number() {
        let dir = std::env::temp_dir().join(format!("xtask-dev-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for name in [
            "nvidia0",
            "nvidia1",
            "nvidiactl",
            "nvidia-uvm",
            "nvidia",
            "nvme0",
        ] {
            std::fs::write(dir.join(name), "").unwrap();
        }
        let count = count_device_files(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(count, 2);
    }

    /// A directory with an executable `bin/mpirun` (and `lib/` when asked), under the temp dir.
    fn fake_prefix(tag: &str, with_lib: bool) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        if with_lib {
            std::fs::create_dir_all(dir.join("lib")).unwrap();
        }
        let exe = dir.join("bin/mpirun");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        let mut perms = std::fs::metadata(&exe).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&exe, perms).unwrap();
        dir
    }

    #[test]
    fn cuda_mpirun_brings_its_library_directory() {
        let prefix = fake_prefix("cuda-mpirun", true);
        let exe = prefix.join("bin/mpirun");
        let none = OsStr::new("");
        let found = cuda_mpirun(
            Some(exe.as_os_str()),
            None,
            none,
            Some(OsStr::new("/usr/x")),
        );
        let by_name = cuda_mpirun(
            Some(OsStr::new("mpirun")),
            Some(OsStr::new("/elsewhere/lib")),
            prefix.join("bin").as_os_str(),
            None,
        );
        let no_lib_prefix = fake_prefix("cuda-mpirun-nolib", false);
        let no_lib = cuda_mpirun(
            Some(no_lib_prefix.join("bin/mpirun").as_os_str()),
            None,
            none,
            None,
        );
        let _ = std::fs::remove_dir_all(&prefix);
        let _ = std::fs::remove_dir_all(&no_lib_prefix);
        assert_eq!(
            found.unwrap().unwrap(),
            CudaMpirun {
                program: exe.clone(),
                ld_library_path: Some(format!("{}:/usr/x", prefix.join("lib").display())),
            }
        );
        let by_name = by_name.unwrap().unwrap();
        assert_eq!(by_name.program, exe);
        assert_eq!(by_name.ld_library_path.as_deref(), Some("/elsewhere/lib"));
        assert_eq!(no_lib.unwrap().unwrap().ld_library_path, None);
        assert_eq!(cuda_mpirun(None, None, none, None), Ok(None));
        let missing = cuda_mpirun(
            Some(OsStr::new("/nonexistent/bin/mpirun")),
            None,
            none,
            None,
        );
        assert!(missing
            .unwrap_err()
            .contains("XTASK_CUDA_MPIRUN=/nonexistent/bin/mpirun"));
    }

    #[test]
    fn sanitizer_from_variable_path_or_fallback() {
        let prefix = fake_prefix("sanitizer", false);
        let exe = prefix.join("bin/mpirun"); // any executable file stands in for it
        let none = OsStr::new("/nonexistent");
        assert_eq!(
            find_sanitizer(Some(exe.as_os_str()), none, Path::new("/nonexistent/cs")),
            Ok(Some(exe.clone()))
        );
        assert!(find_sanitizer(Some(OsStr::new("/nonexistent/cs")), none, &exe).is_err());
        assert_eq!(find_sanitizer(None, none, &exe), Ok(Some(exe.clone())));
        assert_eq!(
            find_sanitizer(None, none, Path::new("/nonexistent/cs")),
            Ok(None)
        );
        let _ = std::fs::remove_dir_all(&prefix);
    }

    const P2P_OK: &str = " \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n GPU1\tOK\tX\t\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n";

    #[test]
    fn peer_access_from_the_p2p_matrix() {
        assert!(all_pairs_ok(P2P_OK, 2));
        assert!(all_pairs_ok(P2P_OK, 1));
        assert!(!all_pairs_ok(P2P_OK, 3));
        let cns = P2P_OK.replace("X\tOK", "X\tCNS");
        assert!(!all_pairs_ok(&cns, 2));
        assert!(!all_pairs_ok("garbage", 2));
        // The header without its leading blank, as some versions print it.
        assert!(all_pairs_ok(&P2P_OK.replacen(" \t", "", 1), 2));

        let ok = Ok(P2P_OK.to_owned());
        assert!(halo_expect_ipc(None, Some(&ok), 2).0);
        assert!(!halo_expect_ipc(None, Some(&Ok(cns)), 2).0);
        assert!(!halo_expect_ipc(None, None, 2).0);
        assert!(!halo_expect_ipc(None, Some(&Err("exit 1".to_owned())), 2).0);
        let (given, why) = halo_expect_ipc(Some("0"), Some(&ok), 2);
        assert!(!given);
        assert_eq!(why, "HALO_EXPECT_IPC=0 given");
        assert!(halo_expect_ipc(Some("1"), None, 2).0);
    }
}
