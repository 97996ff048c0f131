//! The collective test suite, written once against the `Communicator` trait and run on every backend:
//! rank-dependent inputs, answers computed here, buffers moved through the backend's own memory.
#![allow(dead_code)]

use collectives::{
    op::refusal, scope, Buf, BufMut, Communicator, DeviceCommunicator, Element, Error, ReduceOp,
};
use half::bf16;
use num_complex::Complex;

use super::T;

/// A grouped exchange's parts and bytes on one rank (`exchange_bytes` on any backend): every rank
/// sends every rank (itself included) one part whose length and bytes depend on both ranks, in rank
/// order (`sends[..size]`), then two more in a row (4 and 9 bytes) to its right neighbour, which
/// must arrive in that order (`sends[size..]`); `recvs` and `want` mirror them.
pub struct ExchangeLayout {
    pub send: Vec<u8>,
    pub sends: Vec<collectives::ExchangePart>,
    pub want: Vec<u8>,
    pub recvs: Vec<collectives::ExchangePart>,
}

/// The [`ExchangeLayout`] of `rank` of `size`, computed here from the ranks alone.
pub fn exchange_layout(rank: usize, size: usize) -> ExchangeLayout {
    use collectives::ExchangePart;
    let len = |from: usize, to: usize| (from * 3 + to * 5) % 7 + 1;
    let byte = |from: usize, to: usize, k: usize| (from * 31 + to * 7 + k) as u8;
    let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
    let mut l = ExchangeLayout {
        send: Vec::new(),
        sends: Vec::new(),
        want: Vec::new(),
        recvs: Vec::new(),
    };
    // One part, to `peer` (sent) or from it (received), and its bytes, at the end of its buffer.
    let push = |parts: &mut Vec<ExchangePart>,
                bytes: &mut Vec<u8>,
                peer,
                n,
                byte: &dyn Fn(usize) -> u8| {
        parts.push(ExchangePart {
            peer,
            offset: bytes.len(),
            len: n,
        });
        bytes.extend((0..n).map(byte));
    };
    for (peer, n, salt) in (0..size)
        .map(|p| (p, len(rank, p), 0))
        .chain([(right, 4, 100), (right, 9, 200)])
    {
        push(&mut l.sends, &mut l.send, peer, n, &|k| {
            byte(rank, peer, k + salt)
        });
    }
    for (peer, n, salt) in (0..size)
        .map(|p| (p, len(p, rank), 0))
        .chain([(left, 4, 100), (left, 9, 200)])
    {
        push(&mut l.recvs, &mut l.want, peer, n, &|k| {
            byte(peer, rank, k + salt)
        });
    }
    l
}

/// A backend as the suite drives it: how to put host values into its buffers and read them back.
pub trait Backend: Communicator {
    /// An owned buffer of this backend.
    type Owned<V: Val>;
    /// An owned buffer, to read.
    fn r<V: Val>(o: &Self::Owned<V>) -> &Buf<'_, Self, V>;
    /// An owned buffer, to write.
    fn w<V: Val>(o: &mut Self::Owned<V>) -> &mut BufMut<'_, Self, V>;
    /// A buffer holding `host`.
    fn up<V: Val>(&self, host: &[V]) -> Self::Owned<V>;
    /// The values of `buf`, once the work before it is complete.
    fn down<V: Val>(&self, buf: &Buf<Self, V>) -> Vec<V>;
    /// The values of a writable buffer (a plan's, say), once the work before it is complete.
    fn down_mut<V: Val>(&self, buf: &BufMut<Self, V>) -> Vec<V> {
        self.down(<Self::Memory as collectives::Space>::read(buf))
    }
    /// Write `host` into `buf` (equal lengths), ordered before later work on it.
    fn fill<V: Val>(&self, buf: &mut BufMut<Self, V>, host: &[V]);
    /// A buffer of `len` zeros (large ones need not be touched on the host).
    fn zeros<V: Val>(&self, len: usize) -> Self::Owned<V> {
        self.up(&vec![V::from_i(0); len])
    }
    /// The largest tag point-to-point operations take (`MPI_TAG_UB` on MPI backends).
    fn tag_ub(&self) -> i32 {
        i32::MAX
    }
    /// Wait on the host for the work this rank handed to the backend so far: the first host wait
    /// of a stream-ordered backend (NCCL's `synchronize`), where a silent or dead peer surfaces as
    /// `Timeout`; nothing on backends whose blocking calls complete before they return.
    fn settle(&self) -> Result<(), Error> {
        Ok(())
    }
    /// Whether blocking calls return once enqueued ([`settle`](Self::settle) is a real wait).
    const STREAM_ORDERED: bool = false;
    /// A new communicator of this backend over the ranks of `world`, whose operations time out
    /// `after` (collective over `world`).
    fn with_deadline(
        &self,
        world: &collectives::MpiComm,
        after: std::time::Duration,
    ) -> Result<Self, Error>;
    /// A buffer of `len` zeros on another GPU than this communicator's, where this backend has
    /// device buffers and a second GPU is visible.
    fn on_other_device<V: Val>(&self, len: usize) -> Option<Self::Owned<V>> {
        let _ = len;
        None
    }
}

impl Backend for collectives::MpiComm {
    type Owned<V: Val> = Vec<V>;
    fn r<V: Val>(o: &Vec<V>) -> &[V] {
        o
    }
    fn w<V: Val>(o: &mut Vec<V>) -> &mut [V] {
        o
    }
    fn up<V: Val>(&self, host: &[V]) -> Vec<V> {
        host.to_vec()
    }
    fn down<V: Val>(&self, buf: &[V]) -> Vec<V> {
        buf.to_vec()
    }
    fn fill<V: Val>(&self, buf: &mut [V], host: &[V]) {
        buf.copy_from_slice(host);
    }
    fn zeros<V: Val>(&self, len: usize) -> Vec<V> {
        // Zeros allocate lazily (calloc): a buffer of gigabytes costs nothing until it is written.
        vec![V::from_i(0); len]
    }
    fn tag_ub(&self) -> i32 {
        collectives::MpiComm::tag_ub(self)
    }
    fn with_deadline(
        &self,
        world: &collectives::MpiComm,
        after: std::time::Duration,
    ) -> Result<Self, Error> {
        Ok(world.dup()?.with_timeout(Some(after)))
    }
}

impl Backend for collectives::NcclComm {
    type Owned<V: Val> = collectives::cudarc::driver::CudaSlice<V>;
    const STREAM_ORDERED: bool = true;
    fn settle(&self) -> Result<(), Error> {
        self.synchronize()
    }
    fn r<V: Val>(o: &Self::Owned<V>) -> &Buf<'_, Self, V> {
        o
    }
    fn w<V: Val>(o: &mut Self::Owned<V>) -> &mut BufMut<'_, Self, V> {
        o
    }
    fn up<V: Val>(&self, host: &[V]) -> Self::Owned<V> {
        collectives::device::upload(self.stream(), host).expect("device memory")
    }
    fn down<V: Val>(&self, buf: &Buf<Self, V>) -> Vec<V> {
        self.synchronize().expect("the stream completes");
        collectives::device::download(self.stream(), buf).expect("a device-to-host copy")
    }
    fn fill<V: Val>(&self, buf: &mut BufMut<Self, V>, host: &[V]) {
        collectives::device::copy_to_device(self.stream(), host, buf)
            .expect("a host-to-device copy");
    }
    fn zeros<V: Val>(&self, len: usize) -> Self::Owned<V> {
        collectives::device::alloc_zeros(self.stream(), len).expect("device memory")
    }
    fn with_deadline(
        &self,
        world: &collectives::MpiComm,
        after: std::time::Duration,
    ) -> Result<Self, Error> {
        Ok(collectives::NcclComm::from_mpi(world, None)?.with_timeout(after))
    }
    fn on_other_device<V: Val>(&self, len: usize) -> Option<Self::Owned<V>> {
        other_device_zeros(self.stream().context().ordinal(), len)
    }
}

