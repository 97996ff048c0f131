/* typed.cu: a halo face moved by one kernel between the two programs' grids over CUDA IPC, with no
 * pack, no staging and no event, against the same bytes sent contiguous through a CUDA-aware MPI
 * and against the loan an interposer makes today (pack, IPC event, note, unpack from the peer's
 * staging); and what the driver allows when a program's allocation is mapped into its peer both
 * by this process and by the MPI.
 *
 * Each rank owns a 256^3 f64 grid on its GPU; it sends its face at index 1 of one dimension and
 * receives the peer's into its face at index 255 (as interpose_bench's faces). Ways timed:
 *   contig  MPI_Sendrecv of 512 KiB, device to device (the baseline)
 *   loan    the interposer's design as a plain program: a ready message each way, the pack as a
 *           one-node graph, an IPC event, a note; the unpack from the peer's staging after the
 *           peer's event; a done message each way, reaped at the next round
 *   tpull   a note each way ("my face is ready"); one kernel reads the peer's grid (strided, over
 *           NVLink) into this grid's ghost face; wait; a done message each way, waited for
 *           (the peer may not change its grid before this rank has read it)
 *   tpush   a ready message each way ("my ghost face may be written"); one kernel writes this
 *           grid's face into the peer's ghost face; wait; a note each way, waited for
 * Each line: p10 / p50 / p90 of the timed repetitions, µs of rank 0's host wall time, each
 * repetition after a barrier; then a check of the received face against the peer's values.
 * `ipc` (argument): the IPC probes only (see ipc_probe).
 * Build: nvcc -O2 -arch=sm_90 -I$MPI/include -L$MPI/lib -lmpi -lcuda typed.cu -o typed
 */
#include <mpi.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
/* dst's face at `to` takes src's face at `from` (either grid may be the peer's). */
__global__ void copy(double *dst, const double *src, int d, int from, int to) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * N; i += (size_t)gridDim.x * blockDim.x)
    dst[face_at(d, to, i)] = src[face_at(d, from, i)];
}
__global__ void fill(double *g, int r) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * N * N; i += (size_t)gridDim.x * blockDim.x)
    g[i] = r * 1e9 + (double)i;
}

static double *grid, *peer_grid, *stage, *peer_stage, *cflat, *rflat;
static cudaEvent_t ev, peer_ev;
static const size_t FACE = (size_t)N * N * sizeof(double);

