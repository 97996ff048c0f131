//! `allreduce`: every rank gets the reduction of every rank's buffer; out-of-place and in-place. The
//! `raw` variant ([`crate::measure::raw`]) calls the backend's own all-reduce instead of the library's.

use crate::measure::expected::{expected_value, input_value, BenchElement};
use crate::measure::hooks::{BenchBackend, Bufs, Collective, Ctx, Shape};
use collectives_core::Communicator;

hooks! {
    "allreduce",
    const REDUCES: bool = true;
    const IN_PLACE: bool = true;

    fn busbw_factor(nranks: usize) -> f64 {
        crate::measure::timing::allreduce_busbw_factor(nranks)
    }
    fn shape(count: usize, _: &Ctx) -> Shape {
        Shape::flat(count)
    }
    fn input<T: BenchElement>(ctx: &Ctx, _: &Shape, i: usize) -> T {
        input_value(ctx.op, ctx.rank, ctx.nranks, i)
    }
    fn expected<T: BenchElement>(ctx: &Ctx, _: &Shape, i: usize) -> Option<T> {
        Some(expected_value(ctx.op, ctx.nranks, i))
    }
    fn run<B: BenchBackend, T: BenchElement>(b: &B, c: Bufs<'_, B, T>) -> anyhow::Result<()> {
        Ok(b.comm().all_reduce(c.send, c.recv, c.ctx.op)?)
    }
    fn run_in_place<B: BenchBackend, T: BenchElement>(
        b: &B,
        ctx: &Ctx,
        _: &Shape,
        buf: &mut B::Owned<T>,
    ) -> anyhow::Result<()> {
        Ok(b.comm().all_reduce_in_place(B::buf_mut(buf), ctx.op)?)
    }
    fn run_raw<B: BenchBackend, T: BenchElement>(
        b: &B,
        ctx: &Ctx,
        send: Option<&B::Owned<T>>,
        recv: &mut B::Owned<T>,
    ) -> anyhow::Result<()> {
        b.raw_all_reduce(send, recv, ctx.op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::coll::testing::{check, inputs, ranks};
    use collectives_core::ReduceOp;

    fn simulate<T: BenchElement>(op: ReduceOp, n: usize) {
        let r = ranks::<Hooks>(50, n, 0, op);
        let ins = inputs::<Hooks, T>(&r);
        let mut out = ins[0].clone();
        for x in &ins[1..] {
            for (o, v) in out.iter_mut().zip(x) {
                *o = T::combine(op, *o, *v);
            }
        }
        if op == ReduceOp::Avg {
            out.iter_mut().for_each(|o| *o = o.div_ranks(n));
        }
        check::<Hooks, T>(&r, &vec![out; n]);
    }

    #[test]
    fn sizing_fill_and_check() {
        assert_eq!(
            Hooks::shape(7, &ranks::<Hooks>(1, 3, 0, ReduceOp::Sum)[0].0).send,
            7
        );
        for n in 1..5 {
            for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max] {
                simulate::<i32>(op, n);
                simulate::<f32>(op, n);
            }
            simulate::<f64>(ReduceOp::Avg, n);
        }
    }
}
