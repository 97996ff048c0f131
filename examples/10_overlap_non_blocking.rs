//! Compute overlapped with communication: a pipelined conjugate-gradient-style step starts the
//! global dot products of one block with `i_all_reduce`, updates the next block while they are in
//! flight, then waits. The buffers of the reduction stay borrowed by its request until it completes,
//! so the update cannot touch them by mistake (it works on other memory); the scope waits for any
//! request still in flight when it ends.
//! Run: `mpirun -n 4 target/debug/examples/10_overlap_non_blocking`.

use collectives::{scope, Communicator, MpiComm, ReduceOp};

/// The local update done while the reduction is in flight: `y = a x + y`, element by element.
fn axpy(a: f64, x: &[f64], y: &mut [f64]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

fn main() -> Result<(), collectives::Error> {
    let universe = mpi::initialize().expect("MPI initializes once");
    let comm = MpiComm::world(&universe)?;
    let (rank, size) = (comm.rank(), comm.size());

    // This rank's share of two vectors, and their partial dot products r.r and r.z.
    let n = 1 << 16;
    let r: Vec<f64> = (0..n).map(|i| ((i + rank) % 7) as f64).collect();
    let z: Vec<f64> = (0..n).map(|i| ((i * 3 + rank) % 5) as f64).collect();
    let partial = [
        r.iter().map(|v| v * v).sum::<f64>(),
        r.iter().zip(&z).map(|(a, b)| a * b).sum::<f64>(),
    ];
    let mut global = [0.0; 2];
    let mut x = vec![1.0; n];

    scope(|s| -> Result<(), collectives::Error> {
        let request = comm.i_all_reduce(s, &partial[..], &mut global[..], ReduceOp::Sum)?;
        // Overlapped work on memory the request does not hold.
        axpy(0.5, &z, &mut x);
        request.wait()
    })??;

    // Independently computed answers: every rank's vectors rebuilt here.
    let (mut rr, mut rz) = (0.0, 0.0);
    for p in 0..size {
        for i in 0..n {
            let (ri, zi) = (((i + p) % 7) as f64, ((i * 3 + p) % 5) as f64);
            rr += ri * ri;
            rz += ri * zi;
        }
    }
    assert_eq!(global, [rr, rz], "rank {rank}: the dot products");
    let updated_ok = x.iter().zip(&z).all(|(xi, zi)| *xi == 1.0 + 0.5 * zi);
    assert!(updated_ok, "rank {rank}: the overlapped update");

    if rank == 0 {
        println!("10_overlap_non_blocking: {size} ranks, r.r = {rr}, r.z = {rz}: correct");
    }
    Ok(())
}