/* One-node graphs, made once per (kernel, arguments). */
static cudaGraphExec_t graph_of(void *fn, void **args, int nargs, const void *key0, const void *key1, int k2, int k3) {
  static struct { void *fn; const void *a, *b; int c, d; cudaGraphExec_t x; } kept[32];
  static int n = 0;
  for (int i = 0; i < n; i++)
    if (kept[i].fn == fn && kept[i].a == key0 && kept[i].b == key1 && kept[i].c == k2 && kept[i].d == k3) return kept[i].x;
  (void)nargs;
  cudaGraph_t g;
  cudaGraphNode_t node;
  cudaKernelNodeParams kp;
  memset(&kp, 0, sizeof kp);
  kp.func = fn;
  kp.gridDim = dim3(256);
  kp.blockDim = dim3(256);
  kp.kernelParams = args;
  CK(cudaGraphCreate(&g, 0));
  CK(cudaGraphAddKernelNode(&node, g, NULL, 0, &kp));
  cudaGraphExec_t x;
  CK(cudaGraphInstantiate(&x, g, 0));
  kept[n].fn = fn; kept[n].a = key0; kept[n].b = key1; kept[n].c = k2; kept[n].d = k3; kept[n].x = x;
  n++;
  return x;
}
static void gpack(int d) { int at = 1; void *a[4] = {&grid, &stage, &d, &at}; CK(cudaGraphLaunch(graph_of((void *)pack, a, 4, grid, stage, d, at), 0)); }
static void gunpack(int d) { int at = N - 1; void *a[4] = {&grid, &peer_stage, &d, &at}; CK(cudaGraphLaunch(graph_of((void *)unpack, a, 4, grid, peer_stage, d, at), 0)); }
static void gcopy(double *dst, double *src, int d) {
  int from = 1, to = N - 1;
  void *a[5] = {&dst, &src, &d, &from, &to};
  CK(cudaGraphLaunch(graph_of((void *)copy, a, 5, dst, src, d, 0), 0));
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void way(const char *name, int d, int kind) {
  const int warm = 200, reps = 2000;
  static double t[2000];
  CK(cudaDeviceSynchronize());
  fill<<<1024, 256>>>(grid, rank);
  CK(cudaDeviceSynchronize());
  MPI_Barrier(MPI_COMM_WORLD);
  static MPI_Request done[2];
  static int have_done = 0;
  for (int it = 0; it < warm + reps; it++) {
    MPI_Request rq[4];
    char r_in = 0, r_out = 1, note_in = 0, note_out = 1, done_in = 0, done_out = 1;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (kind == 0) {
      MPI_Sendrecv(cflat, (int)FACE, MPI_BYTE, peer, 9, rflat, (int)FACE, MPI_BYTE, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (kind == 1) {
      static char dn_in, dn_out = 1;
      if (have_done) MPI_Waitall(2, done, MPI_STATUSES_IGNORE); /* the peer is done with my staging */
      MPI_Irecv(&note_in, 1, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &rq[0]);
      MPI_Isend(&r_out, 1, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &rq[1]);
      gpack(d);
      MPI_Recv(&r_in, 1, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      CK(cudaEventRecord(ev, 0));
      MPI_Send(&note_out, 1, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
      MPI_Wait(&rq[0], MPI_STATUS_IGNORE);
      CK(cudaStreamWaitEvent(0, peer_ev, 0));
      gunpack(d);
      CK(cudaStreamSynchronize(0));
      MPI_Irecv(&dn_in, 1, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &done[0]);
      MPI_Isend(&dn_out, 1, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &done[1]);
      have_done = 1;
      MPI_Wait(&rq[1], MPI_STATUS_IGNORE);
    } else {
      /* tpull (2): note, read the peer's grid, done. tpush (3): ready, write the peer's grid, note. */
      MPI_Irecv(&note_in, 1, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &rq[0]);
      MPI_Isend(&note_out, 1, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &rq[1]);
      MPI_Wait(&rq[0], MPI_STATUS_IGNORE);
      if (kind == 2) gcopy(grid, peer_grid, d); else gcopy(peer_grid, grid, d);
      CK(cudaStreamSynchronize(0));
      MPI_Irecv(&done_in, 1, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &rq[2]);
      MPI_Isend(&done_out, 1, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &rq[3]);
      MPI_Waitall(3, rq + 1, MPI_STATUSES_IGNORE);
    }
    double dt = MPI_Wtime() - t0;
    if (it >= warm) t[it - warm] = dt * 1e6;
  }
  if (have_done) { MPI_Waitall(2, done, MPI_STATUSES_IGNORE); have_done = 0; }
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
    printf("%-7s face-%c  %8.2f / %8.2f / %8.2f us   %s\n", name, d == 0 ? 'x' : 'y', t[reps / 10], t[reps / 2],
           t[reps * 9 / 10], kind == 0 ? "-" : all_bad == 0 ? "received face checked: ok" : "received face checked: WRONG");
  fflush(stdout);
}

static const char *cu_name(CUresult r) { const char *s = NULL; cuGetErrorName(r, &s); return s ? s : "?"; }

__global__ void spin_for(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}

/* The cost of asking the driver about a pointer: the six attributes the interposer asks, with
 * and without the allocation's buffer id as a seventh; and of cuStreamQuery on an idle stream. */
static void attr_probe(void) {
  void *p;
  CK(cudaMalloc(&p, 64 << 20));
  CUpointer_attribute a[7] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                              CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                              CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_CONTEXT,
                              CU_POINTER_ATTRIBUTE_BUFFER_ID};
  unsigned int mt, man; int ord; CUdeviceptr st; size_t sz; CUcontext ctx; unsigned long long id;
  void *d[7] = {&mt, &man, &ord, &st, &sz, &ctx, &id};
  const int n = 100000;
  for (int round = 0; round < 2; round++)
    for (int k = 6; k <= 7; k++) {
      double t0 = MPI_Wtime();
      for (int i = 0; i < n; i++) cuPointerGetAttributes(k, a, d, (CUdeviceptr)p + 4096);
      double t = (MPI_Wtime() - t0) / n * 1e6;
      printf("attr: cuPointerGetAttributes with %d attributes: %.3f us a call (buffer id %llu)\n", k, t, id);
    }
  double t0 = MPI_Wtime();
  for (int i = 0; i < n; i++) cuStreamQuery(CU_STREAM_LEGACY);
  printf("attr: cuStreamQuery(legacy), idle: %.3f us a call\n", (MPI_Wtime() - t0) / n * 1e6);
  CUipcMemHandle h;
  t0 = MPI_Wtime();
  for (int i = 0; i < 10000; i++) cuIpcGetMemHandle(&h, (CUdeviceptr)p);
  printf("attr: cuIpcGetMemHandle: %.3f us a call\n", (MPI_Wtime() - t0) / 10000 * 1e6);
  fflush(stdout);
  CK(cudaFree(p));
}

/* Whether a query of the legacy default stream says busy while a kernel runs on a blocking
 * stream (one made with flags 0), on a non-blocking one, and on the legacy stream itself. */
static void query_probe(void) {
  cudaStream_t blocking, nonblocking;
  CK(cudaStreamCreateWithFlags(&blocking, cudaStreamDefault));
  CK(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
  const long long cycles = 50LL * 1000 * 1000; /* some 25 ms */
  const char *names[3] = {"a blocking stream", "a non-blocking stream", "the legacy stream"};
  cudaStream_t on[3] = {blocking, nonblocking, 0};
  for (int i = 0; i < 3; i++) {
    CK(cudaDeviceSynchronize());
    spin_for<<<1, 1, 0, on[i]>>>(cycles);
    cudaError_t q = cudaStreamQuery(0);
    CUresult cq = cuStreamQuery(CU_STREAM_LEGACY);
    printf("query: a kernel running on %s: cudaStreamQuery(0) %s, cuStreamQuery(CU_STREAM_LEGACY) %s\n", names[i],
           q == cudaSuccess ? "idle" : q == cudaErrorNotReady ? "busy" : cudaGetErrorString(q), cu_name(cq));
    CK(cudaDeviceSynchronize());
  }
  fflush(stdout);
}


/* What the driver says when this process and the MPI both map the peer's allocations. Rank 0
 * exports, rank 1 opens; each step printed by rank 1. */
static void ipc_probe(void) {
  const size_t MiB = 1 << 20;
  double *big, *big2, *padded, *smallv[64], *sa, *sb;
  /* big: 128 MiB; big2: a second one the MPI maps first; padded: 258^3 f64, not a multiple of 2 MiB */
  CK(cudaMalloc(&big, 128 * MiB));
  CK(cudaMalloc(&big2, 128 * MiB));
  CK(cudaMalloc(&padded, (size_t)258 * 258 * 258 * 8));
  for (int i = 0; i < 64; i++) CK(cudaMalloc(&smallv[i], (size_t)(4096 << (i % 9))));
  CK(cudaMalloc(&sa, 256 << 10));
  CK(cudaMalloc(&sb, 256 << 10));
  CK(cudaMemset(sb, 3, 256 << 10));
  CK(cudaMemset(big, 1, 128 * MiB));
  CK(cudaMemset(big2, 2, 128 * MiB));
  if (rank == 0) {
    /* Does any small allocation lie in the last 2 MiB granule of `padded` (past its end)? */
    size_t psz = (size_t)258 * 258 * 258 * 8;
    unsigned long long pend = (unsigned long long)padded + psz, gend = (pend + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
    int in_tail = 0;
    for (int i = 0; i < 64; i++)
      if ((unsigned long long)smallv[i] >= pend && (unsigned long long)smallv[i] < gend) in_tail++;
    CUdeviceptr base = 0; size_t sz = 0;
    cuMemGetAddressRange(&base, &sz, (CUdeviceptr)padded);
    printf("ipc: padded at %#llx (2 MiB aligned: %s), size %zu (range %zu), its last granule ends %#llx; small allocations in that tail: %d of 64\n",
           (unsigned long long)padded, (unsigned long long)padded % (2 * MiB) ? "no" : "yes", psz, sz, gend, in_tail);
    printf("ipc: big at %#llx (2 MiB aligned: %s), big2 at %#llx\n", (unsigned long long)big,
           (unsigned long long)big % (2 * MiB) ? "no" : "yes", (unsigned long long)big2);
    int same_granule = 0;
    for (int i = 1; i < 64; i++)
      if ((unsigned long long)smallv[i] / (2 * MiB) == (unsigned long long)smallv[0] / (2 * MiB)) same_granule++;
    printf("ipc: small allocations sharing small[0]'s granule: %d of 63\n", same_granule);
  }
  cudaIpcMemHandle_t h[4], ph[4];
  CK(cudaIpcGetMemHandle(&h[0], big));
  CK(cudaIpcGetMemHandle(&h[1], big2));
  CK(cudaIpcGetMemHandle(&h[2], sa));
  CK(cudaIpcGetMemHandle(&h[3], sb)); /* 256 KiB each, allocated one after the other */
  MPI_Sendrecv(h, sizeof h, MPI_BYTE, peer, 0, ph, sizeof ph, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  unsigned long long s0 = (unsigned long long)sa, s9 = (unsigned long long)sb;
  MPI_Bcast(&s0, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  MPI_Bcast(&s9, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
  double *r = NULL;
  CK(cudaMalloc(&r, 4 * MiB));
  unsigned char hb[8];
  /* 1. this process opens big twice, then the MPI receives from big (it maps it too) */
  CUdeviceptr p1 = 0, p2 = 0, p3 = 0;
  CUresult e1 = CUDA_SUCCESS, e2 = CUDA_SUCCESS, e3 = CUDA_SUCCESS;
  if (rank == 1) {
    CUipcMemHandle ch;
    memcpy(&ch, &ph[0], sizeof ch);
    e1 = cuIpcOpenMemHandle(&p1, ch, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    e2 = cuIpcOpenMemHandle(&p2, ch, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    printf("ipc 1: big opened twice here: %s, %s, the same pointer: %s\n", cu_name(e1), cu_name(e2), p1 == p2 ? "yes" : "no");
  }
  for (int k = 0; k < 2; k++) {
    if (rank == 0) MPI_Send(big + k * 65536, 1 << 20, MPI_BYTE, 1, 5, MPI_COMM_WORLD);
    else {
      MPI_Recv(r, 1 << 20, MPI_BYTE, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      CK(cudaMemcpy(hb, r, 8, cudaMemcpyDeviceToHost));
      printf("ipc 1: the MPI received 1 MiB from big after this process opened it: byte %d (expected 1)\n", hb[0]);
    }
  }
  if (rank == 1) {
    e1 = cuIpcCloseMemHandle(p1);
    e2 = cuIpcCloseMemHandle(p2);
    printf("ipc 1: closed twice here: %s, %s\n", cu_name(e1), cu_name(e2));
  }
  if (rank == 0) MPI_Send(big + 3 * 65536, 1 << 20, MPI_BYTE, 1, 5, MPI_COMM_WORLD);
  else {
    MPI_Recv(r, 1 << 20, MPI_BYTE, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CK(cudaMemcpy(hb, r, 8, cudaMemcpyDeviceToHost));
    printf("ipc 1: the MPI received from big after this process closed it: byte %d (expected 1)\n", hb[0]);
  }
  /* 2. the MPI maps big2 first, then this process opens it, reads it, closes it; the MPI again */
  if (rank == 0) MPI_Send(big2, 1 << 20, MPI_BYTE, 1, 6, MPI_COMM_WORLD);
  else MPI_Recv(r, 1 << 20, MPI_BYTE, 0, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (rank == 1) {
    CUipcMemHandle ch;
    memcpy(&ch, &ph[1], sizeof ch);
    e3 = cuIpcOpenMemHandle(&p3, ch, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (e3 == CUDA_SUCCESS) CK(cudaMemcpy(hb, (void *)p3, 8, cudaMemcpyDeviceToHost));
    printf("ipc 2: big2, which the MPI had mapped, opened here: %s; byte %d (expected 2)\n", cu_name(e3), e3 == CUDA_SUCCESS ? hb[0] : -1);
    if (e3 == CUDA_SUCCESS) printf("ipc 2: closed here: %s\n", cu_name(cuIpcCloseMemHandle(p3)));
  }
  if (rank == 0) MPI_Send(big2 + 65536, 1 << 20, MPI_BYTE, 1, 6, MPI_COMM_WORLD);
  else {
    MPI_Recv(r, 1 << 20, MPI_BYTE, 0, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CK(cudaMemcpy(hb, r, 8, cudaMemcpyDeviceToHost));
    printf("ipc 2: the MPI received from big2 again: byte %d (expected 2)\n", hb[0]);
  }
  /* 3. small allocations of one granule: this process opens sa (and tries sb); sb then through the MPI */
  if (rank == 1) {
    CUipcMemHandle ch;
    memcpy(&ch, &ph[2], sizeof ch);
    e1 = cuIpcOpenMemHandle(&p1, ch, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    memcpy(&ch, &ph[3], sizeof ch);
    e2 = cuIpcOpenMemHandle(&p2, ch, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    printf("ipc 3: sa and sb (granules %s) opened here: %s, %s\n",
           s0 / (2 * MiB) == s9 / (2 * MiB) ? "the same" : "different", cu_name(e1), cu_name(e2));
    if (e2 == CUDA_SUCCESS) cuIpcCloseMemHandle(p2);
    fflush(stdout);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("ipc 3: the MPI now sends 256 KiB from sb while rank 1 holds sa open (an abort here answers it)\n");
  fflush(stdout);
  if (rank == 0) MPI_Send(sb, 256 << 10, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
  else {
    MPI_Recv(r, 256 << 10, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CK(cudaMemcpy(hb, r, 8, cudaMemcpyDeviceToHost));
    printf("ipc 3: the MPI received from sb: byte %d (expected 3)\n", hb[0]);
    if (e1 == CUDA_SUCCESS) cuIpcCloseMemHandle(p1);
  }
  fflush(stdout);
  MPI_Barrier(MPI_COMM_WORLD);
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
  if (argc > 1 && !strcmp(argv[1], "ipc")) {
    if (rank == 0) { query_probe(); attr_probe(); }
    MPI_Barrier(MPI_COMM_WORLD);
    ipc_probe();
    MPI_Finalize();
    return 0;
  }
  CK(cudaMalloc(&grid, (size_t)N * N * N * sizeof(double)));
  CK(cudaMalloc(&stage, 2 << 20));
  CK(cudaMalloc(&cflat, FACE));
  CK(cudaMalloc(&rflat, FACE));
  CK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
  cudaIpcMemHandle_t mh[2], pmh[2];
  cudaIpcEventHandle_t eh, peh;
  CK(cudaIpcGetMemHandle(&mh[0], stage));
  CK(cudaIpcGetMemHandle(&mh[1], grid));
  CK(cudaIpcGetEventHandle(&eh, ev));
  MPI_Sendrecv(mh, sizeof mh, MPI_BYTE, peer, 0, pmh, sizeof pmh, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Sendrecv(&eh, sizeof eh, MPI_BYTE, peer, 0, &peh, sizeof peh, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  CK(cudaIpcOpenMemHandle((void **)&peer_stage, pmh[0], cudaIpcMemLazyEnablePeerAccess));
  CK(cudaIpcOpenMemHandle((void **)&peer_grid, pmh[1], cudaIpcMemLazyEnablePeerAccess));
  CK(cudaIpcOpenEventHandle(&peer_ev, peh));
  int dev;
  CK(cudaGetDevice(&dev));
  int rounds = argc > 1 ? atoi(argv[1]) : 2;
  if (rank == 0) printf("2 ranks, GPU %d and the peer's; 2000 repetitions after 200, p10 / p50 / p90\n", dev);
  for (int round = 0; round < rounds; round++)
    for (int d = 0; d < 2; d++) {
      way("contig", d, 0);
      way("loan", d, 1);
      way("tpull", d, 2);
      way("tpush", d, 3);
      way("contig", d, 0);
    }
  MPI_Barrier(MPI_COMM_WORLD);
  CK(cudaIpcCloseMemHandle(peer_grid));
  CK(cudaIpcCloseMemHandle(peer_stage));
  MPI_Finalize();
  return 0;
}
