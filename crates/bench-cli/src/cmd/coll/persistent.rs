//! Every collective's persistent form: the library's `*_init` call on the buffers of its blocking
//! hooks ([`PersistentForm`]), one line each.
//!
//! In each line `c` is the measured communicator, `ctx` where this rank stands, `shape` the buffers'
//! sizes, `send` and `recv` the buffers as the communicator takes them (`recv` alone in place),
//! `in_place` the placement and `s` the scope that the plan borrows.

use collectives_core::{Communicator, Scope};

use crate::measure::expected::BenchElement;
use crate::measure::hooks::{BenchBackend, BufMutOf, Ctx, Shape};
use crate::measure::persistent::{PersistentForm, Plan};

macro_rules! persistent {
    ($($module:ident, $init:expr, $plan:ident,
       |$c:ident, $ctx:ident, $shape:ident, $send:ident, $recv:ident, $in_place:ident, $s:ident|
       $body:expr;)*) => {$(
        impl PersistentForm for super::$module::Hooks {
            const INIT: Option<&'static str> = $init;
            #[allow(unused_variables)]
            fn init<'s, B: BenchBackend, T: BenchElement>(
                b: &'s B,
                $ctx: &Ctx,
                $shape: &Shape,
                send: &'s mut B::Owned<T>,
                recv: &'s mut B::Owned<T>,
                $in_place: bool,
                $s: &'s Scope<'s, '_>,
            ) -> anyhow::Result<Plan<'s, BufMutOf<'s, B, T>>> {
                let $c = b.comm();
                let ($send, $recv) = (B::buf_mut(send), B::buf_mut(recv));
                Ok(Plan::$plan($body?))
            }
        }
    )*};
}

persistent! {
    allreduce, Some("all_reduce_init"), Buffers, |c, ctx, shape, send, recv, in_place, s|
        if in_place {
            c.all_reduce_in_place_init(s, recv, ctx.op)
        } else {
            c.all_reduce_init(s, send, recv, ctx.op)
        };
    allgather, Some("all_gather_init"), Buffers, |c, ctx, shape, send, recv, in_place, s|
        c.all_gather_init(s, send, recv);
    allgatherv, Some("all_gather_v_init"), Buffers, |c, ctx, shape, send, recv, in_place, s|
        c.all_gather_v_init(s, send, recv, &shape.counts);
    reducescatter, Some("reduce_scatter_init"), Buffers, |c, ctx, shape, send, recv, in_place, s|
        c.reduce_scatter_init(s, send, recv, ctx.op);
    broadcast, Some("broadcast_init"), Buffers, |c, ctx, shape, send, recv, in_place, s|
        c.broadcast_init(s, recv, ctx.root);
    reduce, Some("reduce_init"), Buffers, |c, ctx, shape, send, recv, in_place, s|
        c.reduce_init(s, send, ctx.is_root().then_some(recv), ctx.op, ctx.root);
    alltoall, Some("all_to_all_init"), Buffers, |c, ctx, shape, send, recv, in_place, s|
        c.all_to_all_init(s, send, recv);
    alltoallv, Some("all_to_all_v_init"), Buffers, |c, ctx, shape, send, recv, in_place, s| {
        let (sc, rc) = shape.counts.split_at(ctx.nranks);
        c.all_to_all_v_init(s, send, sc, recv, &rc[..ctx.nranks])
    };
    gather, Some("gather_init"), Buffers, |c, ctx, shape, send, recv, in_place, s|
        c.gather_init(s, send, ctx.is_root().then_some(recv), ctx.root);
    gatherv, Some("gather_v_init"), Buffers, |c, ctx, shape, send, recv, in_place, s|
        c.gather_v_init(s, send, ctx.is_root().then_some(recv), &shape.counts, ctx.root);
    scatter, Some("scatter_init"), Buffers, |c, ctx, shape, send, recv, in_place, s|
        c.scatter_init(s, ctx.is_root().then_some(send), recv, ctx.root);
    scatterv, Some("scatter_v_init"), Buffers, |c, ctx, shape, send, recv, in_place, s|
        c.scatter_v_init(s, ctx.is_root().then_some(send), recv, &shape.counts, ctx.root);
    sendrecv, None, Buffers, |c, ctx, shape, send, recv, in_place, s|
        Err::<collectives_core::Persistent<'s, _>, _>(anyhow::anyhow!(
            "sendrecv has no persistent form in the library"
        ));
    barrier, Some("barrier_init"), Barrier, |c, ctx, shape, send, recv, in_place, s|
        c.barrier_init(s);
}
