// The root's receive buffer of a non-blocking reduce cannot be read while the reduce may write it.
use collectives::{scope, Communicator, MpiComm, ReduceOp};

fn main() {
    let universe = mpi::initialize().unwrap();
    let comm = MpiComm::world(&universe).unwrap();
    let send = vec![1.0f64; 4];
    let mut recv = vec![0.0f64; 4];
    scope(|s| {
        let request = comm
            .i_reduce(s, &send[..], Some(&mut recv[..]), ReduceOp::Avg, 0)
            .unwrap();
        let early = recv[0]; // error: `recv` is borrowed by the operation in flight
        request.wait().unwrap();
        early
    })
    .unwrap();
}
