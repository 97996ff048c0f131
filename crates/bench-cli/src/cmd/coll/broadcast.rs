//! `broadcast`: the root's buffer to every rank. The library's broadcast works on one buffer, so
//! the one form is reported in the out-of-place columns.

use crate::measure::expected::{moved, BenchElement};
use crate::measure::hooks::{BenchBackend, Bufs, Collective, Ctx, Shape};
use collectives_core::Communicator;

hooks! {
    "broadcast",
    const ROOTED: bool = true;

    fn busbw_factor(_: usize) -> f64 {
        1.0
    }
    fn shape(count: usize, _: &Ctx) -> Shape {
        Shape::flat(count)
    }
    /// Every rank starts with its own input: the root's is what is sent, the others' must be
    /// overwritten.
    fn recv_init<T: BenchElement>(_: &Ctx, _: &Shape, input: &[T]) -> Option<Vec<T>> {
        Some(input.to_vec())
    }
    fn expected<T: BenchElement>(ctx: &Ctx, _: &Shape, i: usize) -> Option<T> {
        Some(moved(ctx.root, i))
    }
    fn run<B: BenchBackend, T: BenchElement>(b: &B, c: Bufs<'_, B, T>) -> anyhow::Result<()> {
        Ok(b.comm().broadcast(c.recv, c.ctx.root)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::coll::testing::{check, inputs, ranks};
    use collectives_core::ReduceOp;

    #[test]
    fn sizing_fill_and_check() {
        for n in 2..5 {
            let r = ranks::<Hooks>(40, n, 1, ReduceOp::Sum);
            let ins = inputs::<Hooks, u32>(&r);
            check::<Hooks, u32>(&r, &vec![ins[1].clone(); n]);
            // A rank the broadcast did not reach still holds its own input: all wrong.
            let (c, s) = &r[0];
            let init = Hooks::recv_init(c, s, &ins[0]).unwrap();
            assert_eq!(
                crate::measure::hooks::count_wrong::<Hooks, u32>(c, s, &init, 0.0),
                40
            );
        }
    }
}
