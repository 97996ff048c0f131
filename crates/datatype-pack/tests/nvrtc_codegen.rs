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

/// The PTX of the entry `name` in `ptx`: from its `.entry` line to the next entry (or the end).
fn entry<'a>(ptx: &'a str, name: &str) -> &'a str {
    let at = ptx
        .find(&format!(".entry {name}("))
        .unwrap_or_else(|| panic!("no entry {name} in\n{ptx}"));
    let rest = &ptx[at..];
    let end = rest[1..].find(".entry ").map_or(rest.len(), |e| e + 1);
    &rest[..end]
}

#[test]
fn channel_sources_compile_with_their_fences_and_volatile_words() {
    if !have_nvrtc() {
        return;
    }
    for p in plans().into_iter().filter(|p| !p.is_empty()) {
        for w in [1u32, 2, 4, 8, 16] {
            if w > p.word_size(0, 0) {
                continue;
            }
            let k = codegen::generate_channel(&p, w, &LaunchLimits::CUDA).unwrap();
            gpu::compile(k.source(), "sm_90", &[])
                .unwrap_or_else(|e| panic!("{e}\n{}", k.source()));
            let ptx = gpu::compile(k.source(), "compute_90", &[]).unwrap();
            let ptx = String::from_utf8_lossy(&ptx);
            if let Ok(dir) = std::env::var("DTP_DUMP_DIR") {
                let name = format!("{dir}/{}.ptx", k.pack_name());
                std::fs::write(&name, ptx.as_bytes()).unwrap();
                std::fs::write(format!("{dir}/{}.cu", k.pack_name()), k.source()).unwrap();
            }
            let (pack, unpack) = (entry(&ptx, k.pack_name()), entry(&ptx, k.unpack_name()));
            // The pack: system-wide fences, the block count, the flag stored as it is.
            assert!(
                pack.contains("fence.sc.sys") || pack.contains("membar.sys"),
                "{p:?} in {w}-byte words: no system-wide fence in\n{pack}"
            );
            assert!(pack.contains("atom.global.add.u32") || pack.contains("atom.add.u32"));
            assert!(pack.contains("st.volatile.global.u64") || pack.contains("st.volatile.u64"));
            // The unpack: the words read afresh each turn, the GPU's clock, the acquire fence,
            // and the packed side read through the coherent path (never `ld.global.nc`).
            assert!(
                unpack.contains("ld.volatile.global.u64") || unpack.contains("ld.volatile.u64"),
                "{p:?} in {w}-byte words: no volatile load in\n{unpack}"
            );
            assert!(unpack.contains("%globaltimer"));
            assert!(unpack.contains("fence.sc.sys") || unpack.contains("membar.sys"));
            assert!(
                !unpack.contains("ld.global.nc"),
                "{p:?} in {w}-byte words: a non-coherent load in the unpack\n{unpack}"
            );
        }
    }
}

#[test]
fn flat_sources_compile_without_runtime_division() {
    if !have_nvrtc() {
        return;
    }
    let plans = [
        StridedBlock::new(0, 4 << 20, vec![], vec![]).unwrap(),
        StridedBlock::new(3, 1001, vec![], vec![]).unwrap(),
        StridedBlock::new(4, 4, vec![1000, 1, 3], vec![4, 77, 4000]).unwrap(),
        StridedBlock::new(0, 1, vec![1 << 20], vec![512]).unwrap(),
        StridedBlock::new(2, 2, vec![1000, 70], vec![6, 7000]).unwrap(),
        StridedBlock::new(0, 2, vec![100_000, 70_000], vec![4, 400_000]).unwrap(),
        StridedBlock::new(0, 128, vec![1000], vec![512]).unwrap(),
    ];
    for p in &plans {
        for w in [1u32, 2, 4, 8, 16] {
            if w > p.word_size(0, 0) {
                continue;
            }
            let k = codegen::generate(p, w).unwrap();
            assert!(k.shape().is_flat(), "{p:?} in {w}-byte words");
            let ptx = gpu::compile(k.source(), "compute_90", &[])
                .unwrap_or_else(|e| panic!("{e}\n{}", k.source()));
            let ptx = String::from_utf8_lossy(&ptx);
            assert!(ptx.contains(k.pack_name()) && ptx.contains(k.unpack_name()));
            // Every divisor is a constant: no division instruction (nor its slow path).
            for op in [
                "div.u64", "rem.u64", "div.s64", "rem.s64", "div.u32", "rem.u32",
            ] {
                assert!(
                    !ptx.contains(op),
                    "{op} in the flat kernels of {p:?}:\n{ptx}"
                );
            }
            if w == 16 {
                assert!(
                    ptx.contains("ld.global.nc.v4.u32") || ptx.contains("ld.global.v4.u32"),
                    "16-byte words must move as 128-bit loads:\n{ptx}"
                );
            }
            gpu::compile(k.source(), "sm_90", &[]).unwrap();
        }
    }
}

