// A request cannot escape its scope: the scope waits for everything started in it.
use collectives::{scope, Communicator, MpiComm, ReduceOp};

fn main() {
    let universe = mpi::initialize().unwrap();
    let comm = MpiComm::world(&universe).unwrap();
    let send = vec![1.0f64; 4];
    let mut recv = vec![0.0f64; 4];
    let escaped = scope(|s| comm.i_all_reduce(s, &send[..], &mut recv[..], ReduceOp::Sum).unwrap()).unwrap();
    escaped.wait().unwrap();
}
