// The receive buffer of a non-blocking send-receive cannot be touched while the operation may write it.
use collectives::{scope, Communicator, MpiComm};

fn main() {
    let universe = mpi::initialize().unwrap();
    let comm = MpiComm::world(&universe).unwrap();
    let (next, prev) = ((comm.rank() + 1) % comm.size(), (comm.rank() + comm.size() - 1) % comm.size());
    let send = vec![1.0f64; 4];
    let mut recv = vec![0.0f64; 4];
    scope(|s| {
        let request = comm
            .i_send_recv(s, &send[..], next, &mut recv[..], prev, 0)
            .unwrap();
        recv.clear(); // error: `recv` is borrowed by the operation in flight
        request.wait().unwrap();
    })
    .unwrap();
}
