//! Which built binaries the stages run: the root package's examples and its `tests/mpi_*`
//! multi-rank binaries, and which of them need a GPU. Shared by `cargo xtask test`, the GPU suite,
//! the two-node and Slurm stages and the fuzzer.

use std::path::Path;

use crate::artifacts::Artifact;
use crate::mpirun::{Binary, Kind};

/// The package whose examples and `tests/mpi_*` binaries run under `mpirun`.
pub const ROOT_PACKAGE: &str = "collectives";

/// Prefix of the integration tests that are multi-rank binaries.
pub const MPI_TEST_PREFIX: &str = "mpi_";

/// Words in an example's name that mark it as needing a GPU.
pub const GPU_WORDS: [&str; 3] = ["nccl", "cuda", "gpu"];

/// The binaries to launch from what cargo built for the package with manifest `manifest`
/// (examples first, then `mpi_*` tests, each sorted by name), and the names of the GPU examples
/// left out (none when `gpu_wanted`).
pub fn select(built: &[Artifact], manifest: &Path, gpu_wanted: bool) -> (Vec<Binary>, Vec<String>) {
    let mut examples = Vec::new();
    let mut tests = Vec::new();
    let mut skipped = Vec::new();
    for artifact in built.iter().filter(|a| a.in_package(manifest)) {
        let binary = |kind| Binary {
            name: artifact.name.clone(),
            path: artifact.executable.clone(),
            kind,
        };
        if artifact.is("example") && !artifact.test_profile {
            if !gpu_wanted && needs_gpu(&artifact.name) {
                skipped.push(artifact.name.clone());
            } else {
                examples.push(binary(Kind::Example));
            }
        } else if artifact.is("test") && artifact.name.starts_with(MPI_TEST_PREFIX) {
            tests.push(binary(Kind::MpiTest));
        }
    }
    examples.sort_by(|a, b| a.name.cmp(&b.name));
    tests.sort_by(|a, b| a.name.cmp(&b.name));
    skipped.sort();
    examples.extend(tests);
    (examples, skipped)
}

/// Whether an example's name says it needs a GPU.
pub fn needs_gpu(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    GPU_WORDS.iter().any(|w| name.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::fake as artifact;

    #[test]
    fn selects_examples_and_mpi_tests_of_the_root_package() {
        let root = "/w/Cargo.toml";
        let built = [
            artifact("mpi_p2p", "test", true, root),
            artifact("02_scatter", "example", false, root),
            artifact("01_all_reduce", "example", false, root),
            artifact("07_nccl_all_reduce", "example", false, root),
            artifact("08_Cuda_aware", "example", false, root),
            artifact("args", "test", true, root),
            artifact("collectives", "lib", true, root),
            artifact("01_all_reduce_in_test_mode", "example", true, root),
            artifact("mpi_other_crate", "test", true, "/w/crates/x/Cargo.toml"),
        ];
        let (binaries, skipped) = select(&built, Path::new(root), false);
        let names: Vec<(&str, Kind)> = binaries.iter().map(|b| (b.name.as_str(), b.kind)).collect();
        assert_eq!(
            names,
            [
                ("01_all_reduce", Kind::Example),
                ("02_scatter", Kind::Example),
                ("mpi_p2p", Kind::MpiTest)
            ]
        );
        assert_eq!(skipped, ["07_nccl_all_reduce", "08_Cuda_aware"]);
        let (with_gpu, none_skipped) = select(&built, Path::new(root), true);
        assert_eq!(with_gpu.len(), 5);
        assert!(none_skipped.is_empty());
        assert_eq!(select(&[], Path::new(root), false).0, []);
    }
}