/// The suite's `Backend` for `Checked<$comm>` (a concrete communicator: the wrapper's buffers are
/// the wrapped communicator's): every buffer operation through the wrapped communicator, and a
/// communicator with a deadline wrapped again.
macro_rules! checked_backend {
    ($comm:ty) => {
        impl $crate::common::suite::Backend for collectives::Checked<$comm> {
            type Owned<V: $crate::common::suite::Val> =
                <$comm as $crate::common::suite::Backend>::Owned<V>;
            fn r<V: $crate::common::suite::Val>(
                o: &Self::Owned<V>,
            ) -> &collectives::Buf<'_, Self, V> {
                <$comm as $crate::common::suite::Backend>::r(o)
            }
            fn w<V: $crate::common::suite::Val>(
                o: &mut Self::Owned<V>,
            ) -> &mut collectives::BufMut<'_, Self, V> {
                <$comm as $crate::common::suite::Backend>::w(o)
            }
            fn up<V: $crate::common::suite::Val>(&self, host: &[V]) -> Self::Owned<V> {
                self.inner().up(host)
            }
            fn down<V: $crate::common::suite::Val>(
                &self,
                buf: &collectives::Buf<Self, V>,
            ) -> Vec<V> {
                self.inner().down(buf)
            }
            fn fill<V: $crate::common::suite::Val>(
                &self,
                buf: &mut collectives::BufMut<Self, V>,
                host: &[V],
            ) {
                self.inner().fill(buf, host)
            }
            fn zeros<V: $crate::common::suite::Val>(&self, len: usize) -> Self::Owned<V> {
                self.inner().zeros(len)
            }
            fn tag_ub(&self) -> i32 {
                self.inner().tag_ub()
            }
            fn with_deadline(
                &self,
                world: &collectives::MpiComm,
                after: std::time::Duration,
            ) -> Result<Self, collectives::Error> {
                self.inner()
                    .with_deadline(world, after)
                    .map(collectives::Checked::new)
            }
            fn on_other_device<V: $crate::common::suite::Val>(
                &self,
                len: usize,
            ) -> Option<Self::Owned<V>> {
                self.inner().on_other_device(len)
            }
        }
    };
}
#[allow(unused_imports)] // used by the device test binaries only
pub(crate) use checked_backend;

checked_backend!(collectives::MpiComm);
checked_backend!(collectives::Checked<collectives::MpiComm>);
checked_backend!(collectives::NcclComm);

/// `len` zeros on a visible GPU other than `mine`, if there is one.
pub fn other_device_zeros<V: Val>(
    mine: usize,
    len: usize,
) -> Option<collectives::cudarc::driver::CudaSlice<V>> {
    use collectives::cudarc::driver::CudaContext;
    let count = CudaContext::device_count().ok()? as usize;
    let other = (0..count).find(|&d| d != mine)?;
    let stream = CudaContext::new(other).ok()?.default_stream();
    collectives::device::alloc_zeros(&stream, len).ok()
}

/// Test values: small integers, so sums and products are exact in every type.
pub trait Val: Element + Copy {
    fn from_i(i: i64) -> Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn min(self, o: Self) -> Self;
    fn max(self, o: Self) -> Self;
    fn div(self, n: usize) -> Self;
    /// Equal up to the rounding of a division (averages may be computed as a product by 1/n).
    fn close(self, o: Self) -> bool;
    const AVG: bool = true;
}

macro_rules! real_val {
    ($t:ty, $avg:expr, $close:expr) => {
        impl Val for $t {
            fn from_i(i: i64) -> Self {
                i as $t
            }
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn min(self, o: Self) -> Self {
                if o < self {
                    o
                } else {
                    self
                }
            }
            fn max(self, o: Self) -> Self {
                if o > self {
                    o
                } else {
                    self
                }
            }
            fn div(self, n: usize) -> Self {
                self / (n as $t)
            }
            fn close(self, o: Self) -> bool {
                let f: fn($t, $t) -> bool = $close;
                f(self, o)
            }
            const AVG: bool = $avg;
        }
    };
}
real_val!(f32, true, |a, b| (a - b).abs()
    <= 4.0 * f32::EPSILON * a.abs().max(b.abs()).max(1.0));
real_val!(f64, true, |a, b| (a - b).abs()
    <= 4.0 * f64::EPSILON * a.abs().max(b.abs()).max(1.0));
real_val!(i32, false, |a, b| a == b);
real_val!(u8, false, |a, b| a == b);

impl Val for bf16 {
    fn from_i(i: i64) -> Self {
        bf16::from_f32(i as f32)
    }
    fn add(self, o: Self) -> Self {
        bf16::from_f32(self.to_f32() + o.to_f32())
    }
    fn mul(self, o: Self) -> Self {
        bf16::from_f32(self.to_f32() * o.to_f32())
    }
    fn min(self, o: Self) -> Self {
        if o < self {
            o
        } else {
            self
        }
    }
    fn max(self, o: Self) -> Self {
        if o > self {
            o
        } else {
            self
        }
    }
    fn div(self, n: usize) -> Self {
        bf16::from_f32(self.to_f32() / n as f32)
    }
    fn close(self, o: Self) -> bool {
        self == o
    }
    // bfloat16's 8-bit mantissa rounds a mean differently depending on the order of operations.
    const AVG: bool = false;
}

impl Val for Complex<f64> {
    fn from_i(i: i64) -> Self {
        Complex::new(i as f64, (i % 3) as f64 - 1.0)
    }
    fn add(self, o: Self) -> Self {
        self + o
    }
    fn mul(self, o: Self) -> Self {
        self * o
    }
    fn min(self, _: Self) -> Self {
        unreachable!("complex numbers are not ordered")
    }
    fn max(self, _: Self) -> Self {
        unreachable!("complex numbers are not ordered")
    }
    fn div(self, n: usize) -> Self {
        self / n as f64
    }
    fn close(self, o: Self) -> bool {
        self.re.close(o.re) && self.im.close(o.im)
    }
}

/// Input of rank `r`, element `i`, for operation `op` (products use 1 and 2 only, to stay exact).
pub fn input<V: Val>(op: ReduceOp, r: usize, i: usize) -> V {
    match op {
        ReduceOp::Prod => V::from_i(((r + i) % 2 + 1) as i64),
        _ => V::from_i(((r * 7 + i * 3) % 11 + 1) as i64),
    }
}

pub fn inputs<V: Val>(op: ReduceOp, r: usize, n: usize) -> Vec<V> {
    (0..n).map(|i| input(op, r, i)).collect()
}

/// The reduction over all ranks of element `i`, computed here.
pub fn reduced<V: Val>(op: ReduceOp, size: usize, i: usize) -> V {
    let mut acc = input::<V>(op, 0, i);
    for r in 1..size {
        let x = input::<V>(op, r, i);
        acc = match op {
            ReduceOp::Sum | ReduceOp::Avg => acc.add(x),
            ReduceOp::Prod => acc.mul(x),
            ReduceOp::Min => acc.min(x),
            ReduceOp::Max => acc.max(x),
            _ => unreachable!(),
        };
    }
    if op == ReduceOp::Avg {
        acc.div(size)
    } else {
        acc
    }
}

