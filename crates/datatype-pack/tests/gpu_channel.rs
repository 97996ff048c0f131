//! The channel kernels ([`gpu::launch_channel`]) against the CPU reference on one GPU: a pack
//! that signals its flag once every block has packed; an unpack released by its flag (set
//! before, or later from another stream), called off, given up; both as one graph in a loop,
//! a flag from an older message never releasing; on a stream being captured; the checks before
//! a launch. Every byte of the buffers is compared, so bytes a kernel must not touch are checked
//! too. Needs a CUDA device: run with
//! `cargo test -p datatype-pack --test gpu_channel -- --ignored`.
#![cfg(feature = "cuda")]

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use datatype_pack::gpu::cudarc::driver::sys;
use datatype_pack::gpu::cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use datatype_pack::gpu::{self, ChannelRecv, ChannelSend, Packer};
use datatype_pack::{cpu, Error, LaunchLimits, LaunchShape, StridedBlock};

/// The tests one at a time: they share the legacy stream, and a kernel waiting there for a word
/// another test's thread writes would wait behind that test's own waiting kernel, or its thread
/// behind a call that waits for the device (a module loaded, pageable memory copied).
fn serial() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

fn ctx() -> Arc<CudaContext> {
    static CTX: OnceLock<Arc<CudaContext>> = OnceLock::new();
    CTX.get_or_init(|| gpu::context(0).expect("a CUDA device"))
        .clone()
}

/// The layouts, flat and by axes, in words of 1 to 16 bytes (in buffers aligned to 256 bytes,
/// as every allocation is): an x face of 8-byte blocks 1 KiB apart (many thread blocks), rows
/// of 2 KiB, odd 3-byte blocks (1-byte words), 32-byte blocks, 6- and 12-byte blocks (2- and
/// 4-byte words), 8 MiB contiguous (more thread blocks than one wave of the device holds, so
/// the unpack's grid is capped below the pack's); by axes, blocks of 24, 48, 5 and 6 bytes in
/// three dimensions and 4 KiB blocks in four. [`coverage`] checks that they are so.
fn plans() -> Vec<StridedBlock> {
    vec![
        StridedBlock::new(8, 8, vec![128, 128], vec![1024, 131_072]).unwrap(),
        StridedBlock::new(0, 2048, vec![64], vec![4096]).unwrap(),
        StridedBlock::new(3, 3, vec![17, 5], vec![7, 200]).unwrap(),
        StridedBlock::new(0, 32, vec![100], vec![48]).unwrap(),
        StridedBlock::new(2, 6, vec![300, 7], vec![10, 4000]).unwrap(),
        StridedBlock::new(4, 12, vec![40, 3], vec![20, 900]).unwrap(),
        StridedBlock::new(16, 8 << 20, vec![], vec![]).unwrap(),
        StridedBlock::new(8, 24, vec![20, 10, 6], vec![40, 1000, 12_000]).unwrap(),
        StridedBlock::new(0, 48, vec![2000, 4, 3], vec![64, 130_000, 600_000]).unwrap(),
        StridedBlock::new(1, 5, vec![7, 3, 4], vec![9, 100, 400]).unwrap(),
        StridedBlock::new(2, 6, vec![50, 3, 4], vec![8, 500, 1600]).unwrap(),
        StridedBlock::new(
            16,
            4096,
            vec![10, 3, 2, 2],
            vec![8192, 100_000, 1_000_000, 3_000_000],
        )
        .unwrap(),
    ]
}

/// Checks that [`plans`] cover what they claim: every word size, both mappings, grids of
/// several thread blocks, and one grid past a wave of the device (the unpack's capped below
/// the pack's, [`Packer::launch_dims`] giving the pack's).
fn coverage() {
    let (mut words, mut flat, mut by_axes, mut multi, mut past_wave) =
        (Vec::new(), false, false, false, false);
    let residency = gpu::Residency::of(&ctx()).unwrap();
    let limits = LaunchLimits {
        max_threads_per_block: gpu::GpuOptions::default().max_threads_per_block,
        ..LaunchLimits::CUDA
    };
    for plan in plans() {
        let w = plan.word_size(256, 256);
        let shape = LaunchShape::for_plan(&plan, w, &limits).unwrap();
        words.push(w);
        flat |= shape.is_flat();
        by_axes |= !shape.is_flat();
        let (grid, block) = Packer::new(&ctx(), &plan).unwrap().launch_dims(w).unwrap();
        assert_eq!(block, shape.block());
        let blocks: u64 = grid.iter().map(|&g| u64::from(g)).product();
        multi |= blocks > 1 && !shape.is_flat();
        past_wave |= blocks > residency.wave(shape.threads_per_block());
    }
    words.sort_unstable();
    words.dedup();
    assert_eq!(words, [1, 2, 4, 8, 16], "every word size");
    assert!(flat && by_axes, "both mappings");
    assert!(multi, "a grid of several blocks by axes");
    assert!(past_wave, "a grid past one wave");
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Panics with the first differing byte (and how many differ) where `got` is not `want`.
fn same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        let n = got.iter().zip(want).filter(|(a, b)| a != b).count();
        panic!(
            "{what}: {n} of {} bytes differ, the first at {at:?} (lengths {} and {})",
            want.len(),
            got.len(),
            want.len()
        );
    }
}

