// A persistent plan lives in its scope: it cannot be taken out of it (the scope completes its run
// in flight when it ends, also when the plan was leaked).
use collectives::{scope, Communicator, MpiComm, ReduceOp};

fn main() {
    let universe = mpi::initialize().unwrap();
    let comm = MpiComm::world(&universe).unwrap();
    let mut buf = vec![1.0f64; 4];
    let plan = scope(|s| {
        comm.all_reduce_in_place_init(s, &mut buf[..], ReduceOp::Sum)
            .unwrap() // error: the plan borrows the scope
    })
    .unwrap();
    drop(plan);
}
