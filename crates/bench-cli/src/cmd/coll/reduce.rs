//! `reduce`: the reduction of every rank's buffer on the root.

use crate::measure::expected::{expected_value, input_value, BenchElement};
use crate::measure::hooks::{BenchBackend, Bufs, Collective, Ctx, Shape};
use collectives_core::Communicator;

hooks! {
    "reduce",
    const REDUCES: bool = true;
    const ROOTED: bool = true;

    fn busbw_factor(_: usize) -> f64 {
        1.0
    }
    fn shape(count: usize, ctx: &Ctx) -> Shape {
        Shape {
            recv: ctx.on_root(count),
            ..Shape::flat(count)
        }
    }
    fn input<T: BenchElement>(ctx: &Ctx, _: &Shape, i: usize) -> T {
        input_value(ctx.op, ctx.rank, ctx.nranks, i)
    }
    fn expected<T: BenchElement>(ctx: &Ctx, _: &Shape, i: usize) -> Option<T> {
        ctx.is_root().then(|| expected_value(ctx.op, ctx.nranks, i))
    }
    fn run<B: BenchBackend, T: BenchElement>(b: &B, c: Bufs<'_, B, T>) -> anyhow::Result<()> {
        let recv = c.ctx.is_root().then_some(c.recv);
        Ok(b.comm().reduce(c.send, recv, c.ctx.op, c.ctx.root)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::coll::testing::simulate;
    use collectives_core::ReduceOp;

    #[test]
    fn sizing_fill_and_check() {
        simulate::<Hooks, i64>(
            33,
            1..5,
            |n| n - 1,
            ReduceOp::Sum,
            |r, ins| {
                assert!(r.iter().all(|(c, s)| s.recv == c.on_root(33)));
                let sum: Vec<i64> = (0..33).map(|i| ins.iter().map(|x| x[i]).sum()).collect();
                r.iter()
                    .map(|(c, _)| if c.is_root() { sum.clone() } else { Vec::new() })
                    .collect()
            },
        );
    }
}
