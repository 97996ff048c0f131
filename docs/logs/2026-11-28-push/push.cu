/* push.cu: does a lent face's chain shorten where the sender's pack writes its packed bytes
 * straight into a staging of the receiver's (mapped over CUDA IPC, contiguous writes across the
 * link), so that the receiver's unpack reads its own GPU's memory, instead of the receiver's
 * unpack reading the sender's staging across the link? Two ranks on two GPUs, a 256^3 f64 grid
 * each; the face at index 1 of one dimension goes to the peer's face at index 255 (as
 * interpose_bench's faces). Ways, each kernel a CUDA graph made once, on the legacy stream:
 *   contig  MPI_Sendrecv of 512 KiB, device to device (the baseline)
 *   pull    pack into this rank's staging; record an IPC event; a note word in shared host
 *           memory; the peer spins on the word, its stream waits for the event, it unpacks from
 *           this rank's staging over CUDA IPC, waits (the interposer's loan, without its
 *           bookkeeping)
 *   push    the same, but the pack writes into the peer's landing (its staging, mapped here)
 *           and the peer unpacks from its own landing
 *   fpull   as pull, without the event: the pack's last block writes a generation word at the
 *           end of this rank's staging; the peer's unpack (launched on the note) spins, one
 *           thread per block, on that word across the link before it reads
 *   fpush   as push, without the event: the pack's last block writes the generation word into
 *           the peer's staging, whose unpack spins on it in its own memory
 * Timed: p10 / p50 / p90 of rank 0's host wall time per repetition, each after a barrier; the
 * received face checked against the peer's values. A barrier opens every repetition, and each
 * rank waits for its unpack before it, so no landing is written while it is read.
 * Build: nvcc -O2 -arch=sm_90 -I$MPI/include -L$MPI/lib -lmpi -lrt push.cu -o push
 */
#include <mpi.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define N 256
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

static int rank, peer;

__device__ __host__ static inline size_t face_at(int d, int at, size_t i) {
  size_t a = i / N, b = i % N;
  return d == 0 ? (a * N + b) * N + at : d == 1 ? (a * N + at) * N + b : ((size_t)at * N + a) * N + b;
}
__global__ void pack(const double *g, double *out, int d, int at) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * N; i += (size_t)gridDim.x * blockDim.x)
    out[i] = g[face_at(d, at, i)];
}
__global__ void unpack(double *g, const double *in, int d, int at) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * N; i += (size_t)gridDim.x * blockDim.x)
    g[face_at(d, at, i)] = in[i];
}
/* The pack with a signal: every block's writes fenced, the last block to finish bumps the
 * generation and writes it to `flag` (this rank's staging or the peer's). */
__global__ void pack_flag(const double *g, double *out, int d, int at, unsigned *done, unsigned long long *gen,
                          volatile unsigned long long *flag) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * N; i += (size_t)gridDim.x * blockDim.x)
    out[i] = g[face_at(d, at, i)];
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(done, 1u) == gridDim.x - 1) {
    *done = 0;
    unsigned long long v = *gen + 1;
    *gen = v;
    __threadfence_system();
    *flag = v;
  }
}
/* The unpack that waits: thread 0 of each block spins until `flag` reaches the generation after
 * the last one unpacked; the last block to finish records that generation. */
__global__ void unpack_flag(double *g, const double *in, int d, int at, volatile unsigned long long *flag,
                            unsigned long long *expect, unsigned *done) {
  __shared__ unsigned long long want;
  if (threadIdx.x == 0) {
    want = *expect + 1;
    while (*flag < want) {}
    __threadfence_system();
  }
  __syncthreads();
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * N; i += (size_t)gridDim.x * blockDim.x)
    g[face_at(d, at, i)] = ((volatile const double *)in)[i];
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(done, 1u) == gridDim.x - 1) {
    *done = 0;
    *expect = want;
  }
}
__global__ void fill(double *g, int r) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * N * N; i += (size_t)gridDim.x * blockDim.x)
    g[i] = r * 1e9 + (double)i;
}

static double *grid, *stage, *peer_stage, *cflat, *rflat;
static volatile unsigned long long *mine, *theirs; /* [8]: the note */
/* counters: [0] pack done, [1] unpack done (unsigned), [2] gen, [3] expect (u64 at 8-byte slots) */
static unsigned long long *ctr;
static cudaEvent_t ev, peer_ev;
static const size_t FACE = (size_t)N * N * sizeof(double);

