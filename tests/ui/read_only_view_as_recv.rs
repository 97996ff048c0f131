// A read-only cudarc view (`CudaSlice::slice`) can be sent, never written: as a receive buffer it
// does not compile.
use collectives::cudarc::driver::CudaSlice;
use collectives::{Communicator, NcclComm, ReduceOp};

fn sum_into_a_read_only_view(comm: &NcclComm, send: &CudaSlice<f32>, recv: &CudaSlice<f32>) {
    comm.all_reduce(&send.slice(0..4), &mut recv.slice(0..4), ReduceOp::Sum)
        .unwrap();
}

fn main() {}