/// Element `i` of rank `r`'s contribution to the gathers and all-to-alls: unique per (r, i).
pub fn tagged<V: Val>(r: usize, i: usize) -> V {
    V::from_i((r * 100 + i) as i64 % 251)
}

pub const LENS: [usize; 3] = [0, 1, 37];

/// The reductions' lengths: [`LENS`] and one of 32 * 256 + 1 elements, which leaves a tail past any
/// split into up to 32 blocks of whole 16-byte packs (NCCL 2.28's one-rank mean dropped it).
const REDUCE_LENS: [usize; 4] = [LENS[0], LENS[1], LENS[2], 8193];

/// Compare element-wise, exactly or (for averages) up to rounding.
fn same<V: Val>(t: &T, got: &[V], expected: &[V], approx: bool, what: &str) {
    let ok = got.len() == expected.len()
        && got
            .iter()
            .zip(expected)
            .all(|(a, b)| if approx { a.close(*b) } else { a == b });
    if !ok {
        t.fail(format!("{what}: got {got:?}, expected {expected:?}"));
    }
}

/// Every reduction the backend allows for `V`, and the refusal of the others.
pub fn reductions<V: Val, C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    for op in ReduceOp::ALL {
        if let Some(_why) = refusal(V::KIND, op, c.backend()) {
            let send = c.up::<V>(&inputs(op, rank, 3));
            let mut recv = c.up::<V>(&inputs(op, rank, 3));
            t.err(
                c.all_reduce::<V>(C::r(&send), C::w(&mut recv), op),
                "a refused reduction",
                |e| matches!(e, Error::Unsupported { .. }),
            );
            continue;
        }
        if op == ReduceOp::Avg && !V::AVG {
            continue;
        }
        let approx = op == ReduceOp::Avg;
        for n in REDUCE_LENS {
            let expected: Vec<V> = (0..n).map(|i| reduced(op, size, i)).collect();
            let host = inputs::<V>(op, rank, n);
            let what = format!("{} n={n} {op} on {}", V::NAME, c.backend());
            let send = c.up(&host);

            let mut recv = c.up(&vec![V::from_i(0); n]);
            t.ok(c.all_reduce::<V>(C::r(&send), C::w(&mut recv), op), &what);
            same(
                t,
                &c.down::<V>(C::r(&recv)),
                &expected,
                approx,
                &format!("all_reduce {what}"),
            );

            let mut buf = c.up(&host);
            t.ok(c.all_reduce_in_place::<V>(C::w(&mut buf), op), &what);
            same(
                t,
                &c.down::<V>(C::r(&buf)),
                &expected,
                approx,
                &format!("all_reduce_in_place {what}"),
            );

            let root = size - 1;
            let mut recv = c.up(&vec![V::from_i(0); n]);
            let is_root = rank == root;
            t.ok(
                c.reduce::<V>(C::r(&send), is_root.then_some(C::w(&mut recv)), op, root),
                &what,
            );
            if is_root {
                same(
                    t,
                    &c.down::<V>(C::r(&recv)),
                    &expected,
                    approx,
                    &format!("reduce {what}"),
                );
            }

            // reduce_scatter: block b of rank r's input holds input(op, r, b * n + i).
            let send = c.up(&inputs::<V>(op, rank, n * size));
            let mut recv = c.up(&vec![V::from_i(0); n]);
            t.ok(
                c.reduce_scatter::<V>(C::r(&send), C::w(&mut recv), op),
                &what,
            );
            let expected: Vec<V> = (0..n).map(|i| reduced(op, size, rank * n + i)).collect();
            same(
                t,
                &c.down::<V>(C::r(&recv)),
                &expected,
                approx,
                &format!("reduce_scatter {what}"),
            );
        }
    }
}

/// Broadcast, all-gather, gather, scatter, all-to-all.
pub fn movement<V: Val, C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    let name = V::NAME;
    for n in LENS {
        for root in [0, size - 1] {
            let host: Vec<V> = if rank == root {
                (0..n).map(|i| tagged(root, i)).collect()
            } else {
                vec![V::from_i(0); n]
            };
            let mut buf = c.up(&host);
            t.ok(c.broadcast::<V>(C::w(&mut buf), root), "broadcast");
            let expected: Vec<V> = (0..n).map(|i| tagged(root, i)).collect();
            t.eq(
                &c.down::<V>(C::r(&buf)),
                &expected,
                &format!("broadcast {name} n={n} root={root}"),
            );
        }

        let mine: Vec<V> = (0..n).map(|i| tagged(rank, i)).collect();
        let all: Vec<V> = (0..size)
            .flat_map(|r| (0..n).map(move |i| tagged::<V>(r, i)))
            .collect();
        let send = c.up(&mine);
        let mut recv = c.up(&vec![V::from_i(0); n * size]);
        t.ok(
            c.all_gather::<V>(C::r(&send), C::w(&mut recv)),
            "all_gather",
        );
        t.eq(
            &c.down::<V>(C::r(&recv)),
            &all,
            &format!("all_gather {name} n={n}"),
        );

        let all_dev = c.up(&all);
        for root in [0, size - 1] {
            let is_root = rank == root;
            let mut recv = c.up(&vec![V::from_i(0); n * size]);
            t.ok(
                c.gather::<V>(C::r(&send), is_root.then_some(C::w(&mut recv)), root),
                "gather",
            );
            if is_root {
                t.eq(
                    &c.down::<V>(C::r(&recv)),
                    &all,
                    &format!("gather {name} n={n} root={root}"),
                );
            }
            let mut got = c.up(&vec![V::from_i(0); n]);
            t.ok(
                c.scatter::<V>(is_root.then_some(C::r(&all_dev)), C::w(&mut got), root),
                "scatter",
            );
            t.eq(
                &c.down::<V>(C::r(&got)),
                &mine,
                &format!("scatter {name} n={n} root={root}"),
            );
        }

        // all_to_all: block j of rank r is [tagged(r, j * n + i)]; block r of rank j receives it.
        let send = c.up(&(0..n * size).map(|i| tagged(rank, i)).collect::<Vec<V>>());
        let mut recv = c.up(&vec![V::from_i(0); n * size]);
        t.ok(
            c.all_to_all::<V>(C::r(&send), C::w(&mut recv)),
            "all_to_all",
        );
        let expected: Vec<V> = (0..size)
            .flat_map(|r| (0..n).map(move |i| tagged::<V>(r, rank * n + i)))
            .collect();
        t.eq(
            &c.down::<V>(C::r(&recv)),
            &expected,
            &format!("all_to_all {name} n={n}"),
        );
    }
}

/// Uneven counts with zero-length contributions: rank r contributes (2r) % 3, plus `extra` on rank 1.
pub fn uneven_counts(size: usize, extra: usize) -> Vec<usize> {
    (0..size)
        .map(|r| (2 * r) % 3 + if r == 1 { extra } else { 0 })
        .collect()
}

