// The send buffer of a non-blocking all-to-all-v cannot be written while the operation may read it.
use collectives::{scope, Communicator, MpiComm};

fn main() {
    let universe = mpi::initialize().unwrap();
    let comm = MpiComm::world(&universe).unwrap();
    let counts = vec![1usize; comm.size()];
    let mut send = vec![1.0f64; comm.size()];
    let mut recv = vec![0.0f64; comm.size()];
    scope(|s| {
        let request = comm
            .i_all_to_all_v(s, &send[..], &counts, &mut recv[..], &counts)
            .unwrap();
        send[0] = 2.0; // error: `send` is borrowed by the operation in flight
        request.wait().unwrap();
    })
    .unwrap();
}