/// The send faces of a cube of `n` interior cells per side, halo radius `r`, `elem`-byte cells,
/// 8 quantities: 6 faces, or 26 regions with `all26`.
fn halo_faces(n: u64, r: u64, elem: u64, all26: bool) -> Vec<StridedBlock> {
    use datatype_pack::construct::{subarray, Order};
    let size = n + 2 * r;
    let mut out = Vec::new();
    for d in (0..27).map(|k| [k / 9, (k / 3) % 3, k % 3]) {
        let nonzero = d.iter().filter(|&&v| v != 1).count();
        if nonzero == 0 || (!all26 && nonzero != 1) {
            continue;
        }
        let pick = |v: u64| match v {
            0 => (r, r),
            1 => (r, n),
            _ => (n, r),
        };
        let (mut starts, mut subs): (Vec<u64>, Vec<u64>) = d.iter().map(|&v| pick(v)).unzip();
        starts.insert(0, 0);
        subs.insert(0, 8);
        let t = subarray(&[8, size, size, size], &subs, &starts, Order::C, elem).unwrap();
        out.push(StridedBlock::from_type(&t).unwrap());
    }
    out
}

#[test]
fn fused_flat_sources_compile_without_runtime_division() {
    if !have_nvrtc() {
        return;
    }
    for (n, r, elem, all26) in [
        (256, 3, 8, false),
        (20, 1, 4, true),
        (31, 2, 16, true),
        (17, 3, 1, true),
    ] {
        let faces = halo_faces(n, r, elem, all26);
        let regions = fused::layout(&faces).unwrap();
        // The widest words, words of 1 byte, and the words of a view 4 bytes off.
        for addr in [0u64, 1, 4] {
            let words: Vec<u32> = regions
                .iter()
                .map(|g| g.plan().word_size(addr, g.packed_offset()))
                .collect();
            for budget in [1, 1000, u64::MAX] {
                let k =
                    codegen::generate_fused(&regions, &words, budget, &LaunchLimits::CUDA).unwrap();
                let ptx = gpu::compile(k.source(), "compute_90", &[])
                    .unwrap_or_else(|e| panic!("{e}\n{}", k.source()));
                let ptx = String::from_utf8_lossy(&ptx);
                assert!(ptx.contains(k.pack_name()) && ptx.contains(k.unpack_name()));
                for op in [
                    "div.u64", "rem.u64", "div.s64", "rem.s64", "div.u32", "rem.u32",
                ] {
                    assert!(!ptx.contains(op), "{op} in the fused kernels of {faces:?}");
                }
                // A periodic copy of each face onto the opposite one, in the same words.
                let copies: Vec<fused::CopyRegion> = faces
                    .iter()
                    .map(|f| fused::CopyRegion::new(f.clone(), f.start() + elem * n))
                    .collect();
                let cw: Vec<u32> = copies.iter().map(|c| c.word_size(addr, addr)).collect();
                let c = codegen::generate_fused_copy(&copies, &cw, budget, &LaunchLimits::CUDA)
                    .unwrap();
                let ptx = gpu::compile(c.source(), "compute_90", &[])
                    .unwrap_or_else(|e| panic!("{e}\n{}", c.source()));
                let ptx = String::from_utf8_lossy(&ptx);
                assert!(ptx.contains(c.name()));
                for op in ["div.u64", "rem.u64", "div.u32", "rem.u32"] {
                    assert!(!ptx.contains(op), "{op} in the fused copy of {faces:?}");
                }
            }
        }
    }
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

#[test]
fn compile_from_several_threads_at_once() {
    // What the GPU tests' warm-ups rely on: `gpu::compile` called from many threads at once
    // compiles every source (NVRTC runs distinct programs concurrently; the cache's lock is
    // not held during a compile) and gives the images a compile one at a time gives.
    if !have_nvrtc() {
        return;
    }
    let sources: Vec<String> = (1..=12u64)
        .map(|i| {
            let p = StridedBlock::new(4, 4 * i, vec![100, 3], vec![4 * i + 60, 40_000]).unwrap();
            codegen::generate(&p, 4).unwrap().source().to_string()
        })
        .collect();
    // A macro the sources do not use keeps each run's keys apart, so both runs compile.
    let opts = |run: u32| vec![format!("-DDTP_THREAD_TEST_RUN={run}")];
    let t = std::time::Instant::now();
    let serial: Vec<Arc<[u8]>> = sources
        .iter()
        .map(|s| gpu::compile(s, "sm_90", &opts(1)).unwrap())
        .collect();
    let serial_s = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    let parallel: Vec<Arc<[u8]>> = std::thread::scope(|scope| {
        let handles: Vec<_> = sources
            .iter()
            .map(|s| scope.spawn(|| gpu::compile(s, "sm_90", &opts(2)).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let parallel_s = t.elapsed().as_secs_f64();
    for (i, (a, b)) in serial.iter().zip(&parallel).enumerate() {
        assert!(!a.is_empty());
        assert!(a[..] == b[..], "source {i}: the images differ");
    }
    println!(
        "{} sources: {serial_s:.2} s one at a time, {parallel_s:.2} s from {} threads at once \
         ({} cores)",
        sources.len(),
        sources.len(),
        std::thread::available_parallelism().map_or(1, usize::from)
    );
}
