// A persistent plan borrows its buffers for its whole life: between runs they are reached through
// the plan (`send_mut`, `recv`), never directly.
use collectives::{scope, Communicator, MpiComm, ReduceOp};

fn main() {
    let universe = mpi::initialize().unwrap();
    let comm = MpiComm::world(&universe).unwrap();
    let mut send = vec![1.0f64; 4];
    let mut recv = vec![0.0f64; 4];
    scope(|s| {
        let mut plan = comm
            .all_reduce_init(s, &mut send[..], &mut recv[..], ReduceOp::Sum)
            .unwrap();
        plan.start().unwrap();
        send[0] = 2.0; // error: `send` is borrowed by the plan
        let _ = recv[0]; // error: `recv` is borrowed by the plan
        plan.wait().unwrap();
    })
    .unwrap();
}
