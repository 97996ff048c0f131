// A buffer handed to a non-blocking operation cannot be touched while the operation may use it.
use collectives::{scope, Communicator, MpiComm, ReduceOp};

fn main() {
    let universe = mpi::initialize().unwrap();
    let comm = MpiComm::world(&universe).unwrap();
    let send = vec![1.0f64; 4];
    let mut recv = vec![0.0f64; 4];
    scope(|s| {
        let request = comm.i_all_reduce(s, &send[..], &mut recv[..], ReduceOp::Sum).unwrap();
        recv[0] = 42.0; // error: `recv` is borrowed by the operation in flight
        request.wait().unwrap();
    })
    .unwrap();
}
