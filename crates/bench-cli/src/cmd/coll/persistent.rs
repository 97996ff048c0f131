//! Every collective's persistent form: the library's `*_init` call on the buffers of its blocking
//! hooks ([`PersistentForm`]).

use collectives_core::{Communicator, Scope};

use crate::measure::expected::BenchElement;
use crate::measure::hooks::{BenchBackend, BufMutOf, Ctx, Shape};
use crate::measure::persistent::{PersistentForm, Plan};

macro_rules! persistent {
    ($module:ident, $init:expr, |$b:ident, $ctx:ident, $shape:ident, $send:ident, $recv:ident, $in_place:ident, $s:ident| $body:expr) => {
        impl PersistentForm for super::$module::Hooks {
            const INIT: Option<&'static str> = $init;
            #[allow(unused_variables)]
            fn init<'s, B: BenchBackend, T: BenchElement>(
                $b: &'s B,
                $ctx: &Ctx,
                $shape: &Shape,
                $send: &'s mut B::Owned<T>,
                $recv: &'s mut B::Owned<T>,
                $in_place: bool,
                $s: &'s Scope<'s, '_>,
            ) -> anyhow::Result<Plan<'s, BufMutOf<'s, B, T>>> {
                $body
            }
        }
    };
}

persistent!(
    allreduce,
    Some("all_reduce_init"),
    |b, ctx, shape, send, recv, in_place, s| Ok(Plan::Buffers(if in_place {
        b.comm()
            .all_reduce_in_place_init(s, B::buf_mut(recv), ctx.op)?
    } else {
        b.comm()
            .all_reduce_init(s, B::buf_mut(send), B::buf_mut(recv), ctx.op)?
    }))
);
persistent!(
    allgather,
    Some("all_gather_init"),
    |b, ctx, shape, send, recv, in_place, s| Ok(Plan::Buffers(b.comm().all_gather_init(
        s,
        B::buf_mut(send),
        B::buf_mut(recv)
    )?))
);
persistent!(
    allgatherv,
    Some("all_gather_v_init"),
    |b, ctx, shape, send, recv, in_place, s| Ok(Plan::Buffers(b.comm().all_gather_v_init(
        s,
        B::buf_mut(send),
        B::buf_mut(recv),
        &shape.counts
    )?))
);
persistent!(
    reducescatter,
    Some("reduce_scatter_init"),
    |b, ctx, shape, send, recv, in_place, s| Ok(Plan::Buffers(b.comm().reduce_scatter_init(
        s,
        B::buf_mut(send),
        B::buf_mut(recv),
        ctx.op
    )?))
);
persistent!(
    broadcast,
    Some("broadcast_init"),
    |b, ctx, shape, send, recv, in_place, s| Ok(Plan::Buffers(b.comm().broadcast_init(
        s,
        B::buf_mut(recv),
        ctx.root
    )?))
);
persistent!(
    reduce,
    Some("reduce_init"),
    |b, ctx, shape, send, recv, in_place, s| {
        let recv = (ctx.rank == ctx.root).then(|| B::buf_mut(recv));
        Ok(Plan::Buffers(b.comm().reduce_init(
            s,
            B::buf_mut(send),
            recv,
            ctx.op,
            ctx.root,
        )?))
    }
);
persistent!(
    alltoall,
    Some("all_to_all_init"),
    |b, ctx, shape, send, recv, in_place, s| Ok(Plan::Buffers(b.comm().all_to_all_init(
        s,
        B::buf_mut(send),
        B::buf_mut(recv)
    )?))
);
persistent!(
    alltoallv,
    Some("all_to_all_v_init"),
    |b, ctx, shape, send, recv, in_place, s| {
        let n = ctx.nranks;
        let (sc, rc) = (&shape.counts[..n], &shape.counts[n..2 * n]);
        Ok(Plan::Buffers(b.comm().all_to_all_v_init(
            s,
            B::buf_mut(send),
            sc,
            B::buf_mut(recv),
            rc,
        )?))
    }
);
persistent!(
    gather,
    Some("gather_init"),
    |b, ctx, shape, send, recv, in_place, s| {
        let recv = (ctx.rank == ctx.root).then(|| B::buf_mut(recv));
        Ok(Plan::Buffers(b.comm().gather_init(
            s,
            B::buf_mut(send),
            recv,
            ctx.root,
        )?))
    }
);
persistent!(
    gatherv,
    Some("gather_v_init"),
    |b, ctx, shape, send, recv, in_place, s| {
        let recv = (ctx.rank == ctx.root).then(|| B::buf_mut(recv));
        Ok(Plan::Buffers(b.comm().gather_v_init(
            s,
            B::buf_mut(send),
            recv,
            &shape.counts,
            ctx.root,
        )?))
    }
);
persistent!(
    scatter,
    Some("scatter_init"),
    |b, ctx, shape, send, recv, in_place, s| {
        let send = (ctx.rank == ctx.root).then(|| B::buf_mut(send));
        Ok(Plan::Buffers(b.comm().scatter_init(
            s,
            send,
            B::buf_mut(recv),
            ctx.root,
        )?))
    }
);
persistent!(
    scatterv,
    Some("scatter_v_init"),
    |b, ctx, shape, send, recv, in_place, s| {
        let send = (ctx.rank == ctx.root).then(|| B::buf_mut(send));
        Ok(Plan::Buffers(b.comm().scatter_v_init(
            s,
            send,
            B::buf_mut(recv),
            &shape.counts,
            ctx.root,
        )?))
    }
);
persistent!(
    sendrecv,
    None,
    |b, ctx, shape, send, recv, in_place, s| anyhow::bail!(
        "sendrecv has no persistent form in the library"
    )
);
persistent!(
    barrier,
    Some("barrier_init"),
    |b, ctx, shape, send, recv, in_place, s| Ok(Plan::Barrier(b.comm().barrier_init(s)?))
);
