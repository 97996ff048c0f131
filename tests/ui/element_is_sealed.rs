// `Element` is sealed: no crate outside the library can claim that a type of its own travels and
// reduces as some wire type (and, say, get `Avg` silently computed as `Sum`).
use collectives::element::{DType, ElementKind, WireForm};
use collectives::Element;

#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Zeroable, bytemuck::Pod)]
#[repr(transparent)]
struct Meters(f64);

unsafe impl Element for Meters {
    const NAME: &'static str = "meters";
    const WIRE: WireForm = WireForm { dtype: DType::F64, lanes: 1 };
    const KIND: ElementKind = ElementKind::Float;
    type Mpi = f64;
    fn divide_all(buf: &mut [Self], n: usize) {
        buf.iter_mut().for_each(|x| x.0 /= n as f64);
    }
}

fn main() {}