/// The v-collectives with zero-length and skewed contributions.
pub fn uneven<V: Val, C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    let name = V::NAME;
    for extra in [0, 40] {
        let counts = uneven_counts(size, extra);
        let total: usize = counts.iter().sum();
        let mine: Vec<V> = (0..counts[rank]).map(|i| tagged(rank, i)).collect();
        let all: Vec<V> = (0..size)
            .flat_map(|r| (0..counts[r]).map(move |i| tagged::<V>(r, i)))
            .collect();
        let send = c.up(&mine);

        let mut recv = c.up(&vec![V::from_i(0); total]);
        t.ok(
            c.all_gather_v::<V>(C::r(&send), C::w(&mut recv), &counts),
            "all_gather_v",
        );
        t.eq(
            &c.down::<V>(C::r(&recv)),
            &all,
            &format!("all_gather_v {name} counts={counts:?}"),
        );

        let all_dev = c.up(&all);
        for root in [0, size - 1] {
            let is_root = rank == root;
            let mut recv = c.up(&vec![V::from_i(0); total]);
            t.ok(
                c.gather_v::<V>(
                    C::r(&send),
                    is_root.then_some(C::w(&mut recv)),
                    &counts,
                    root,
                ),
                "gather_v",
            );
            if is_root {
                t.eq(
                    &c.down::<V>(C::r(&recv)),
                    &all,
                    &format!("gather_v {name} counts={counts:?} root={root}"),
                );
            }
            let mut got = c.up(&vec![V::from_i(0); counts[rank]]);
            t.ok(
                c.scatter_v::<V>(
                    is_root.then_some(C::r(&all_dev)),
                    C::w(&mut got),
                    &counts,
                    root,
                ),
                "scatter_v",
            );
            t.eq(
                &c.down::<V>(C::r(&got)),
                &mine,
                &format!("scatter_v {name} counts={counts:?} root={root}"),
            );
        }

        // all_to_all_v: rank r sends (r + j + extra) % 4 elements to rank j, zeros included.
        let count = |from: usize, to: usize| (from + to + extra) % 4;
        let send_counts: Vec<usize> = (0..size).map(|j| count(rank, j)).collect();
        let recv_counts: Vec<usize> = (0..size).map(|i| count(i, rank)).collect();
        // Element k of the block from r to j is tagged(r, 10 * j + k).
        let host: Vec<V> = (0..size)
            .flat_map(|j| (0..count(rank, j)).map(move |k| tagged::<V>(rank, 10 * j + k)))
            .collect();
        let expected: Vec<V> = (0..size)
            .flat_map(|i| (0..count(i, rank)).map(move |k| tagged::<V>(i, 10 * rank + k)))
            .collect();
        let send = c.up(&host);
        let mut recv = c.up(&vec![V::from_i(0); expected.len()]);
        t.ok(
            c.all_to_all_v::<V>(C::r(&send), &send_counts, C::w(&mut recv), &recv_counts),
            "all_to_all_v",
        );
        t.eq(
            &c.down::<V>(C::r(&recv)),
            &expected,
            &format!("all_to_all_v {name} extra={extra}"),
        );
    }
}

/// A ring of send_recv, and of ordered blocking send/recv (even ranks send first).
pub fn point_to_point<V: Val, C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
    for n in LENS {
        let send = c.up(&(0..n).map(|i| tagged(rank, i)).collect::<Vec<V>>());
        let from_prev: Vec<V> = (0..n).map(|i| tagged(prev, i)).collect();
        let mut recv = c.up(&vec![V::from_i(0); n]);
        t.ok(
            c.send_recv::<V>(C::r(&send), next, C::w(&mut recv), prev, 7),
            "send_recv",
        );
        t.eq(
            &c.down::<V>(C::r(&recv)),
            &from_prev,
            &format!("send_recv {} n={n}", V::NAME),
        );

        if size > 1 {
            let mut recv = c.up(&vec![V::from_i(0); n]);
            if rank % 2 == 0 {
                t.ok(c.send::<V>(C::r(&send), next, 3), "send");
                t.ok(c.recv::<V>(C::w(&mut recv), prev, 3), "recv");
            } else {
                t.ok(c.recv::<V>(C::w(&mut recv), prev, 3), "recv");
                t.ok(c.send::<V>(C::r(&send), next, 3), "send");
            }
            t.eq(
                &c.down::<V>(C::r(&recv)),
                &from_prev,
                &format!("send/recv ring {} n={n}", V::NAME),
            );
        }
    }
}

/// Non-blocking operations with host computation in flight.
pub fn non_blocking<V: Val, C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    let n = 1000;
    let op = ReduceOp::Sum;
    let send = c.up(&inputs::<V>(op, rank, n));
    let mut recv = c.up(&vec![V::from_i(0); n]);
    let host_b: Vec<V> = if rank == 0 {
        (0..n).map(|i| tagged(0, i)).collect()
    } else {
        vec![V::from_i(0); n]
    };
    let mut bcast = c.up(&host_b);
    let mine = c.up(&(0..7).map(|i| tagged(rank, i)).collect::<Vec<V>>());
    let mut gathered = c.up(&vec![V::from_i(0); 7 * size]);
    // Where the backend cannot add `V` (16-bit floats on MPI), the start itself must be refused.
    let reducible = refusal(V::KIND, op, c.backend()).is_none();
    let computed = scope(|s| {
        let started = c.i_all_reduce::<V>(s, C::r(&send), C::w(&mut recv), op);
        let reduce = if reducible {
            t.ok(started, "i_all_reduce")
        } else {
            t.err(
                started.map(drop),
                "i_all_reduce of a type the backend cannot add",
                |e| matches!(e, Error::Unsupported { .. }),
            );
            None
        };
        let bc = t.ok(c.i_broadcast::<V>(s, C::w(&mut bcast), 0), "i_broadcast");
        let ga = t.ok(
            c.i_all_gather::<V>(s, C::r(&mine), C::w(&mut gathered)),
            "i_all_gather",
        );
        // Compute while the operations are in flight.
        let busy: f64 = (1..=200_000u32).map(|k| 1.0 / f64::from(k)).sum();
        if let Some(mut r) = reduce {
            let _ = t.ok(r.test(), "test");
            t.ok(r.wait(), "wait i_all_reduce");
        }
        for (r, what) in [(bc, "i_broadcast"), (ga, "i_all_gather")] {
            if let Some(r) = r {
                t.ok(r.wait(), what);
            }
        }
        busy
    });
    let busy = t.ok(computed, "scope").unwrap_or(0.0);
    t.check(busy > 12.0, || format!("computation in flight gave {busy}"));
    if reducible {
        let expected: Vec<V> = (0..n).map(|i| reduced(op, size, i)).collect();
        t.eq(
            &c.down::<V>(C::r(&recv)),
            &expected,
            &format!("i_all_reduce {}", V::NAME),
        );
    }
    let expected: Vec<V> = (0..n).map(|i| tagged(0, i)).collect();
    t.eq(&c.down::<V>(C::r(&bcast)), &expected, "i_broadcast");
    let expected: Vec<V> = (0..size)
        .flat_map(|r| (0..7).map(move |i| tagged::<V>(r, i)))
        .collect();
    t.eq(&c.down::<V>(C::r(&gathered)), &expected, "i_all_gather");

    // Point-to-point in flight, ordered so that no backend can deadlock (even ranks send first).
    if size > 1 {
        let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
        let out = c.up(&(0..5).map(|i| tagged(rank, i)).collect::<Vec<V>>());
        let mut inbox = c.up(&vec![V::from_i(0); 5]);
        let r = scope(|s| -> collectives::Result<()> {
            if rank % 2 == 0 {
                c.i_send::<V>(s, C::r(&out), next, 11)?.wait()?;
                c.i_recv::<V>(s, C::w(&mut inbox), prev, 11)?.wait()
            } else {
                c.i_recv::<V>(s, C::w(&mut inbox), prev, 11)?.wait()?;
                c.i_send::<V>(s, C::r(&out), next, 11)?.wait()
            }
        });
        t.ok(r.and_then(|x| x), "i_send/i_recv");
        let expected: Vec<V> = (0..5).map(|i| tagged(prev, i)).collect();
        t.eq(&c.down::<V>(C::r(&inbox)), &expected, "i_recv");
    }
    non_blocking_all::<V, C>(t, c);
}

