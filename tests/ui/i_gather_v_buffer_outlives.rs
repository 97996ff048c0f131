// A buffer of a non-blocking gather-v cannot be dropped while the scope may still wait for it.
use collectives::{scope, Communicator, MpiComm};

fn main() {
    let universe = mpi::initialize().unwrap();
    let comm = MpiComm::world(&universe).unwrap();
    let counts = vec![2usize; comm.size()];
    let mut recv = vec![0.0f64; 2 * comm.size()];
    scope(|s| {
        let send = vec![1.0f64; 2];
        let _request = comm
            .i_gather_v(s, &send[..], Some(&mut recv[..]), &counts, 0)
            .unwrap();
        // error: `send` is dropped here while the request, left to the scope, may still read it
    })
    .unwrap();
}
