// A send and a receive buffer that overlap (two views of one allocation) do not compile: the receive
// buffer is borrowed mutably, so no other view of it may exist. `all_reduce_in_place` is the way to
// reduce a buffer onto itself (MPI_IN_PLACE).
use collectives::{Communicator, MpiComm, ReduceOp};

fn main() {
    let universe = mpi::initialize().unwrap();
    let comm = MpiComm::world(&universe).unwrap();
    let mut x = vec![1.0f64; 8];
    comm.all_reduce(&x[..4], &mut x[2..6], ReduceOp::Sum).unwrap();
    comm.send_recv(&x[..], 0, &mut x[..], 0, 0).unwrap();
}