fn addr<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (p, _sync) = s.device_ptr(stream);
    p
}

fn word(stream: &Arc<CudaStream>, v: u64) -> CudaSlice<u64> {
    stream.clone_htod(&[v]).unwrap()
}

fn read(stream: &Arc<CudaStream>, w: &CudaSlice<u64>) -> u64 {
    stream.clone_dtoh(w).unwrap()[0]
}

/// A non-blocking stream of the context, for writes that must not wait behind a spinning
/// kernel on the legacy stream.
fn side_stream() -> sys::CUstream {
    ctx().bind_to_thread().unwrap();
    let mut s: sys::CUstream = std::ptr::null_mut();
    // SAFETY: the context is current; `s` is a valid out-pointer.
    let rc =
        unsafe { sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) };
    assert_eq!(rc, sys::CUresult::CUDA_SUCCESS);
    s
}

/// A word of pinned host memory, for copies on a stream while a kernel spins (allocating or
/// freeing pinned memory then would wait for the kernel).
fn pinned_word() -> *mut u64 {
    ctx().bind_to_thread().unwrap();
    let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: the context is current; `host` is a valid out-pointer; the word is kept for the
    // test binary's life.
    let rc = unsafe { sys::cuMemAllocHost_v2(&mut host, 8) };
    assert_eq!(rc, sys::CUresult::CUDA_SUCCESS);
    host.cast()
}

