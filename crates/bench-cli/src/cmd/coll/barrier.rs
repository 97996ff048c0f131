//! `barrier`: no data; one row of size 0 with the time per barrier.

use crate::measure::expected::BenchElement;
use crate::measure::hooks::{BenchBackend, Bufs, Collective, Ctx, Shape};
use collectives_core::Communicator;

hooks! {
    "barrier",
    const SIZED: bool = false;

    fn busbw_factor(_: usize) -> f64 {
        0.0
    }
    fn shape(_: usize, _: &Ctx) -> Shape {
        Shape::default()
    }
    fn input<T: BenchElement>(_: &Ctx, _: &Shape, _: usize) -> T {
        T::zeroed()
    }
    fn expected<T: BenchElement>(_: &Ctx, _: &Shape, _: usize) -> Option<T> {
        None
    }
    fn run<B: BenchBackend, T: BenchElement>(b: &B, c: Bufs<'_, B, T>) -> anyhow::Result<()> {
        let _ = c;
        Ok(b.comm().barrier()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::coll::testing::ranks;
    use collectives_core::ReduceOp;

    #[test]
    fn no_buffers() {
        let r = ranks::<Hooks>(1024, 3, 0, ReduceOp::Sum);
        assert!(r.iter().all(|(_, s)| *s == Shape::default()));
        assert_eq!(Hooks::busbw_factor(3), 0.0);
    }
}
