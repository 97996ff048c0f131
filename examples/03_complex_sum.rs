//! Complex numbers: Sum and Prod with MPI's own complex types, and Max refused with a typed error
//! (complex numbers are not ordered).
//! Run: `mpirun -n 3 target/debug/examples/03_complex_sum`.

use collectives::{Communicator, Error, MpiComm, ReduceOp};
use num_complex::Complex64;

fn main() -> Result<(), Error> {
    let universe = mpi::initialize().expect("MPI initializes once");
    let comm = MpiComm::world(&universe)?;
    let (rank, size) = (comm.rank(), comm.size());

    // Rank r holds r + i*(r+1) and the unit e^{i pi r / 2} = i^r.
    let z = Complex64::new(rank as f64, (rank + 1) as f64);
    let mut sum = [Complex64::new(0.0, 0.0)];
    comm.all_reduce(&[z][..], &mut sum[..], ReduceOp::Sum)?;
    let expected_sum: Complex64 = (0..size)
        .map(|r| Complex64::new(r as f64, (r + 1) as f64))
        .sum();
    assert_eq!(sum[0], expected_sum);

    let unit = Complex64::i().powu(rank as u32);
    let mut prod = [unit];
    comm.all_reduce_in_place(&mut prod[..], ReduceOp::Prod)?;
    // i^(0 + 1 + ... + size-1): a true complex product, not a lane-by-lane one.
    let expected_prod = Complex64::i().powu((size * (size - 1) / 2) as u32);
    assert!(
        (prod[0] - expected_prod).norm() < 1e-12,
        "product {} vs {expected_prod}",
        prod[0]
    );

    let refused = comm.all_reduce(&[z][..], &mut sum[..], ReduceOp::Max);
    assert!(matches!(refused, Err(Error::Unsupported { .. })));

    if rank == 0 {
        println!(
            "03_complex_sum: {size} ranks, sum {}, product {}: correct",
            sum[0], prod[0]
        );
        println!("03_complex_sum: max refused: {}", refused.unwrap_err());
    }
    Ok(())
}
