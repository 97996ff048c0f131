//! The backends collbench can measure (`--backend`), which of them can run here, and the raw
//! baseline measured beside them (`--baseline`).
//!
//! Adding a backend: give it an [`unavailable`](Backend::unavailable) answer that looks at the machine
//! (devices, CUDA-awareness of the MPI), an [`crate::measure::hooks::BenchBackend`] implementation (its buffers
//! and timer) and a branch in [`crate::app::run_coll`] that makes its communicators; the all-reduce
//! benchmark with its baselines has its own branch in [`crate::app::run_allreduce`].

use clap::ValueEnum;
use collectives_core::BackendKind;

/// A backend, by its `--backend` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// MPI on host memory.
    Mpi,
    /// Device memory through a CUDA-aware MPI.
    CudaMpi,
    /// Device memory staged through pinned host memory and a host MPI.
    MpiStaged,
    /// NCCL on device memory.
    Nccl,
}

impl Backend {
    /// Every backend, in the order `--backend all` runs them.
    pub const ALL: [Backend; 4] = [
        Backend::Mpi,
        Backend::MpiStaged,
        Backend::CudaMpi,
        Backend::Nccl,
    ];

    /// The library's name for this backend.
    pub const fn kind(self) -> BackendKind {
        match self {
            Backend::Mpi => BackendKind::MpiHost,
            Backend::CudaMpi => BackendKind::MpiCuda,
            Backend::MpiStaged => BackendKind::MpiStaged,
            Backend::Nccl => BackendKind::Nccl,
        }
    }

    /// The `--backend` name (`mpi`, `cuda-mpi`, `mpi-staged`, `nccl`).
    pub const fn name(self) -> &'static str {
        self.kind().name()
    }

    /// Why this backend cannot run in this process, or `None` when it can: a look at this machine only
    /// (for `nccl`: the CUDA driver, libnccl and a visible device). Ranks may see different machines,
    /// so the caller agrees on the answers over all ranks before acting on them
    /// ([`agreed_unavailable`]).
    pub fn unavailable(self) -> Option<String> {
        match self {
            Backend::Mpi => None,
            Backend::CudaMpi => cuda_mpi_unavailable(),
            Backend::MpiStaged => staged_unavailable(),
            Backend::Nccl => nccl_unavailable(),
        }
    }
}

/// Why the staged backend cannot run here: no CUDA driver or no visible device; `None` when both are
/// there (any MPI will do).
pub fn staged_unavailable() -> Option<String> {
    collectives_core::backend::mpi_cuda::cuda_unavailable()
}

/// Why the CUDA-aware MPI backend cannot run here: no CUDA driver or device, or an MPI that is not
/// known to be CUDA-aware (with the evidence, `collectives_core::cuda_aware`). Detection needs MPI
/// running; before `MPI_Init` the answer says so.
pub fn cuda_mpi_unavailable() -> Option<String> {
    use collectives_core::cuda_aware::{self, CudaAwareness};

    if let Some(why) = staged_unavailable() {
        return Some(why);
    }
    match cuda_aware::detect() {
        Err(e) => Some(format!("cannot tell whether the MPI is CUDA-aware: {e}")),
        Ok(d) => match &d.awareness {
            CudaAwareness::Yes { .. } => None,
            CudaAwareness::No { reason } => Some(format!("the MPI is not CUDA-aware ({reason})")),
            other => Some(format!(
                "cannot tell whether the MPI is CUDA-aware: {other}"
            )),
        },
    }
}

/// Why the NCCL backend cannot run here: no CUDA driver, no loadable libnccl (the message names the
/// files tried), or no visible device; `None` when all three are there. Never panics, and loads
/// nothing that is not there.
pub fn nccl_unavailable() -> Option<String> {
    use collectives_core::backend::nccl::cuda_driver_present;
    use collectives_core::cudarc::driver::CudaContext;

    if !cuda_driver_present() {
        return Some("no CUDA driver (libcuda could not be opened)".to_string());
    }
    if let Err(e) = collectives_core::nccl_sys::library() {
        return Some(format!("libnccl could not be loaded: {e}"));
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => None,
        Ok(_) => Some("the CUDA driver sees no device".to_string()),
        Err(e) => Some(format!("the CUDA driver cannot list devices: {e}")),
    }
}

/// The decision for one backend given this rank's own answer (`local`, from
/// [`Backend::unavailable`]) and whether every rank found it available (`everywhere`): a backend runs
/// only where it runs on every rank, so that all ranks make the same calls.
pub fn agreed_unavailable(local: Option<String>, everywhere: bool) -> Option<String> {
    match local {
        Some(why) => Some(why),
        None if everywhere => None,
        None => Some("not available on every rank".to_string()),
    }
}

/// `--backend`: one backend or all that are available.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// Every backend available here.
    All,
    /// This one.
    One(Backend),
}

impl std::str::FromStr for BackendChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("all") {
            return Ok(BackendChoice::All);
        }
        Backend::ALL
            .into_iter()
            .find(|b| b.name().eq_ignore_ascii_case(s))
            .map(BackendChoice::One)
            .ok_or_else(|| {
                format!("unknown backend `{s}` (expected mpi, mpi-staged, cuda-mpi, nccl or all)")
            })
    }
}

impl BackendChoice {
    /// The backends this choice may run, before looking at the machine.
    pub fn candidates(self) -> Vec<Backend> {
        match self {
            BackendChoice::All => Backend::ALL.to_vec(),
            BackendChoice::One(b) => vec![b],
        }
    }
}

/// A backend left out, and why.
pub type LeftOut = (Backend, String);