/// What a refused reduction start must return; `None` when the backend reduces `V` with `op`.
fn refused_start(t: &T, started: collectives::Result<()>, reducible: bool, what: &str) -> bool {
    if reducible {
        t.ok(started, what).is_some()
    } else {
        t.err(
            started,
            &format!("{what} of a type the backend cannot add"),
            |e| matches!(e, Error::Unsupported { .. }),
        );
        false
    }
}

/// Every other non-blocking collective, all in flight together in one scope (the reductions with
/// `Sum`, and with `Avg` where `V` averages, finished at completion), then checked against answers
/// computed here; zero-length and uneven counts included.
pub fn non_blocking_all<V: Val, C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    let name = V::NAME;
    let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
    let mut ops = vec![ReduceOp::Sum];
    if V::AVG {
        ops.push(ReduceOp::Avg);
    }
    for n in [0, 37] {
        for &op in &ops {
            let reducible = refusal(V::KIND, op, c.backend()).is_none();
            let approx = op == ReduceOp::Avg;
            let what = format!("{name} n={n} {op} on {}", c.backend());
            let root = size - 1;
            let is_root = rank == root;
            let send = c.up(&inputs::<V>(op, rank, n));
            let mut reduce_out = c.up(&vec![V::from_i(0); n]);
            let mut in_place = c.up(&inputs::<V>(op, rank, n));
            let rs_send = c.up(&inputs::<V>(op, rank, n * size));
            let mut rs_out = c.up(&vec![V::from_i(0); n]);
            let r = scope(|s| -> collectives::Result<()> {
                let reqs = [
                    c.i_reduce::<V>(
                        s,
                        C::r(&send),
                        is_root.then_some(C::w(&mut reduce_out)),
                        op,
                        root,
                    ),
                    c.i_all_reduce_in_place::<V>(s, C::w(&mut in_place), op),
                    c.i_reduce_scatter::<V>(s, C::r(&rs_send), C::w(&mut rs_out), op),
                ];
                for (req, which) in
                    reqs.into_iter()
                        .zip(["i_reduce", "i_all_reduce_in_place", "i_reduce_scatter"])
                {
                    match req {
                        Ok(mut req) => {
                            let _ = req.test()?;
                            refused_start(t, req.wait(), reducible, &format!("{which} {what}"));
                        }
                        Err(e) => {
                            refused_start(t, Err(e), reducible, &format!("{which} {what}"));
                        }
                    }
                }
                Ok(())
            });
            t.ok(
                r.and_then(|x| x),
                &format!("non-blocking reductions {what}"),
            );
            if !reducible {
                continue;
            }
            let expected: Vec<V> = (0..n).map(|i| reduced(op, size, i)).collect();
            if is_root {
                same(
                    t,
                    &c.down::<V>(C::r(&reduce_out)),
                    &expected,
                    approx,
                    &format!("i_reduce {what}"),
                );
            }
            same(
                t,
                &c.down::<V>(C::r(&in_place)),
                &expected,
                approx,
                &format!("i_all_reduce_in_place {what}"),
            );
            let expected: Vec<V> = (0..n).map(|i| reduced(op, size, rank * n + i)).collect();
            same(
                t,
                &c.down::<V>(C::r(&rs_out)),
                &expected,
                approx,
                &format!("i_reduce_scatter {what}"),
            );
        }

        // Movement: regular and uneven, rooted at both ends, and a ring of i_send_recv.
        let counts = uneven_counts(size, n);
        let total: usize = counts.iter().sum();
        let mine_v: Vec<V> = (0..counts[rank]).map(|i| tagged(rank, i)).collect();
        let all_v: Vec<V> = (0..size)
            .flat_map(|r| (0..counts[r]).map(move |i| tagged::<V>(r, i)))
            .collect();
        let mine: Vec<V> = (0..n).map(|i| tagged(rank, i)).collect();
        let all: Vec<V> = (0..size)
            .flat_map(|r| (0..n).map(move |i| tagged::<V>(r, i)))
            .collect();
        let a2a_send = c.up(&(0..n * size).map(|i| tagged(rank, i)).collect::<Vec<V>>());
        let mut a2a_recv = c.up(&vec![V::from_i(0); n * size]);
        let count = |from: usize, to: usize| (from + to + n) % 4;
        let send_counts: Vec<usize> = (0..size).map(|j| count(rank, j)).collect();
        let recv_counts: Vec<usize> = (0..size).map(|i| count(i, rank)).collect();
        let a2av_send = c.up(&(0..size)
            .flat_map(|j| (0..count(rank, j)).map(move |k| tagged::<V>(rank, 10 * j + k)))
            .collect::<Vec<V>>());
        let a2av_expected: Vec<V> = (0..size)
            .flat_map(|i| (0..count(i, rank)).map(move |k| tagged::<V>(i, 10 * rank + k)))
            .collect();
        let mut a2av_recv = c.up(&vec![V::from_i(0); a2av_expected.len()]);
        let send_v = c.up(&mine_v);
        let mut agv_recv = c.up(&vec![V::from_i(0); total]);
        let send = c.up(&mine);
        let (first, last) = (0, size - 1);
        let mut gather_recv = c.up(&vec![V::from_i(0); n * size]);
        let mut gatherv_recv = c.up(&vec![V::from_i(0); total]);
        let all_dev = c.up(&all);
        let all_v_dev = c.up(&all_v);
        let mut scatter_recv = c.up(&vec![V::from_i(0); n]);
        let mut scatterv_recv = c.up(&vec![V::from_i(0); counts[rank]]);
        let ring_send = c.up(&(0..n).map(|i| tagged(rank, 50 + i)).collect::<Vec<V>>());
        let mut ring_recv = c.up(&vec![V::from_i(0); n]);
        let r = scope(|s| -> collectives::Result<()> {
            let barrier = c.i_barrier(s)?;
            let a2a = c.i_all_to_all::<V>(s, C::r(&a2a_send), C::w(&mut a2a_recv))?;
            let a2av = c.i_all_to_all_v::<V>(
                s,
                C::r(&a2av_send),
                &send_counts,
                C::w(&mut a2av_recv),
                &recv_counts,
            )?;
            let agv = c.i_all_gather_v::<V>(s, C::r(&send_v), C::w(&mut agv_recv), &counts)?;
            let ga = c.i_gather::<V>(
                s,
                C::r(&send),
                (rank == first).then_some(C::w(&mut gather_recv)),
                first,
            )?;
            let gav = c.i_gather_v::<V>(
                s,
                C::r(&send_v),
                (rank == last).then_some(C::w(&mut gatherv_recv)),
                &counts,
                last,
            )?;
            let sc = c.i_scatter::<V>(
                s,
                (rank == last).then_some(C::r(&all_dev)),
                C::w(&mut scatter_recv),
                last,
            )?;
            let scv = c.i_scatter_v::<V>(
                s,
                (rank == first).then_some(C::r(&all_v_dev)),
                C::w(&mut scatterv_recv),
                &counts,
                first,
            )?;
            let ring =
                c.i_send_recv::<V>(s, C::r(&ring_send), next, C::w(&mut ring_recv), prev, 12)?;
            // Compute while they are in flight, then complete them out of order; the barrier and
            // the ring are left to the scope.
            let busy: f64 = (1..=20_000u32).map(|k| 1.0 / f64::from(k)).sum();
            assert!(busy > 1.0);
            drop((barrier, ring));
            for r in [scv, sc, gav, ga, agv, a2av, a2a] {
                r.wait()?;
            }
            Ok(())
        });
        let what = format!("{name} n={n} on {}", c.backend());
        t.ok(r.and_then(|x| x), &format!("non-blocking movement {what}"));
        let expected: Vec<V> = (0..size)
            .flat_map(|r| (0..n).map(move |i| tagged::<V>(r, rank * n + i)))
            .collect();
        t.eq(
            &c.down::<V>(C::r(&a2a_recv)),
            &expected,
            &format!("i_all_to_all {what}"),
        );
        t.eq(
            &c.down::<V>(C::r(&a2av_recv)),
            &a2av_expected,
            &format!("i_all_to_all_v {what}"),
        );
        t.eq(
            &c.down::<V>(C::r(&agv_recv)),
            &all_v,
            &format!("i_all_gather_v {what} counts={counts:?}"),
        );
        if rank == first {
            t.eq(
                &c.down::<V>(C::r(&gather_recv)),
                &all,
                &format!("i_gather {what}"),
            );
        }
        if rank == last {
            t.eq(
                &c.down::<V>(C::r(&gatherv_recv)),
                &all_v,
                &format!("i_gather_v {what}"),
            );
        }
        t.eq(
            &c.down::<V>(C::r(&scatter_recv)),
            &mine,
            &format!("i_scatter {what}"),
        );
        t.eq(
            &c.down::<V>(C::r(&scatterv_recv)),
            &mine_v,
            &format!("i_scatter_v {what}"),
        );
        let from_prev: Vec<V> = (0..n).map(|i| tagged(prev, 50 + i)).collect();
        t.eq(
            &c.down::<V>(C::r(&ring_recv)),
            &from_prev,
            &format!("i_send_recv {what}"),
        );
    }
}