/// Writes `v` into the word at `at` from stream `s` (a copy from the pinned word `host`), after
/// `delay`, and waits for it.
fn write_later(s: sys::CUstream, host: *mut u64, at: u64, v: u64, delay: Duration) {
    std::thread::sleep(delay);
    // SAFETY: `host` is a pinned word (`pinned_word`), `at` a live word of this context and
    // `s` its stream; the copy is waited for before the word is used again.
    unsafe {
        host.write_volatile(v);
        assert_eq!(
            sys::cuMemcpyHtoDAsync_v2(at, host.cast_const().cast(), 8, s),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(sys::cuStreamSynchronize(s), sys::CUresult::CUDA_SUCCESS);
    }
}

/// The device buffers of one receive: the peer's slot (packed), the strided buffer, the flag,
/// call-off and give-up words, with their host copies.
struct Recv {
    slot_host: Vec<u8>,
    slot: CudaSlice<u8>,
    strided_host: Vec<u8>,
    strided: CudaSlice<u8>,
    flag: CudaSlice<u64>,
    cancel: CudaSlice<u64>,
    gave_up: CudaSlice<u64>,
}

impl Recv {
    fn new(stream: &Arc<CudaStream>, plan: &StridedBlock, seed: u64) -> Recv {
        let slot_host = pattern(plan.packed_size() as usize, seed);
        let strided_host: Vec<u8> = (0..plan.extent_end() as usize + 64)
            .map(|i| 0x5A ^ (i as u8))
            .collect();
        Recv {
            slot: stream.clone_htod(&slot_host).unwrap(),
            strided: stream.clone_htod(&strided_host).unwrap(),
            slot_host,
            strided_host,
            flag: word(stream, 0),
            cancel: word(stream, 0),
            gave_up: word(stream, 0),
        }
    }

    fn args(&self, stream: &CudaStream, seq: u64, patience_ns: u64) -> ChannelRecv {
        ChannelRecv {
            src: addr(&self.slot, stream),
            src_len: self.slot_host.len(),
            dst: addr(&self.strided, stream),
            dst_len: self.strided_host.len(),
            seq,
            flag: addr(&self.flag, stream),
            cancel: addr(&self.cancel, stream),
            gave_up: addr(&self.gave_up, stream),
            patience_ns,
        }
    }

    /// The strided buffer as the CPU reference unpacks the slot into it.
    fn unpacked(&self, plan: &StridedBlock) -> Vec<u8> {
        let mut want = self.strided_host.clone();
        cpu::unpack(plan, &self.slot_host, &mut want).unwrap();
        want
    }

    fn strided_now(&self, stream: &Arc<CudaStream>) -> Vec<u8> {
        stream.clone_dtoh(&self.strided).unwrap()
    }
}

/// Launches the receive side alone on `stream`.
fn launch_recv(stream: &Arc<CudaStream>, packer: &Packer, r: &ChannelRecv) -> Result<(), Error> {
    // SAFETY: every address is a live allocation of this context of the lengths given, used by
    // nothing else until the stream is synchronized.
    unsafe { gpu::launch_channel(stream, None, Some((packer, r))) }
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_pack_signals_once_every_block_packed() {
    let _one = serial();
    coverage();
    let stream = ctx().default_stream();
    for (i, plan) in plans().iter().enumerate() {
        let packer = Packer::new(&ctx(), plan).unwrap();
        let packed = plan.packed_size() as usize;
        let arrived = stream.clone_htod(&[0u32, 0u32]).unwrap();
        let flag = word(&stream, 0);
        for seq in 1..=3u64 {
            let host = pattern(plan.extent_end() as usize + 5, seq * 31 + i as u64);
            let src = stream.clone_htod(&host).unwrap();
            let slot_init = vec![0xA5u8; packed + 9];
            let slot = stream.clone_htod(&slot_init).unwrap();
            let send = ChannelSend {
                src: addr(&src, &stream),
                src_len: host.len(),
                dst: addr(&slot, &stream),
                dst_len: packed,
                seq,
                arrived: addr(&arrived, &stream),
                flag: addr(&flag, &stream),
            };
            // SAFETY: live allocations of this context of the lengths given.
            unsafe { gpu::launch_channel(&stream, Some((&packer, &send)), None) }.unwrap();
            stream.synchronize().unwrap();
            let mut want = slot_init.clone();
            cpu::pack(plan, &host, &mut want[..packed]).unwrap();
            same(
                &stream.clone_dtoh(&slot).unwrap(),
                &want,
                &format!("plan {i}, message {seq}"),
            );
            assert_eq!(
                read(&stream, &flag),
                seq,
                "plan {i}: the flag says the message"
            );
            assert_eq!(
                stream.clone_dtoh(&arrived).unwrap(),
                vec![0, 0],
                "plan {i}: the block counter set back, its neighbour untouched"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_unpack_is_released_by_its_flag_set_before() {
    let _one = serial();
    let stream = ctx().default_stream();
    for (i, plan) in plans().iter().enumerate() {
        let packer = Packer::new(&ctx(), plan).unwrap();
        // The flag at the message, or past it (a later message's), releases it.
        for flag in [8u64, 9] {
            let mut r = Recv::new(&stream, plan, 7 + i as u64 + flag);
            stream.memcpy_htod(&[flag], &mut r.flag).unwrap();
            launch_recv(&stream, &packer, &r.args(&stream, 8, 2_000_000_000)).unwrap();
            stream.synchronize().unwrap();
            same(
                &r.strided_now(&stream),
                &r.unpacked(plan),
                &format!("plan {i}, flag {flag}"),
            );
            assert_eq!(
                read(&stream, &r.gave_up),
                0,
                "plan {i}, flag {flag}: no give-up"
            );
        }
    }
}

/// Which word of a waiting unpack another stream writes ([`written_while_waiting`]).
#[derive(Clone, Copy)]
enum Word {
    Flag,
    Cancel,
}

/// For every plan: the unpack of message `seq` launched waiting (the flag at `seq - 1`, a
/// message before, which does not release it), then `word` set to `seq` from another stream
/// after `delay`. Released by its flag, the layout is the CPU reference's unpack; called off,
/// nothing is written. Neither gives up.
fn written_while_waiting(word: Word, seq: u64, seed: u64, delay: Duration) {
    let _one = serial();
    let stream = ctx().default_stream();
    let (side, host) = (side_stream(), pinned_word());
    for (i, plan) in plans().iter().enumerate() {
        let packer = Packer::new(&ctx(), plan).unwrap();
        let mut r = Recv::new(&stream, plan, seed + i as u64);
        stream.memcpy_htod(&[seq - 1], &mut r.flag).unwrap();
        stream.synchronize().unwrap();
        launch_recv(&stream, &packer, &r.args(&stream, seq, 2_000_000_000)).unwrap();
        let (at, want, what) = match word {
            Word::Flag => (&r.flag, r.unpacked(plan), format!("plan {i}")),
            Word::Cancel => (
                &r.cancel,
                r.strided_host.clone(),
                format!("plan {i}: nothing written"),
            ),
        };
        write_later(side, host, addr(at, &stream), seq, delay);
        stream.synchronize().unwrap();
        same(&r.strided_now(&stream), &want, &what);
        assert_eq!(read(&stream, &r.gave_up), 0, "plan {i}: no give-up");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_unpack_waits_for_a_flag_set_later_from_another_stream() {
    written_while_waiting(Word::Flag, 5, 70, Duration::from_millis(20));
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_called_off_unpack_writes_nothing() {
    written_while_waiting(Word::Cancel, 3, 170, Duration::from_millis(5));
}

#[test]
#[ignore = "needs a CUDA device"]
fn an_unpack_gives_up_after_its_patience_and_says_so() {
    let _one = serial();
    let stream = ctx().default_stream();
    for (i, plan) in plans().iter().enumerate() {
        let packer = Packer::new(&ctx(), plan).unwrap();
        let mut r = Recv::new(&stream, plan, 270 + i as u64);
        // The flag and the call-off word of older messages: no release, no call-off.
        stream.memcpy_htod(&[6u64], &mut r.flag).unwrap();
        stream.memcpy_htod(&[6u64], &mut r.cancel).unwrap();
        launch_recv(&stream, &packer, &r.args(&stream, 7, 50_000)).unwrap();
        stream.synchronize().unwrap();
        same(
            &r.strided_now(&stream),
            &r.strided_host,
            &format!("plan {i}: nothing written"),
        );
        assert_eq!(
            read(&stream, &r.gave_up),
            7,
            "plan {i}: the give-up says the message"
        );
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn pack_and_unpack_as_one_graph_round_trip_message_after_message() {
    let _one = serial();
    let stream = ctx().default_stream();
    for (i, plan) in plans().iter().enumerate() {
        let packer = Packer::new(&ctx(), plan).unwrap();
        let packed = plan.packed_size() as usize;
        let extent = plan.extent_end() as usize + 64;
        let slots = [
            stream.alloc_zeros::<u8>(packed).unwrap(),
            stream.alloc_zeros::<u8>(packed).unwrap(),
        ];
        let arrived = stream.alloc_zeros::<u32>(1).unwrap();
        let flags = stream.alloc_zeros::<u64>(2).unwrap();
        let cancel = word(&stream, 0);
        let gave_up = word(&stream, 0);
        let init: Vec<u8> = (0..extent).map(|b| 0x5A ^ (b as u8)).collect();
        let dst = stream.clone_htod(&init).unwrap();
        for seq in 2..8u64 {
            let host = pattern(extent, seq * 1000 + i as u64);
            let src = stream.clone_htod(&host).unwrap();
            let slot = &slots[(seq % 2) as usize];
            let flag = addr(&flags, &stream) + 8 * (seq % 2);
            let send = ChannelSend {
                src: addr(&src, &stream),
                src_len: extent,
                dst: addr(slot, &stream),
                dst_len: packed,
                seq,
                arrived: addr(&arrived, &stream),
                flag,
            };
            let recv = ChannelRecv {
                src: addr(slot, &stream),
                src_len: packed,
                dst: addr(&dst, &stream),
                dst_len: extent,
                seq,
                flag,
                cancel: addr(&cancel, &stream),
                gave_up: addr(&gave_up, &stream),
                patience_ns: 10_000_000_000,
            };
            // SAFETY: live allocations of this context of the lengths given; the slot is
            // written by the pack only, read by the unpack after its flag.
            unsafe { gpu::launch_channel(&stream, Some((&packer, &send)), Some((&packer, &recv))) }
                .unwrap();
            stream.synchronize().unwrap();
            // The layout's bytes are the source's; the others as they were.
            let mut want = init.clone();
            let mut p = vec![0u8; packed];
            cpu::pack(plan, &host, &mut p).unwrap();
            cpu::unpack(plan, &p, &mut want).unwrap();
            same(
                &stream.clone_dtoh(&dst).unwrap(),
                &want,
                &format!("plan {i}, message {seq}"),
            );
            assert_eq!(
                read(&stream, &gave_up),
                0,
                "plan {i}, message {seq}: no give-up"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_stream_being_captured_gets_both_kernels_in_its_graph() {
    let _one = serial();
    let cap = ctx().new_stream().unwrap();
    for (i, plan) in plans().iter().enumerate() {
        let packer = Packer::new(&ctx(), plan).unwrap();
        let packed = plan.packed_size() as usize;
        let extent = plan.extent_end() as usize + 64;
        let host = pattern(extent, 5000 + i as u64);
        let init: Vec<u8> = (0..extent).map(|b| 0xC3 ^ (b as u8)).collect();
        let src = cap.clone_htod(&host).unwrap();
        let dst = cap.clone_htod(&init).unwrap();
        let slot = cap.alloc_zeros::<u8>(packed).unwrap();
        let arrived = cap.alloc_zeros::<u32>(1).unwrap();
        let flag = cap.alloc_zeros::<u64>(1).unwrap();
        let cancel = cap.alloc_zeros::<u64>(1).unwrap();
        let gave_up = cap.alloc_zeros::<u64>(1).unwrap();
        // The addresses before the capture (cudarc's guards record events, which a capture
        // does not allow from outside), and the kernels compiled and loaded before it too.
        let (sp, dp, slot_p) = (addr(&src, &cap), addr(&dst, &cap), addr(&slot, &cap));
        packer.prepare_channel(plan.word_size(sp, slot_p)).unwrap();
        packer.prepare_channel(plan.word_size(dp, slot_p)).unwrap();
        let send = ChannelSend {
            src: sp,
            src_len: extent,
            dst: slot_p,
            dst_len: packed,
            seq: 1,
            arrived: addr(&arrived, &cap),
            flag: addr(&flag, &cap),
        };
        let recv = ChannelRecv {
            src: slot_p,
            src_len: packed,
            dst: dp,
            dst_len: extent,
            seq: 1,
            flag: send.flag,
            cancel: addr(&cancel, &cap),
            gave_up: addr(&gave_up, &cap),
            patience_ns: 2_000_000_000,
        };
        cap.synchronize().unwrap();
        cap.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .unwrap();
        // SAFETY: live allocations of this context of the lengths given, used by nothing else
        // until the graph has run on `cap` (synchronized below); the slot is written by the
        // pack only and read by the unpack after its flag.
        let launched =
            unsafe { gpu::launch_channel(&cap, Some((&packer, &send)), Some((&packer, &recv))) };
        let graph = cap.end_capture(sys::CUgraphInstantiate_flags(0));
        launched.unwrap();
        let graph = graph.unwrap().expect("the capture holds the two kernels");
        graph.launch().unwrap();
        cap.synchronize().unwrap();
        let mut want = init.clone();
        let mut p = vec![0u8; packed];
        cpu::pack(plan, &host, &mut p).unwrap();
        cpu::unpack(plan, &p, &mut want).unwrap();
        same(&cap.clone_dtoh(&dst).unwrap(), &want, &format!("plan {i}"));
        same(
            &cap.clone_dtoh(&slot).unwrap(),
            &p,
            &format!("plan {i}: the slot"),
        );
        assert_eq!(read(&cap, &flag), 1, "plan {i}: the flag says the message");
        assert_eq!(read(&cap, &gave_up), 0, "plan {i}: no give-up");
        assert_eq!(
            cap.clone_dtoh(&arrived).unwrap(),
            [0],
            "plan {i}: counter set back"
        );
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn launches_are_checked_first() {
    let _one = serial();
    let stream = ctx().default_stream();
    let plan = plans().remove(0);
    let packer = Packer::new(&ctx(), &plan).unwrap();
    let r = Recv::new(&stream, &plan, 1);
    let ok = r.args(&stream, 1, 1000);
    let fails = |a: ChannelRecv| launch_recv(&stream, &packer, &a).is_err();
    assert!(fails(ChannelRecv { flag: 0, ..ok }), "a null flag");
    assert!(
        fails(ChannelRecv {
            cancel: ok.cancel + 4,
            ..ok
        }),
        "a misaligned call-off word"
    );
    assert!(
        matches!(
            launch_recv(
                &stream,
                &packer,
                &ChannelRecv {
                    src_len: ok.src_len - 1,
                    ..ok
                }
            ),
            Err(Error::BufferTooSmall { .. })
        ),
        "a slot shorter than the packed size"
    );
    assert!(
        matches!(
            launch_recv(&stream, &packer, &ChannelRecv { dst_len: 8, ..ok }),
            Err(Error::OutOfBounds { .. })
        ),
        "a strided buffer shorter than the layout"
    );
    let empty = StridedBlock::new(0, 0, vec![], vec![]).unwrap();
    if let Ok(p) = Packer::new(&ctx(), &empty) {
        assert!(launch_recv(&stream, &p, &ok).is_err(), "an empty plan");
    }
    stream.synchronize().unwrap();
    same(&r.strided_now(&stream), &r.strided_host, "nothing launched");
}
