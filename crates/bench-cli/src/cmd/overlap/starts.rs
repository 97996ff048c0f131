//! The non-blocking form of each engine collective: how `collbench overlap` starts it, on the same
//! buffers (shape, inputs, root-only arguments) as the blocking hooks of [`crate::cmd::coll`] use.

use collectives_core::{Communicator, Request, Scope};

use crate::cmd::coll;
use crate::measure::expected::BenchElement;
use crate::measure::hooks::{BenchBackend, Collective, Ctx, Shape};

/// A collective with a non-blocking form in the library: the hook that starts it.
pub trait NonBlocking: Collective {
    /// The library call it starts (`i_all_reduce`, ...), for the header.
    const CALL: &'static str;

    /// Start the operation on `send` and `recv` (this rank's buffers, as the blocking hook gets
    /// them) in scope `s`.
    ///
    /// # Errors
    /// The library's errors.
    fn start<'s, B: BenchBackend, T: BenchElement>(
        b: &'s B,
        ctx: &Ctx,
        shape: &Shape,
        send: &'s B::Owned<T>,
        recv: &'s mut B::Owned<T>,
        s: &'s Scope<'s, '_>,
    ) -> anyhow::Result<Request<'s>>;
}

macro_rules! non_blocking {
    ($module:ident, $call:literal, |$b:ident, $ctx:ident, $shape:ident, $send:ident, $recv:ident, $s:ident| $body:expr) => {
        impl NonBlocking for coll::$module::Hooks {
            const CALL: &'static str = $call;
            #[allow(unused_variables)]
            fn start<'s, B: BenchBackend, T: BenchElement>(
                $b: &'s B,
                $ctx: &Ctx,
                $shape: &Shape,
                $send: &'s B::Owned<T>,
                $recv: &'s mut B::Owned<T>,
                $s: &'s Scope<'s, '_>,
            ) -> anyhow::Result<Request<'s>> {
                Ok($body?)
            }
        }
    };
}

non_blocking!(allreduce, "i_all_reduce", |b, ctx, shape, send, recv, s| b
    .comm()
    .i_all_reduce(s, B::buf(send), B::buf_mut(recv), ctx.op));
non_blocking!(allgather, "i_all_gather", |b, ctx, shape, send, recv, s| b
    .comm()
    .i_all_gather(s, B::buf(send), B::buf_mut(recv)));
non_blocking!(
    allgatherv,
    "i_all_gather_v",
    |b, ctx, shape, send, recv, s| b.comm().i_all_gather_v(
        s,
        B::buf(send),
        B::buf_mut(recv),
        &shape.counts
    )
);
non_blocking!(
    reducescatter,
    "i_reduce_scatter",
    |b, ctx, shape, send, recv, s| b.comm().i_reduce_scatter(
        s,
        B::buf(send),
        B::buf_mut(recv),
        ctx.op
    )
);
non_blocking!(broadcast, "i_broadcast", |b, ctx, shape, send, recv, s| b
    .comm()
    .i_broadcast(s, B::buf_mut(recv), ctx.root));
non_blocking!(reduce, "i_reduce", |b, ctx, shape, send, recv, s| {
    let recv = (ctx.rank == ctx.root).then(|| B::buf_mut(recv));
    b.comm().i_reduce(s, B::buf(send), recv, ctx.op, ctx.root)
});
non_blocking!(alltoall, "i_all_to_all", |b, ctx, shape, send, recv, s| b
    .comm()
    .i_all_to_all(s, B::buf(send), B::buf_mut(recv)));
non_blocking!(
    alltoallv,
    "i_all_to_all_v",
    |b, ctx, shape, send, recv, s| {
        let n = ctx.nranks;
        let (sc, rc) = (&shape.counts[..n], &shape.counts[n..2 * n]);
        b.comm()
            .i_all_to_all_v(s, B::buf(send), sc, B::buf_mut(recv), rc)
    }
);
non_blocking!(gather, "i_gather", |b, ctx, shape, send, recv, s| {
    let recv = (ctx.rank == ctx.root).then(|| B::buf_mut(recv));
    b.comm().i_gather(s, B::buf(send), recv, ctx.root)
});
non_blocking!(gatherv, "i_gather_v", |b, ctx, shape, send, recv, s| {
    let recv = (ctx.rank == ctx.root).then(|| B::buf_mut(recv));
    b.comm()
        .i_gather_v(s, B::buf(send), recv, &shape.counts, ctx.root)
});
non_blocking!(scatter, "i_scatter", |b, ctx, shape, send, recv, s| {
    let send = (ctx.rank == ctx.root).then(|| B::buf(send));
    b.comm().i_scatter(s, send, B::buf_mut(recv), ctx.root)
});
non_blocking!(scatterv, "i_scatter_v", |b, ctx, shape, send, recv, s| {
    let send = (ctx.rank == ctx.root).then(|| B::buf(send));
    b.comm()
        .i_scatter_v(s, send, B::buf_mut(recv), &shape.counts, ctx.root)
});
non_blocking!(sendrecv, "i_send_recv", |b, ctx, shape, send, recv, s| {
    let (next, prev) = coll::sendrecv::neighbours(ctx);
    b.comm().i_send_recv(
        s,
        B::buf(send),
        next,
        B::buf_mut(recv),
        prev,
        coll::sendrecv::TAG,
    )
});
non_blocking!(barrier, "i_barrier", |b, ctx, shape, send, recv, s| b
    .comm()
    .i_barrier(s));