static void add_kernel(cudaGraph_t g, cudaGraphNode_t *node, const cudaGraphNode_t *dep, void *fn, void **args, int blocks) {
  cudaKernelNodeParams kp;
  memset(&kp, 0, sizeof kp);
  kp.func = fn;
  kp.gridDim = dim3(blocks);
  kp.blockDim = dim3(blocks > 1 ? 256 : 1);
  kp.kernelParams = args;
  CK(cudaGraphAddKernelNode(node, g, dep, dep ? 1 : 0, &kp));
}
/* kind 0: the pack into this rank's staging; 1: the pack into the peer's staging; 2: the unpack
 * from the peer's staging; 3: the unpack from this rank's staging; 4: the flagged pack into this
 * rank's staging; 5: the flagged pack into the peer's; 6: the waiting unpack from the peer's
 * staging (its flag there); 7: the waiting unpack from this rank's (its flag here). */
static cudaGraphExec_t graph(int kind, int d) {
  static cudaGraphExec_t kept[8][2];
  if (kept[kind][d]) return kept[kind][d];
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t a, b;
  int from = 1, to = N - 1;
  void *pa[4] = {&grid, &stage, &d, &from};
  void *ppa[4] = {&grid, &peer_stage, &d, &from};
  void *ua[4] = {&grid, &peer_stage, &d, &to};
  void *la[4] = {&grid, &stage, &d, &to};
  (void)b;
  if (kind == 0) add_kernel(g, &a, NULL, (void *)pack, pa, 256);
  if (kind == 1) add_kernel(g, &a, NULL, (void *)pack, ppa, 256);
  if (kind == 2) add_kernel(g, &a, NULL, (void *)unpack, ua, 256);
  if (kind == 3) add_kernel(g, &a, NULL, (void *)unpack, la, 256);
  unsigned *pdone = (unsigned *)&ctr[0], *udone = (unsigned *)&ctr[1];
  unsigned long long *gen = &ctr[2], *expect = &ctr[3];
  unsigned long long *own_flag = (unsigned long long *)((char *)stage + FACE);
  unsigned long long *peer_flag = (unsigned long long *)((char *)peer_stage + FACE);
  void *fa[7] = {&grid, &stage, &d, &from, &pdone, &gen, &own_flag};
  void *fpa[7] = {&grid, &peer_stage, &d, &from, &pdone, &gen, &peer_flag};
  void *fua[7] = {&grid, &peer_stage, &d, &to, &peer_flag, &expect, &udone};
  void *fla[7] = {&grid, &stage, &d, &to, &own_flag, &expect, &udone};
  if (kind == 4) add_kernel(g, &a, NULL, (void *)pack_flag, fa, 256);
  if (kind == 5) add_kernel(g, &a, NULL, (void *)pack_flag, fpa, 256);
  if (kind == 6) add_kernel(g, &a, NULL, (void *)unpack_flag, fua, 256);
  if (kind == 7) add_kernel(g, &a, NULL, (void *)unpack_flag, fla, 256);
  CK(cudaGraphInstantiate(&kept[kind][d], g, 0));
  return kept[kind][d];
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void way(const char *name, int d, int kind) {
  const int warm = 200, reps = 2000;
  static double t[2000];
  static unsigned long long notes = 0;
  CK(cudaDeviceSynchronize());
  CK(cudaMemset(ctr, 0, 64));
  CK(cudaMemset((char *)stage + FACE, 0, 64));
  CK(cudaDeviceSynchronize());
  MPI_Barrier(MPI_COMM_WORLD);
  fill<<<1024, 256>>>(grid, rank);
  CK(cudaDeviceSynchronize());
  MPI_Barrier(MPI_COMM_WORLD);
  for (int it = 0; it < warm + reps; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (kind == 0) {
      MPI_Sendrecv(cflat, (int)FACE, MPI_BYTE, peer, 9, rflat, (int)FACE, MPI_BYTE, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (kind >= 3) {
      /* kind 3: fpull; kind 4: fpush: no event */
      CK(cudaGraphLaunch(graph(kind == 3 ? 4 : 5, d), 0));
      mine[8] = ++notes;
      while (theirs[8] < notes) {}
      CK(cudaGraphLaunch(graph(kind == 3 ? 6 : 7, d), 0));
      CK(cudaStreamSynchronize(0));
    } else {
      /* kind 1: pull; kind 2: push */
      CK(cudaGraphLaunch(graph(kind == 1 ? 0 : 1, d), 0));
      CK(cudaEventRecord(ev, 0));
      mine[8] = ++notes;
      while (theirs[8] < notes) {}
      CK(cudaStreamWaitEvent(0, peer_ev, 0));
      CK(cudaGraphLaunch(graph(kind == 1 ? 2 : 3, d), 0));
      CK(cudaStreamSynchronize(0));
    }
    double dt = MPI_Wtime() - t0;
    if (it >= warm) t[it - warm] = dt * 1e6;
  }
  CK(cudaDeviceSynchronize());
  MPI_Barrier(MPI_COMM_WORLD);
  qsort(t, reps, sizeof t[0], cmp);
  long bad = -1;
  if (kind != 0) {
    double *h = (double *)malloc((size_t)N * N * N * sizeof(double));
    CK(cudaMemcpy(h, grid, (size_t)N * N * N * sizeof(double), cudaMemcpyDeviceToHost));
    bad = 0;
    for (size_t i = 0; i < (size_t)N * N; i++)
      if (h[face_at(d, N - 1, i)] != peer * 1e9 + (double)face_at(d, 1, i)) bad++;
    free(h);
  }
  long all_bad = 0;
  MPI_Reduce(&bad, &all_bad, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%-8s face-%c  %8.2f / %8.2f / %8.2f us   %s\n", name, d == 0 ? 'x' : 'y', t[reps / 10], t[reps / 2],
           t[reps * 9 / 10], kind == 0 ? "-" : all_bad == 0 ? "received face checked: ok" : "received face checked: WRONG");
  fflush(stdout);
}

static int job;
static volatile unsigned long long *map_segment(int owner, int create) {
  char name[64];
  snprintf(name, sizeof name, "/pushprobe-%d-%d", job, owner);
  int fd = shm_open(name, create ? O_CREAT | O_RDWR : O_RDWR, 0600);
  if (fd < 0) { perror("shm_open"); MPI_Abort(MPI_COMM_WORLD, 1); }
  if (create && ftruncate(fd, 4096) != 0) { perror("ftruncate"); MPI_Abort(MPI_COMM_WORLD, 1); }
  void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) { perror("mmap"); MPI_Abort(MPI_COMM_WORLD, 1); }
  return (volatile unsigned long long *)p;
}

int main(int argc, char **argv) {
  const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  CK(cudaSetDevice((lr ? atoi(lr) : 0) % ndev));
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) { if (rank == 0) fprintf(stderr, "2 ranks\n"); MPI_Finalize(); return 2; }
  peer = rank ^ 1;
  job = (int)getpid();
  MPI_Bcast(&job, 1, MPI_INT, 0, MPI_COMM_WORLD);
  CK(cudaMalloc(&grid, (size_t)N * N * N * sizeof(double)));
  CK(cudaMalloc(&stage, FACE + 64));
  CK(cudaMalloc(&ctr, 64));
  CK(cudaMalloc(&cflat, FACE));
  CK(cudaMalloc(&rflat, FACE));
  mine = map_segment(rank, 1);
  MPI_Barrier(MPI_COMM_WORLD);
  theirs = map_segment(peer, 0);
  CK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
  cudaIpcMemHandle_t mh, pmh;
  cudaIpcEventHandle_t eh, peh;
  CK(cudaIpcGetMemHandle(&mh, stage));
  CK(cudaIpcGetEventHandle(&eh, ev));
  MPI_Sendrecv(&mh, sizeof mh, MPI_BYTE, peer, 0, &pmh, sizeof pmh, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Sendrecv(&eh, sizeof eh, MPI_BYTE, peer, 0, &peh, sizeof peh, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  CK(cudaIpcOpenMemHandle((void **)&peer_stage, pmh, cudaIpcMemLazyEnablePeerAccess));
  CK(cudaIpcOpenEventHandle(&peer_ev, peh));
  int dev;
  CK(cudaGetDevice(&dev));
  if (rank == 0) printf("2 ranks, GPU %d and the peer's; 2000 repetitions after 200, p10 / p50 / p90\n", dev);
  int rounds = argc > 1 ? atoi(argv[1]) : 2;
  for (int round = 0; round < rounds; round++)
    for (int d = 0; d < 2; d++) {
      way("contig", d, 0);
      way("pull", d, 1);
      way("push", d, 2);
      way("fpull", d, 3);
      way("fpush", d, 4);
      way("pull", d, 1);
      way("contig", d, 0);
    }
  MPI_Barrier(MPI_COMM_WORLD);
  CK(cudaIpcCloseMemHandle(peer_stage));
  char name[64];
  snprintf(name, sizeof name, "/pushprobe-%d-%d", job, rank);
  shm_unlink(name);
  MPI_Finalize();
  return 0;
}