/// Barrier, split (even/odd ranks in descending order), split with no color, dup.
pub fn barrier_split_dup<C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    t.ok(c.barrier(), "barrier");
    let Some(Some(sub)) = t.ok(c.split(Some((rank % 2) as u32), -(rank as i32)), "split") else {
        t.fail("split returned no communicator".into());
        return;
    };
    let members: Vec<usize> = (0..size).filter(|r| r % 2 == rank % 2).rev().collect();
    t.eq(&sub.size(), &members.len(), "split size");
    t.eq(
        &Some(sub.rank()),
        &members.iter().position(|&r| r == rank),
        "split rank",
    );
    let one = sub.up(&[rank as i64]);
    let mut sum = sub.up(&[0i64]);
    t.ok(
        sub.all_reduce::<i64>(C::r(&one), C::w(&mut sum), ReduceOp::Sum),
        "all_reduce on split",
    );
    t.eq(
        &sub.down::<i64>(C::r(&sum)),
        &vec![members.iter().map(|&r| r as i64).sum::<i64>()],
        "all_reduce on split",
    );
    let mut order = sub.up(&vec![0i64; members.len()]);
    t.ok(
        sub.all_gather::<i64>(C::r(&one), C::w(&mut order)),
        "all_gather on split",
    );
    t.eq(
        &sub.down::<i64>(C::r(&order)),
        &members.iter().map(|&r| r as i64).collect::<Vec<_>>(),
        "split order by key",
    );

    let color = if rank == 0 { None } else { Some(1) };
    match t.ok(c.split(color, 0), "split with no color") {
        Some(None) => t.check(rank == 0, || "only rank 0 passed no color".into()),
        Some(Some(s)) => t.eq(&s.size(), &(size - 1), "split without rank 0"),
        None => {}
    }

    let Some(d) = t.ok(c.dup(), "dup") else {
        return;
    };
    t.eq(&(d.rank(), d.size()), &(rank, size), "dup rank and size");
    let mut x = d.up(&[1u32; 4]);
    t.ok(
        d.all_reduce_in_place::<u32>(C::w(&mut x), ReduceOp::Sum),
        "all_reduce on dup",
    );
    t.eq(
        &d.down::<u32>(C::r(&x)),
        &vec![size as u32; 4],
        "all_reduce on dup",
    );
}

impl Val for i64 {
    fn from_i(i: i64) -> Self {
        i
    }
    fn add(self, o: Self) -> Self {
        self + o
    }
    fn mul(self, o: Self) -> Self {
        self * o
    }
    fn min(self, o: Self) -> Self {
        Ord::min(self, o)
    }
    fn max(self, o: Self) -> Self {
        Ord::max(self, o)
    }
    fn div(self, n: usize) -> Self {
        self / n as i64
    }
    fn close(self, o: Self) -> bool {
        self == o
    }
    const AVG: bool = false;
}

impl Val for u32 {
    fn from_i(i: i64) -> Self {
        i as u32
    }
    fn add(self, o: Self) -> Self {
        self + o
    }
    fn mul(self, o: Self) -> Self {
        self * o
    }
    fn min(self, o: Self) -> Self {
        Ord::min(self, o)
    }
    fn max(self, o: Self) -> Self {
        Ord::max(self, o)
    }
    fn div(self, n: usize) -> Self {
        self / n as u32
    }
    fn close(self, o: Self) -> bool {
        self == o
    }
    const AVG: bool = false;
}

/// Runs per plan in [`persistent`].
const ROUNDS: usize = 3;

