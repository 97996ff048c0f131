//! The backends collbench can measure (`--backend`), and which of them this build can run.
//!
//! Adding a backend: give it an [`unavailable`](Backend::unavailable) answer that looks at the machine
//! (devices, CUDA-awareness of the MPI), and a branch in [`crate::allreduce::run_backend`] that makes its
//! communicator and buffers.

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

    /// Why this backend cannot run here, or `None` when it can. The answer must be the same on every
    /// rank, since all ranks choose the backends to run from it.
    pub fn unavailable(self) -> Option<&'static str> {
        match self {
            Backend::Mpi => None,
            Backend::CudaMpi | Backend::MpiStaged | Backend::Nccl => Some("not built in yet"),
        }
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

/// A backend left out, and why.
pub type LeftOut = (Backend, &'static str);

/// The backends to run and the notes on those left out: `("nccl", "not built in yet")`.
///
/// # Errors
/// A single backend asked for by name that cannot run here; `all` when none can.
pub fn resolve(choice: BackendChoice) -> Result<(Vec<Backend>, Vec<LeftOut>), String> {
    match choice {
        BackendChoice::One(b) => match b.unavailable() {
            None => Ok((vec![b], Vec::new())),
            Some(why) => Err(format!("backend {} is not available: {why}", b.name())),
        },
        BackendChoice::All => {
            let (run, skip): (Vec<Backend>, Vec<Backend>) = Backend::ALL
                .into_iter()
                .partition(|b| b.unavailable().is_none());
            let notes: Vec<_> = skip
                .into_iter()
                .filter_map(|b| b.unavailable().map(|why| (b, why)))
                .collect();
            if run.is_empty() {
                return Err("no backend is available".to_string());
            }
            Ok((run, notes))
        }
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
        let (run, notes) = resolve(BackendChoice::All).unwrap();
        assert_eq!(run, vec![Backend::Mpi]);
        let names: Vec<_> = notes.iter().map(|(b, _)| b.name()).collect();
        assert_eq!(names, ["mpi-staged", "cuda-mpi", "nccl"]);
        assert!(resolve(BackendChoice::One(Backend::Nccl))
            .unwrap_err()
            .contains("nccl"));
        assert_eq!(
            resolve(BackendChoice::One(Backend::Mpi)).unwrap(),
            (vec![Backend::Mpi], vec![])
        );
    }
}
