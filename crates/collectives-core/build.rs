//! Compiles the small C shim that takes MPI's macro values (`MPI_IN_PLACE`, ...) from the MPI's own
//! `mpi.h`, found the same way rsmpi finds it.

fn main() {
    println!("cargo:rerun-if-changed=csrc/mpi_shim.c");
    println!("cargo:rerun-if-env-changed=MPICC");
    let lib = match build_probe_mpi::probe() {
        Ok(lib) => lib,
        Err(errs) => {
            for e in errs {
                println!("cargo:warning=MPI probe: {e}");
            }
            panic!("no MPI installation found: install one (e.g. `apt-get install libopenmpi-dev openmpi-bin`) or set MPICC");
        }
    };
    let mut build = cc::Build::new();
    build.file("csrc/mpi_shim.c").warnings(true);
    for dir in &lib.include_paths {
        build.include(dir);
    }
    build.compile("collectives_mpi_shim");
}
