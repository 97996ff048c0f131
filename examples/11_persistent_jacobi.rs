//! A persistent all-reduce in a solver loop: Jacobi iteration for the 1-D Poisson problem
//! `-u'' = 1` on `(0, 1)` with `u(0) = u(1) = 0`, the grid split across ranks. Each sweep exchanges
//! one ghost value with each neighbour and needs the global residual norm, whose all-reduce is set
//! up once (`all_reduce_init`) and started every sweep: checked once, and on an MPI with persistent
//! collectives (MPI 4, or Open MPI's `MPIX_*_init`) made once by the library. The example checks
//! that the iteration converged and that the answer matches the one computed on one rank. The
//! ghost exchange is written once for every host backend (`Communicator<Memory = Host>`): the
//! element type of each call is inferred from the slices.
//! Run: `mpirun -n 2 target/debug/examples/11_persistent_jacobi`.

use collectives::{scope, Communicator, Host, MpiComm, ReduceOp};

/// Interior points in all.
const N: usize = 64;
/// Sweeps at most.
const SWEEPS: usize = 20_000;
/// Stop when the residual's 2-norm falls below this.
const TOL: f64 = 1e-8;

/// One Jacobi sweep over `u` (with its ghost cells at both ends) into `next`; returns this rank's
/// sum of squared residuals of `u`.
fn sweep(u: &[f64], next: &mut [f64], h2: f64) -> f64 {
    let mut res = 0.0;
    for i in 1..u.len() - 1 {
        let r = 1.0 - (2.0 * u[i] - u[i - 1] - u[i + 1]) / h2;
        res += r * r;
        next[i] = 0.5 * (u[i - 1] + u[i + 1] + h2);
    }
    res
}

/// Fill the ghost cells at both ends of `u` from the neighbouring ranks (none past the boundary),
/// on any host backend.
fn exchange_ghosts<C: Communicator<Memory = Host>>(
    comm: &C,
    u: &mut [f64],
) -> collectives::Result<()> {
    let (rank, size) = (comm.rank(), comm.size());
    let last = u.len() - 1;
    if rank + 1 < size {
        let mut ghost = [0.0];
        comm.send_recv(&u[last - 1..last], rank + 1, &mut ghost, rank + 1, 1)?;
        u[last] = ghost[0];
    }
    if rank > 0 {
        let mut ghost = [0.0];
        comm.send_recv(&u[1..2], rank - 1, &mut ghost, rank - 1, 1)?;
        u[0] = ghost[0];
    }
    Ok(())
}

fn main() -> Result<(), collectives::Error> {
    let universe = mpi::initialize().expect("MPI initializes once");
    let comm = MpiComm::world(&universe)?;
    let (rank, size) = (comm.rank(), comm.size());
    let h = 1.0 / (N + 1) as f64;
    let h2 = h * h;
    // This rank's block of interior points, with a ghost cell at each end (0 at the boundary).
    let (lo, hi) = (rank * N / size, (rank + 1) * N / size);
    let mut u = vec![0.0f64; hi - lo + 2];
    let mut next = u.clone();
    let mut local = [0.0f64];
    let mut global = [0.0f64];
    let (sweeps, norm, path) = scope(|s| -> collectives::Result<(usize, f64, String)> {
        let mut norm2 = comm.all_reduce_init(s, &mut local[..], &mut global[..], ReduceOp::Sum)?;
        let path = norm2.path().to_string();
        for k in 0..SWEEPS {
            exchange_ghosts(&comm, &mut u)?;
            let res = sweep(&u, &mut next, h2);
            norm2.send_mut()?[0] = res;
            norm2.start()?;
            std::mem::swap(&mut u, &mut next);
            norm2.wait()?;
            let norm = norm2.recv()?[0].sqrt();
            if norm < TOL {
                return Ok((k, norm, path));
            }
        }
        Ok((SWEEPS, f64::NAN, path))
    })??;
    assert!(
        sweeps < SWEEPS,
        "Jacobi did not converge in {SWEEPS} sweeps"
    );
    // The discrete solution of -u'' = 1 is the parabola x (1 - x) / 2 at the grid points.
    for (j, &v) in u[1..u.len() - 1].iter().enumerate() {
        let x = (lo + j + 1) as f64 * h;
        let exact = x * (1.0 - x) / 2.0;
        assert!((v - exact).abs() < 1e-6, "u({x}) = {v}, expected {exact}");
    }
    if rank == 0 {
        println!(
            "persistent Jacobi: {N} points on {size} ranks converged in {sweeps} sweeps \
             (residual {norm:.2e}); the norm's all-reduce ran as {path}"
        );
    }
    Ok(())
}