/// `ROUNDS` runs of `plan`: `before(k)` writes round `k`'s inputs through the plan, then the run
/// is started and waited for (polled with `test` in odd rounds), then `after(k)` checks it.
fn rounds<X: ?Sized>(
    t: &T,
    plan: &mut collectives::Persistent<'_, X>,
    what: &str,
    mut before: impl FnMut(usize, &mut collectives::Persistent<'_, X>) -> collectives::Result<()>,
    mut after: impl FnMut(usize, &collectives::Persistent<'_, X>) -> collectives::Result<()>,
) {
    for k in 0..ROUNDS {
        let run = (|| -> collectives::Result<()> {
            before(k, plan)?;
            plan.start()?;
            if k % 2 == 1 {
                while !plan.test()? {
                    std::hint::spin_loop();
                }
            }
            plan.wait()?;
            after(k, plan)
        })();
        if t.ok(run, &format!("{what} round {k}")).is_none() {
            return;
        }
    }
}

/// Every persistent collective: made once, run `ROUNDS` times with inputs changed between runs
/// (each run reads its buffers when it starts), each run checked against answers computed here;
/// lengths 0 and 5, uneven counts, reductions with `Sum` and (where `V` averages) `Avg`.
pub fn persistent<V: Val, C: Backend>(t: &T, c: &C) {
    let (rank, size) = (c.rank(), c.size());
    let name = V::NAME;
    let (first, last) = (0, size - 1);
    // Round k's element i of rank r: distinct per round.
    let at = |op: ReduceOp, k: usize, r: usize, len: usize| -> Vec<V> {
        (0..len).map(|i| input::<V>(op, r, 13 * k + i)).collect()
    };
    let want = |op: ReduceOp, k: usize, off: usize, len: usize| -> Vec<V> {
        (0..len)
            .map(|i| reduced::<V>(op, size, 13 * k + off + i))
            .collect()
    };
    let tag = |k: usize, r: usize, len: usize| -> Vec<V> {
        (0..len).map(|i| tagged::<V>(r, 7 * k + i)).collect()
    };
    for n in [0usize, 5] {
        let mut ops = vec![ReduceOp::Sum];
        if V::AVG {
            ops.push(ReduceOp::Avg);
        }
        for &op in &ops {
            let reducible = refusal(V::KIND, op, c.backend()).is_none();
            let approx = op == ReduceOp::Avg;
            let what = format!("{name} n={n} {op} on {}", c.backend());
            let mut send = c.up(&at(op, 0, rank, n));
            let mut recv = c.zeros::<V>(n);
            let r = scope(|s| {
                let plan = c.all_reduce_init::<V>(s, C::w(&mut send), C::w(&mut recv), op);
                if !reducible {
                    refused_start(t, plan.map(drop), false, &format!("all_reduce_init {what}"));
                    return;
                }
                let Some(mut plan) = t.ok(plan, &format!("all_reduce_init {what}")) else {
                    return;
                };
                rounds(
                    t,
                    &mut plan,
                    &format!("all_reduce_init {what}"),
                    |k, p| {
                        c.fill(p.send_mut()?, &at(op, k, rank, n));
                        Ok(())
                    },
                    |k, p| {
                        let got = c.down_mut::<V>(p.recv()?);
                        same(
                            t,
                            &got,
                            &want(op, k, 0, n),
                            approx,
                            &format!("all_reduce_init {what} round {k}"),
                        );
                        Ok(())
                    },
                );
            });
            t.ok(r, &format!("all_reduce_init scope {what}"));
            if !reducible {
                continue;
            }
            let mut buf = c.zeros::<V>(n);
            let r = scope(|s| {
                let Some(mut plan) = t.ok(
                    c.all_reduce_in_place_init::<V>(s, C::w(&mut buf), op),
                    &what,
                ) else {
                    return;
                };
                rounds(
                    t,
                    &mut plan,
                    &format!("all_reduce_in_place_init {what}"),
                    |k, p| {
                        c.fill(p.recv_mut()?, &at(op, k, rank, n));
                        Ok(())
                    },
                    |k, p| {
                        let got = c.down_mut::<V>(p.recv()?);
                        same(
                            t,
                            &got,
                            &want(op, k, 0, n),
                            approx,
                            &format!("all_reduce_in_place_init {what} round {k}"),
                        );
                        Ok(())
                    },
                );
            });
            t.ok(r, &format!("all_reduce_in_place_init scope {what}"));
            let mut send = c.zeros::<V>(n);
            let mut recv = c.zeros::<V>(n);
            let r = scope(|s| {
                let is_root = rank == last;
                let recv = is_root.then_some(C::w(&mut recv));
                let Some(mut plan) = t.ok(
                    c.reduce_init::<V>(s, C::w(&mut send), recv, op, last),
                    &what,
                ) else {
                    return;
                };
                rounds(
                    t,
                    &mut plan,
                    &format!("reduce_init {what}"),
                    |k, p| {
                        c.fill(p.send_mut()?, &at(op, k, rank, n));
                        Ok(())
                    },
                    |k, p| {
                        if is_root {
                            let got = c.down_mut::<V>(p.recv()?);
                            same(
                                t,
                                &got,
                                &want(op, k, 0, n),
                                approx,
                                &format!("reduce_init {what} round {k}"),
                            );
                        }
                        Ok(())
                    },
                );
            });
            t.ok(r, &format!("reduce_init scope {what}"));
            let mut send = c.zeros::<V>(n * size);
            let mut recv = c.zeros::<V>(n);
            let r = scope(|s| {
                let Some(mut plan) = t.ok(
                    c.reduce_scatter_init::<V>(s, C::w(&mut send), C::w(&mut recv), op),
                    &what,
                ) else {
                    return;
                };
                rounds(
                    t,
                    &mut plan,
                    &format!("reduce_scatter_init {what}"),
                    |k, p| {
                        c.fill(p.send_mut()?, &at(op, k, rank, n * size));
                        Ok(())
                    },
                    |k, p| {
                        let got = c.down_mut::<V>(p.recv()?);
                        same(
                            t,
                            &got,
                            &want(op, k, rank * n, n),
                            approx,
                            &format!("reduce_scatter_init {what} round {k}"),
                        );
                        Ok(())
                    },
                );
            });
            t.ok(r, &format!("reduce_scatter_init scope {what}"));
        }

        // Movement.
        let what = format!("{name} n={n} on {}", c.backend());
        let counts = uneven_counts(size, n);
        let total: usize = counts.iter().sum();
        let all = |k: usize| -> Vec<V> { (0..size).flat_map(|r| tag(k, r, n)).collect() };
        let all_v = |k: usize| -> Vec<V> { (0..size).flat_map(|r| tag(k, r, counts[r])).collect() };
        let mut bcast = c.zeros::<V>(n);
        let (mut ag_send, mut ag_recv) = (c.zeros::<V>(n), c.zeros::<V>(n * size));
        let (mut agv_send, mut agv_recv) = (c.zeros::<V>(counts[rank]), c.zeros::<V>(total));
        let (mut g_send, mut g_recv) = (c.zeros::<V>(n), c.zeros::<V>(n * size));
        let (mut gv_send, mut gv_recv) = (c.zeros::<V>(counts[rank]), c.zeros::<V>(total));
        let (mut sc_send, mut sc_recv) = (c.zeros::<V>(n * size), c.zeros::<V>(n));
        let (mut scv_send, mut scv_recv) = (c.zeros::<V>(total), c.zeros::<V>(counts[rank]));
        let (mut a2a_send, mut a2a_recv) = (c.zeros::<V>(n * size), c.zeros::<V>(n * size));
        let count = |from: usize, to: usize| (from + to + n) % 4;
        let send_counts: Vec<usize> = (0..size).map(|j| count(rank, j)).collect();
        let recv_counts: Vec<usize> = (0..size).map(|i| count(i, rank)).collect();
        let mut a2av_send = c.zeros::<V>(send_counts.iter().sum());
        let mut a2av_recv = c.zeros::<V>(recv_counts.iter().sum());
        let r = scope(|s| -> collectives::Result<()> {
            let mut barrier = c.barrier_init(s)?;
            let mut bc = c.broadcast_init::<V>(s, C::w(&mut bcast), first)?;
            let mut ag = c.all_gather_init::<V>(s, C::w(&mut ag_send), C::w(&mut ag_recv))?;
            let mut g = c.gather_init::<V>(
                s,
                C::w(&mut g_send),
                (rank == first).then_some(C::w(&mut g_recv)),
                first,
            )?;
            let mut gv = c.gather_v_init::<V>(
                s,
                C::w(&mut gv_send),
                (rank == last).then_some(C::w(&mut gv_recv)),
                &counts,
                last,
            )?;
            let mut sc = c.scatter_init::<V>(
                s,
                (rank == last).then_some(C::w(&mut sc_send)),
                C::w(&mut sc_recv),
                last,
            )?;
            let mut scv = c.scatter_v_init::<V>(
                s,
                (rank == first).then_some(C::w(&mut scv_send)),
                C::w(&mut scv_recv),
                &counts,
                first,
            )?;
            let mut a2av = c.all_to_all_v_init::<V>(
                s,
                C::w(&mut a2av_send),
                &send_counts,
                C::w(&mut a2av_recv),
                &recv_counts,
            )?;
            let mut agv =
                c.all_gather_v_init::<V>(s, C::w(&mut agv_send), C::w(&mut agv_recv), &counts)?;
            let mut a2a = c.all_to_all_init::<V>(s, C::w(&mut a2a_send), C::w(&mut a2a_recv))?;
            for k in 0..ROUNDS {
                let at_k = format!("{what} round {k}");
                // Inputs of round k, written through the plans.
                if rank == first {
                    c.fill(bc.recv_mut()?, &tag(k, first, n));
                }
                c.fill(ag.send_mut()?, &tag(k, rank, n));
                c.fill(agv.send_mut()?, &tag(k, rank, counts[rank]));
                c.fill(g.send_mut()?, &tag(k, rank, n));
                c.fill(gv.send_mut()?, &tag(k, rank, counts[rank]));
                if rank == last {
                    c.fill(sc.send_mut()?, &all(k));
                }
                if rank == first {
                    c.fill(scv.send_mut()?, &all_v(k));
                }
                c.fill(a2a.send_mut()?, &tag(k, rank, n * size));
                let a2av_in: Vec<V> = (0..size)
                    .flat_map(|j| {
                        (0..count(rank, j)).map(move |x| tagged::<V>(rank, 10 * j + x + k))
                    })
                    .collect();
                c.fill(a2av.send_mut()?, &a2av_in);
                // All in flight together, completed out of order.
                barrier.start()?;
                bc.start()?;
                ag.start()?;
                agv.start()?;
                g.start()?;
                gv.start()?;
                sc.start()?;
                scv.start()?;
                a2a.start()?;
                a2av.start()?;
                for p in [
                    &mut a2av, &mut a2a, &mut scv, &mut sc, &mut gv, &mut g, &mut agv, &mut ag,
                    &mut bc,
                ] {
                    p.wait()?;
                }
                barrier.wait()?;
                t.eq(
                    &c.down_mut::<V>(bc.recv()?),
                    &tag(k, first, n),
                    &format!("broadcast_init {at_k}"),
                );
                t.eq(
                    &c.down_mut::<V>(ag.recv()?),
                    &all(k),
                    &format!("all_gather_init {at_k}"),
                );
                t.eq(
                    &c.down_mut::<V>(agv.recv()?),
                    &all_v(k),
                    &format!("all_gather_v_init {at_k}"),
                );
                if rank == first {
                    t.eq(
                        &c.down_mut::<V>(g.recv()?),
                        &all(k),
                        &format!("gather_init {at_k}"),
                    );
                }
                if rank == last {
                    t.eq(
                        &c.down_mut::<V>(gv.recv()?),
                        &all_v(k),
                        &format!("gather_v_init {at_k}"),
                    );
                }
                t.eq(
                    &c.down_mut::<V>(sc.recv()?),
                    &tag(k, rank, n),
                    &format!("scatter_init {at_k}"),
                );
                t.eq(
                    &c.down_mut::<V>(scv.recv()?),
                    &tag(k, rank, counts[rank]),
                    &format!("scatter_v_init {at_k}"),
                );
                let a2a_want: Vec<V> = (0..size)
                    .flat_map(|r| (0..n).map(move |i| tagged::<V>(r, 7 * k + rank * n + i)))
                    .collect();
                t.eq(
                    &c.down_mut::<V>(a2a.recv()?),
                    &a2a_want,
                    &format!("all_to_all_init {at_k}"),
                );
                let a2av_want: Vec<V> = (0..size)
                    .flat_map(|i| {
                        (0..count(i, rank)).map(move |x| tagged::<V>(i, 10 * rank + x + k))
                    })
                    .collect();
                t.eq(
                    &c.down_mut::<V>(a2av.recv()?),
                    &a2av_want,
                    &format!("all_to_all_v_init {at_k}"),
                );
            }
            Ok(())
        });
        t.ok(r.and_then(|x| x), &format!("persistent movement {what}"));
    }
}

/// Collectives on parts of device allocations: cudarc's views (`CudaView` from `slice`,
/// `CudaViewMut` from `slice_mut`) in every form (blocking, rooted with `as_buf_mut`,
/// non-blocking, persistent), each leaving the memory around the view untouched.
pub fn views<C>(t: &T, c: &C)
where
    C: Backend<Memory = collectives::Device> + DeviceCommunicator,
    C: Backend<Owned<f32> = collectives::cudarc::driver::CudaSlice<f32>>,
{
    use collectives::DeviceBufferMut;
    let (rank, size) = (c.rank(), c.size());
    let op = ReduceOp::Sum;
    let n = 16;
    let (lo, hi) = (4, 12); // the part of `send` that is sent
    let at = 2; // where it lands in `recv`
    let m = hi - lo;
    let fresh = || -> Vec<f32> { (0..n).map(|i| -1.0 - i as f32).collect() };
    let reduced_into = |start: usize| -> Vec<f32> {
        let mut want = fresh();
        for j in 0..m {
            want[start + j] = reduced::<f32>(op, size, lo + j);
        }
        want
    };
    let send = c.up(&inputs::<f32>(op, rank, n));

    let mut recv = c.up(&fresh());
    t.ok(
        c.all_reduce(&send.slice(lo..hi), &mut recv.slice_mut(at..at + m), op),
        "all_reduce on views",
    );
    t.eq(&c.down(&recv), &reduced_into(at), "all_reduce on views");

    let mut recv = c.up(&fresh());
    let root = size - 1;
    let is_root = rank == root;
    let mut part = recv.slice_mut(at..at + m);
    t.ok(
        c.reduce(
            &send.slice(lo..hi),
            is_root.then_some(part.as_buf_mut()),
            op,
            root,
        ),
        "reduce into a view on the root",
    );
    let want = if is_root { reduced_into(at) } else { fresh() };
    t.eq(&c.down(&recv), &want, "reduce into a view on the root");

    let mut buf = c.up(&(0..n).map(|i| tagged::<f32>(rank, i)).collect::<Vec<_>>());
    t.ok(
        c.broadcast(&mut buf.slice_mut(lo..hi), 0),
        "broadcast of a view",
    );
    let want: Vec<f32> = (0..n)
        .map(|i| tagged::<f32>(if (lo..hi).contains(&i) { 0 } else { rank }, i))
        .collect();
    t.eq(&c.down(&buf), &want, "broadcast of a view");

    let mut gathered = c.up(&vec![0.0f32; m * size + 2]);
    t.ok(
        c.all_gather(
            &send.slice(lo..hi),
            &mut gathered.slice_mut(1..1 + m * size),
        ),
        "all_gather into a view",
    );
    let mut want = vec![0.0f32; m * size + 2];
    for r in 0..size {
        for j in 0..m {
            want[1 + r * m + j] = inputs::<f32>(op, r, n)[lo + j];
        }
    }
    t.eq(&c.down(&gathered), &want, "all_gather into a view");

    let mut recv = c.up(&fresh());
    let started = {
        // Views live as long as the buffers of any scoped operation: beyond the scope.
        let (part, mut out) = (send.slice(lo..hi), recv.slice_mut(at..at + m));
        scope(|s| -> collectives::Result<()> { c.i_all_reduce(s, &part, &mut out, op)?.wait() })
            .and_then(|r| r)
    };
    t.ok(started, "i_all_reduce on views");
    t.eq(&c.down(&recv), &reduced_into(at), "i_all_reduce on views");

    let mut input = c.up(&inputs::<f32>(op, rank, n));
    let mut recv = c.up(&fresh());
    let ran = {
        let (mut part, mut out) = (input.slice_mut(lo..hi), recv.slice_mut(at..at + m));
        scope(|s| -> collectives::Result<()> {
            let mut plan = c.all_reduce_init(s, &mut part, &mut out, op)?;
            for _ in 0..3 {
                plan.start()?;
                plan.wait()?;
            }
            Ok(())
        })
        .and_then(|r| r)
    };
    t.ok(ran, "persistent all_reduce on views");
    t.eq(
        &c.down(&recv),
        &reduced_into(at),
        "persistent all_reduce on views",
    );
    // A read-only view is a send buffer only: the compiler refuses one as a receive buffer
    // (tests/ui/read_only_view_as_recv.rs).
}