/// [`resolve`] over `listed`: each candidate backend with why it cannot run (`None` where it can),
/// as [`crate::cmd::doctor::backends_here`] or an agreement over ranks gives them.
///
/// # Errors
/// As [`resolve`].
pub fn resolve_listed(
    choice: BackendChoice,
    listed: &[(Backend, Option<String>)],
) -> anyhow::Result<(Vec<Backend>, Vec<LeftOut>)> {
    resolve(choice, |b| {
        listed
            .iter()
            .find(|(c, _)| *c == b)
            .and_then(|(_, why)| why.clone())
    })
    .map_err(anyhow::Error::msg)
}

/// The backends to run and the notes on those left out (`(Nccl, "no CUDA driver ...")`), given
/// `unavailable`, which says why a backend cannot run (it is asked only about the choice's
/// candidates).
///
/// # Errors
/// A single backend asked for by name that cannot run here; `all` when none can.
pub fn resolve(
    choice: BackendChoice,
    unavailable: impl Fn(Backend) -> Option<String>,
) -> Result<(Vec<Backend>, Vec<LeftOut>), String> {
    let mut run = Vec::new();
    let mut notes = Vec::new();
    for b in choice.candidates() {
        match unavailable(b) {
            None => run.push(b),
            Some(why) if choice == BackendChoice::One(b) => {
                return Err(format!("backend {} is not available: {why}", b.name()))
            }
            Some(why) => notes.push((b, why)),
        }
    }
    if run.is_empty() {
        return Err("no backend is available".to_string());
    }
    Ok((run, notes))
}

/// The hidden baseline measured next to the library.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Baseline {
    /// The backend's own all-reduce called directly on the same handle, buffers and stream:
    /// `MPI_Allreduce` through `mpi::ffi` (mpi; on the device pointers for cuda-mpi), `ncclAllReduce`
    /// through `nccl_sys` (nccl); none for mpi-staged.
    Raw,
}

/// The answers of a machine without CUDA: only MPI runs.
#[cfg(test)]
pub(crate) fn host_only(b: Backend) -> Option<String> {
    match b {
        Backend::Mpi => None,
        Backend::Nccl => Some("no CUDA driver (libcuda could not be opened)".to_string()),
        _ => Some("not built in yet".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        assert_eq!("mpi".parse(), Ok(BackendChoice::One(Backend::Mpi)));
        assert_eq!("cuda-mpi".parse(), Ok(BackendChoice::One(Backend::CudaMpi)));
        assert_eq!(
            "mpi-staged".parse(),
            Ok(BackendChoice::One(Backend::MpiStaged))
        );
        assert_eq!("NCCL".parse(), Ok(BackendChoice::One(Backend::Nccl)));
        assert_eq!("all".parse(), Ok(BackendChoice::All));
        assert!("gloo".parse::<BackendChoice>().is_err());
    }

    #[test]
    fn all_runs_mpi_and_notes_the_rest() {
        let (run, notes) = resolve(BackendChoice::All, host_only).unwrap();
        assert_eq!(run, vec![Backend::Mpi]);
        let names: Vec<_> = notes.iter().map(|(b, _)| b.name()).collect();
        assert_eq!(names, ["mpi-staged", "cuda-mpi", "nccl"]);
        assert!(notes[2].1.contains("no CUDA driver"));
        let e = resolve(BackendChoice::One(Backend::Nccl), host_only).unwrap_err();
        assert_eq!(
            e,
            "backend nccl is not available: no CUDA driver (libcuda could not be opened)"
        );
        assert_eq!(
            resolve(BackendChoice::One(Backend::Mpi), host_only).unwrap(),
            (vec![Backend::Mpi], vec![])
        );
    }

    #[test]
    fn all_runs_nccl_where_it_is_available_and_asks_only_about_candidates() {
        let gpu = |b: Backend| match b {
            Backend::Mpi | Backend::Nccl => None,
            _ => Some("not built in yet".to_string()),
        };
        let (run, notes) = resolve(BackendChoice::All, gpu).unwrap();
        assert_eq!(run, [Backend::Mpi, Backend::Nccl]);
        assert_eq!(notes.len(), 2);
        let asked = std::cell::RefCell::new(Vec::new());
        let (run, _) = resolve(BackendChoice::One(Backend::Mpi), |b| {
            asked.borrow_mut().push(b);
            None
        })
        .unwrap();
        assert_eq!(run, [Backend::Mpi]);
        assert_eq!(*asked.borrow(), [Backend::Mpi]);
        assert_eq!(
            resolve(BackendChoice::All, |_| Some("x".into())).unwrap_err(),
            "no backend is available"
        );
    }

    #[test]
    fn a_backend_runs_only_where_every_rank_has_it() {
        assert_eq!(agreed_unavailable(None, true), None);
        assert!(agreed_unavailable(None, false)
            .unwrap()
            .contains("not available on every rank"));
        assert_eq!(
            agreed_unavailable(Some("no GPU".into()), false).as_deref(),
            Some("no GPU")
        );
    }

    #[test]
    fn the_probe_answers_without_panicking() {
        // Whatever this machine has, the answer is an answer: MPI always runs, NCCL runs or says why.
        assert_eq!(Backend::Mpi.unavailable(), None);
        for b in [Backend::Nccl, Backend::MpiStaged, Backend::CudaMpi] {
            if let Some(why) = b.unavailable() {
                assert!(!why.is_empty());
            }
        }
        // Without MPI running, CUDA-awareness cannot be decided: never a yes.
        assert!(Backend::CudaMpi.unavailable().is_some());
    }
}
