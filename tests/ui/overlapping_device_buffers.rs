// On device memory too, overlapping send and receive buffers do not compile: both are borrows of the
// same allocation, one of them mutable.
use collectives::cudarc::driver::CudaSlice;
use collectives::{Communicator, MpiStagedComm, ReduceOp};

fn reduce_onto_itself(comm: &MpiStagedComm, x: &mut CudaSlice<f32>) {
    comm.all_reduce(x, x, ReduceOp::Sum).unwrap();
    comm.send_recv(x, 0, x, 0, 0).unwrap();
}

fn main() {
    let _ = reduce_onto_itself;
}
