//! `sendrecv`: every rank sends its buffer to the next rank and receives the previous rank's (a
//! ring shift), as nccl-tests' `sendrecv` does.

use crate::measure::expected::{moved, BenchElement};
use crate::measure::hooks::{BenchBackend, Bufs, Collective, Ctx, Shape};
use collectives_core::Communicator;

/// The tag of the shift's messages.
pub const TAG: i32 = 7;

pub(crate) fn neighbours(ctx: &Ctx) -> (usize, usize) {
    (
        (ctx.rank + 1) % ctx.nranks,
        (ctx.rank + ctx.nranks - 1) % ctx.nranks,
    )
}

hooks! {
    "sendrecv",
    fn busbw_factor(_: usize) -> f64 {
        1.0
    }
    fn shape(count: usize, _: &Ctx) -> Shape {
        Shape::flat(count)
    }
    fn expected<T: BenchElement>(ctx: &Ctx, _: &Shape, i: usize) -> Option<T> {
        Some(moved(neighbours(ctx).1, i))
    }
    fn run<B: BenchBackend, T: BenchElement>(b: &B, c: Bufs<'_, B, T>) -> anyhow::Result<()> {
        let (next, prev) = neighbours(c.ctx);
        Ok(b.comm().send_recv(c.send, next, c.recv, prev, TAG)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::coll::testing::simulate;
    use collectives_core::ReduceOp;

    #[test]
    fn sizing_fill_and_check() {
        simulate::<Hooks, half::bf16>(
            30,
            1..5,
            |_| 0,
            ReduceOp::Sum,
            |r, ins| {
                let n = r.len();
                (0..n).map(|me| ins[(me + n - 1) % n].clone()).collect()
            },
        );
    }
}
