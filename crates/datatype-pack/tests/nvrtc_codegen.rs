//! Generated sources compile with NVRTC (no GPU needed, only `libnvrtc`); compile errors carry
//! the log and the options; the compile cache returns what it compiled. Skipped (with a note)
//! where NVRTC cannot be loaded.
#![cfg(feature = "cuda")]

use std::sync::Arc;

use datatype_pack::{codegen, fused, gpu, Error, LaunchLimits, StridedBlock};

fn have_nvrtc() -> bool {
    match gpu::nvrtc_available() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("skipped: {e}");
            false
        }
    }
}

fn plans() -> Vec<StridedBlock> {
    vec![
        StridedBlock::new(0, 1 << 22, vec![], vec![]).unwrap(),
        StridedBlock::new(0, 8, vec![1 << 20], vec![512]).unwrap(),
        StridedBlock::new(3, 5, vec![7, 3], vec![9, 100]).unwrap(),
        StridedBlock::new(
            16,
            4096,
            vec![10, 3, 2, 2],
            vec![8192, 100_000, 1_000_000, 3_000_000],
        )
        .unwrap(),
        StridedBlock::new(0, 1 << 20, vec![4], vec![1 << 21]).unwrap(),
        StridedBlock::empty(),
    ]
}

#[test]
fn generated_sources_compile() {
    if !have_nvrtc() {
        return;
    }
    for p in plans() {
        for w in [1u32, 2, 4, 8, 16] {
            if w > p.word_size(0, 0) {
                continue;
            }
            let k = codegen::generate(&p, w).unwrap();
            let img = gpu::compile(k.source(), "sm_90", &[])
                .unwrap_or_else(|e| panic!("{e}\n{}", k.source()));
            assert!(!img.is_empty());
            let ptx = gpu::compile(k.source(), "compute_90", &[]).unwrap();
            let ptx = String::from_utf8_lossy(&ptx);
            if !p.is_empty() {
                assert!(ptx.contains(k.pack_name()) && ptx.contains(k.unpack_name()));
            }
            if w == 16 && !p.is_empty() {
                assert!(
                    ptx.contains("ld.global.nc.v4.u32") || ptx.contains("ld.global.v4.u32"),
                    "16-byte words must move as 128-bit loads:\n{ptx}"
                );
            }
            if let Ok(dir) = std::env::var("DTP_DUMP_DIR") {
                let name = format!("{dir}/{}.ptx", k.pack_name());
                std::fs::write(&name, ptx.as_bytes()).unwrap();
                std::fs::write(format!("{dir}/{}.cu", k.pack_name()), k.source()).unwrap();
            }
        }
    }
    let halo: Vec<StridedBlock> = plans().into_iter().take(4).collect();
    let regions = fused::layout(&halo).unwrap();
    let words: Vec<u32> = regions
        .iter()
        .map(|r| r.plan().word_size(0, r.packed_offset()))
        .collect();
    let k = codegen::generate_fused(&regions, &words, 1000, &LaunchLimits::CUDA).unwrap();
    gpu::compile(k.source(), "sm_90", &[]).unwrap_or_else(|e| panic!("{e}\n{}", k.source()));
}

#[test]
fn generated_copy_sources_compile() {
    if !have_nvrtc() {
        return;
    }
    // Every plan copied to an aligned and to an unaligned destination, in every word size the
    // pair allows, fused with all the others.
    for dst_start in [1u64 << 24, (1 << 24) + 4, 3] {
        let regions: Vec<fused::CopyRegion> = plans()
            .into_iter()
            .map(|p| fused::CopyRegion::new(p, dst_start))
            .collect();
        let words: Vec<u32> = regions.iter().map(|r| r.word_size(0, 0)).collect();
        let k = codegen::generate_fused_copy(&regions, &words, 1000, &LaunchLimits::CUDA).unwrap();
        let ptx = gpu::compile(k.source(), "compute_90", &[])
            .unwrap_or_else(|e| panic!("{e}\n{}", k.source()));
        let ptx = String::from_utf8_lossy(&ptx);
        assert!(ptx.contains(k.name()));
        if words.contains(&16) {
            assert!(
                ptx.contains("ld.global.nc.v4.u32") || ptx.contains("ld.global.v4.u32"),
                "16-byte words must move as 128-bit loads:\n{ptx}"
            );
        }
        gpu::compile(k.source(), "sm_90", &[]).unwrap();
    }
}

#[test]
fn compile_errors_carry_log_and_options() {
    if !have_nvrtc() {
        return;
    }
    let k = codegen::generate(&plans()[1], 8).unwrap();
    // An option NVRTC does not know.
    let bad = vec!["--no-such-option".to_string()];
    match gpu::compile(k.source(), "sm_90", &bad) {
        Err(Error::Compile {
            options, code, log, ..
        }) => {
            assert!(
                options.contains(&"--no-such-option".to_string()),
                "{options:?}"
            );
            assert!(options.contains(&"--gpu-architecture=sm_90".to_string()));
            eprintln!("bad option: {code}, log: {log:?}");
        }
        other => panic!("expected a compile error, got {:?}", other.map(|i| i.len())),
    }
    // A macro that breaks the source: the log names the error.
    let bad = vec!["--define-macro=reinterpret_cast=no_such_cast".to_string()];
    match gpu::compile(k.source(), "sm_90", &bad) {
        Err(e @ Error::Compile { .. }) => {
            let Error::Compile { ref log, .. } = e else {
                unreachable!()
            };
            assert!(log.contains("error"), "{log}");
            assert!(e.to_string().contains("no_such_cast"), "{e}");
        }
        other => panic!("expected a compile error, got {:?}", other.map(|i| i.len())),
    }
    // A broken source.
    match gpu::compile(
        "extern \"C\" __global__ void k() { undefined_fn(); }",
        "sm_90",
        &[],
    ) {
        Err(Error::Compile { log, .. }) => assert!(log.contains("undefined_fn"), "{log}"),
        other => panic!("expected a compile error, got {:?}", other.map(|i| i.len())),
    }
    // A NUL byte is refused before NVRTC sees it.
    assert!(matches!(
        gpu::compile("x", "sm_90", &["a\0b".to_string()]),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn compile_cache_memory_and_disk() {
    if !have_nvrtc() {
        return;
    }
    let p = StridedBlock::new(8, 24, vec![333, 3], vec![40, 20_000]).unwrap();
    let k = codegen::generate(&p, 8).unwrap();
    let a = gpu::compile(k.source(), "sm_90", &[]).unwrap();
    let b = gpu::compile(k.source(), "sm_90", &[]).unwrap();
    assert!(
        Arc::ptr_eq(&a, &b),
        "the second compile comes from the memory cache"
    );
    let c = gpu::compile(k.source(), "sm_90", &["-lineinfo".to_string()]).unwrap();
    assert!(!Arc::ptr_eq(&a, &c), "options are part of the key");

    let dir = std::env::temp_dir().join(format!("dtp-cache-test-{}", std::process::id()));
    std::env::set_var(gpu::CACHE_ENV, &dir);
    let q = StridedBlock::new(0, 12, vec![77], vec![36]).unwrap();
    let k = codegen::generate(&q, 4).unwrap();
    let first = gpu::compile(k.source(), "sm_90", &[]).unwrap();
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(!files.is_empty(), "an image was written to {dir:?}");
    gpu::clear_memory_cache();
    let again = gpu::compile(k.source(), "sm_90", &[]).unwrap();
    assert_eq!(&*first, &*again);
    std::env::remove_var(gpu::CACHE_ENV);
    let _ = std::fs::remove_dir_all(&dir);
}
