//! Without a CUDA driver, the GPU entry points return errors instead of panicking. Runs
//! everywhere (CI has no GPU); asserts only where `libcuda.so.1` cannot be loaded.
#![cfg(feature = "cuda")]

use datatype_pack::gpu;
use datatype_pack::Error;

fn loads(name: &str) -> bool {
    // SAFETY: opening a shared library runs its initialisers; the CUDA libraries' are sound to
    // run in a test process. The handle is dropped (closed) at once and no symbol is used.
    unsafe { libloading::Library::new(name) }.is_ok()
}

#[test]
fn context_without_a_driver_is_an_error() {
    if loads("libcuda.so.1") {
        eprintln!("skipped: libcuda.so.1 loads here, so this machine has a CUDA driver");
        return;
    }
    match gpu::context(0) {
        Err(Error::LibraryNotFound { library, tried, .. }) => {
            assert_eq!(library, "cuda");
            assert!(tried.iter().any(|n| n == "libcuda.so.1"), "{tried:?}");
        }
        other => panic!("expected LibraryNotFound, got {other:?}"),
    }
    // The probe result is cached; asking again gives the same answer.
    assert!(gpu::driver_available().is_err());
    assert!(gpu::context(0).is_err());
}

#[test]
fn compile_without_nvrtc_is_an_error() {
    if loads("libnvrtc.so.13") || loads("libnvrtc.so") || loads("libnvrtc.so.12") {
        eprintln!("skipped: an NVRTC library loads here");
        return;
    }
    let r = gpu::compile("extern \"C\" __global__ void k() {}", "sm_90", &[]);
    assert!(
        matches!(
            r,
            Err(Error::LibraryNotFound {
                library: "nvrtc",
                ..
            })
        ),
        "{r:?}"
    );
}
