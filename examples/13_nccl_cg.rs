//! A solver on the GPUs: conjugate gradients for the 1-D Poisson problem `-u'' = 1` on `(0, 1)`
//! with `u(0) = u(1) = 0`, the grid split across ranks, one GPU per rank, every vector on the
//! device. Each iteration gathers the ranks' boundary values (an all-gather), applies the matrix
//! and takes two dot products, each an 8-byte all-reduce whose result the host reads to compute
//! the step (as array-library solvers do). The example solves twice per round, once on a
//! communicator that takes the one-shot all-reduce for small messages (the default) and once on
//! one without it, checks both answers against the exact solution (the 3-point stencil is exact
//! for this quadratic), and prints the time per iteration of each, `ROUNDS` rounds interleaved.
//! Run: `mpirun -n 4 target/release/examples/13_nccl_cg`.

use std::sync::Arc;
use std::time::Instant;

use collectives::cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg,
};
use collectives::{device, Communicator, DeviceCommunicator, MpiComm, NcclComm, ReduceOp};

/// Interior points per rank.
const LOCAL: usize = 64;
/// Solves per communicator, interleaved.
const ROUNDS: usize = 20;
/// Stop when the residual's 2-norm falls below this fraction of its first value.
const TOL: f64 = 1e-12;

const KERNELS: &str = r#"
extern "C" __global__ void boundary(const double* p, int n, double* out) {
  if (threadIdx.x == 0) { out[0] = p[0]; out[1] = p[n - 1]; }
}
// ap = A p, A = tridiag(-1, 2, -1); ghosts: every rank's (first, last) values.
extern "C" __global__ void apply(const double* p, const double* ghosts, int rank, int size, int n,
                                 double* ap) {
  for (int i = threadIdx.x + blockIdx.x * blockDim.x; i < n; i += blockDim.x * gridDim.x) {
    double left = i > 0 ? p[i - 1] : (rank > 0 ? ghosts[2 * (rank - 1) + 1] : 0.0);
    double right = i < n - 1 ? p[i + 1] : (rank + 1 < size ? ghosts[2 * (rank + 1)] : 0.0);
    ap[i] = 2.0 * p[i] - left - right;
  }
}
// out[0] = x . y over this rank's points, in a fixed order (one block).
extern "C" __global__ void dot(const double* x, const double* y, int n, double* out) {
  __shared__ double part[256];
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i] * y[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = part[0];
}
// x += alpha p; r -= alpha ap.
extern "C" __global__ void step(double* x, double* r, const double* p, const double* ap,
                                double alpha, int n) {
  for (int i = threadIdx.x + blockIdx.x * blockDim.x; i < n; i += blockDim.x * gridDim.x) {
    x[i] += alpha * p[i];
    r[i] -= alpha * ap[i];
  }
}
// p = r + beta p.
extern "C" __global__ void direction(double* p, const double* r, double beta, int n) {
  for (int i = threadIdx.x + blockIdx.x * blockDim.x; i < n; i += blockDim.x * gridDim.x)
    p[i] = r[i] + beta * p[i];
}
"#;

/// The solver's kernels, compiled once.
struct Kernels {
    boundary: CudaFunction,
    apply: CudaFunction,
    dot: CudaFunction,
    step: CudaFunction,
    direction: CudaFunction,
}

fn cfg() -> LaunchConfig {
    LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn cuda(e: collectives::cudarc::driver::DriverError) -> collectives::Error {
    collectives::Error::cuda("13_nccl_cg", e)
}

impl Kernels {
    fn new(stream: &Arc<CudaStream>) -> Result<Self, collectives::Error> {
        let ptx = collectives::cudarc::nvrtc::compile_ptx(KERNELS).map_err(|e| {
            collectives::Error::Cuda {
                op: "13_nccl_cg",
                message: format!("NVRTC: {e}"),
            }
        })?;
        let m = stream.context().load_module(ptx).map_err(cuda)?;
        let f = |name| m.load_function(name).map_err(cuda);
        Ok(Kernels {
            boundary: f("boundary")?,
            apply: f("apply")?,
            dot: f("dot")?,
            step: f("step")?,
            direction: f("direction")?,
        })
    }
}

/// The vectors of one solve.
struct Vectors {
    x: CudaSlice<f64>,
    r: CudaSlice<f64>,
    p: CudaSlice<f64>,
    ap: CudaSlice<f64>,
    bnd: CudaSlice<f64>,
    ghosts: CudaSlice<f64>,
    d: CudaSlice<f64>,
}

/// The global dot product of `x` and `y`: this rank's part on the GPU, the all-reduce, the value
/// read by the host.
fn dot(
    comm: &NcclComm,
    k: &Kernels,
    x: &CudaSlice<f64>,
    y: &CudaSlice<f64>,
    d: &mut CudaSlice<f64>,
) -> Result<f64, collectives::Error> {
    let stream = comm.stream();
    let n = LOCAL as i32;
    let mut b = stream.launch_builder(&k.dot);
    b.arg(x).arg(y).arg(&n).arg(&mut *d);
    // SAFETY: `x` and `y` hold LOCAL values, `d` one; the kernel reads n values of each.
    unsafe { b.launch(cfg()) }.map_err(cuda)?;
    comm.all_reduce_in_place(d, ReduceOp::Sum)?;
    comm.synchronize()?;
    Ok(device::download(stream, d)?[0])
}

/// Solves `A u = h^2` from `u = 0` on `comm` into `v.x`; returns the iterations.
fn solve(comm: &NcclComm, k: &Kernels, v: &mut Vectors) -> Result<usize, collectives::Error> {
    let stream = comm.stream().clone();
    let (rank, size) = (comm.rank() as i32, comm.size() as i32);
    let n = LOCAL as i32;
    let h = 1.0 / (LOCAL * comm.size() + 1) as f64;
    let b = vec![h * h; LOCAL];
    stream.memset_zeros(&mut v.x).map_err(cuda)?;
    device::copy_to_device(&stream, &b, &mut v.r)?;
    device::copy_to_device(&stream, &b, &mut v.p)?;
    let mut rr = dot(comm, k, &v.r, &v.r, &mut v.d)?;
    let stop = TOL * rr.sqrt();
    let max = LOCAL * comm.size();
    for it in 0..max {
        if rr.sqrt() < stop {
            return Ok(it);
        }
        let mut l = stream.launch_builder(&k.boundary);
        l.arg(&v.p).arg(&n).arg(&mut v.bnd);
        // SAFETY: `p` holds LOCAL values, `bnd` two.
        unsafe { l.launch(cfg()) }.map_err(cuda)?;
        comm.all_gather(&v.bnd, &mut v.ghosts)?;
        let mut l = stream.launch_builder(&k.apply);
        l.arg(&v.p)
            .arg(&v.ghosts)
            .arg(&rank)
            .arg(&size)
            .arg(&n)
            .arg(&mut v.ap);
        // SAFETY: `p` and `ap` hold LOCAL values, `ghosts` two per rank.
        unsafe { l.launch(cfg()) }.map_err(cuda)?;
        let alpha = rr / dot(comm, k, &v.p, &v.ap, &mut v.d)?;
        let mut l = stream.launch_builder(&k.step);
        l.arg(&mut v.x)
            .arg(&mut v.r)
            .arg(&v.p)
            .arg(&v.ap)
            .arg(&alpha)
            .arg(&n);
        // SAFETY: every vector holds LOCAL values.
        unsafe { l.launch(cfg()) }.map_err(cuda)?;
        let next = dot(comm, k, &v.r, &v.r, &mut v.d)?;
        let beta = next / rr;
        rr = next;
        let mut l = stream.launch_builder(&k.direction);
        l.arg(&mut v.p).arg(&v.r).arg(&beta).arg(&n);
        // SAFETY: `p` and `r` hold LOCAL values.
        unsafe { l.launch(cfg()) }.map_err(cuda)?;
    }
    Ok(max)
}

fn main() -> Result<(), collectives::Error> {
    let universe = mpi::initialize().expect("MPI initializes once");
    let world = MpiComm::world(&universe)?;
    let fast = NcclComm::from_mpi(&world, None)?;
    let plain = NcclComm::from_mpi(&world, None)?.without_one_shot();
    let (rank, size) = (fast.rank(), fast.size());
    let stream = fast.stream().clone();
    let k = Kernels::new(&stream)?;
    let zeros = |len| device::alloc_zeros::<f64>(&stream, len);
    let mut v = Vectors {
        x: zeros(LOCAL)?,
        r: zeros(LOCAL)?,
        p: zeros(LOCAL)?,
        ap: zeros(LOCAL)?,
        bnd: zeros(2)?,
        ghosts: zeros(2 * size)?,
        d: zeros(1)?,
    };
    let h = 1.0 / (LOCAL * size + 1) as f64;
    let exact: Vec<f64> = (0..LOCAL)
        .map(|i| {
            let x = (rank * LOCAL + i + 1) as f64 * h;
            x * (1.0 - x) / 2.0
        })
        .collect();
    // Per communicator: iterations and seconds in all.
    let mut totals = [(0usize, 0.0f64); 2];
    for round in 0..=ROUNDS {
        for (c, comm) in [&fast, &plain].into_iter().enumerate() {
            world.barrier()?;
            let t = Instant::now();
            let iterations = solve(comm, &k, &mut v)?;
            let secs = t.elapsed().as_secs_f64();
            let x = device::download(&stream, &v.x)?;
            let err = x
                .iter()
                .zip(&exact)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(
                err < 1e-9,
                "rank {rank}: the solution is off by {err:e} after {iterations} iterations"
            );
            if round > 0 {
                totals[c].0 += iterations;
                totals[c].1 += secs;
            }
        }
    }
    let mut per = [
        totals[0].1 / totals[0].0 as f64 * 1e6,
        totals[1].1 / totals[1].0 as f64 * 1e6,
    ];
    world.all_reduce_in_place(&mut per[..], ReduceOp::Max)?;
    if rank == 0 {
        println!(
            "13_nccl_cg: {size} ranks, {} unknowns, {} iterations per solve, {ROUNDS} solves each: \
             {:.2} us per iteration with the one-shot all-reduce (up to {} bytes), {:.2} us \
             without ({:.2}x); answers correct",
            LOCAL * size,
            totals[0].0 / ROUNDS,
            per[0],
            fast.one_shot_max_bytes(),
            per[1],
            per[1] / per[0]
        );
    }
    Ok(())
}
