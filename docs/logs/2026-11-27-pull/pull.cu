/* pull.cu: the floor of moving a halo face between two ranks on one node without the MPI's
 * transfer of the packed bytes, against the same bytes sent contiguous through a CUDA-aware MPI
 * and against the byte path (pack, MPI_Sendrecv of the packed bytes, unpack).
 *
 * Each rank owns a 256^3 f64 grid on its GPU; it sends its face at index 1 of one dimension and
 * receives the peer's into its face at index 255 (as interpose_bench's faces). Staging buffers and
 * events are exported over CUDA IPC once. Ways timed (every one on the legacy default stream):
 *   contig  MPI_Sendrecv of 512 KiB, device to device (the baseline)
 *   bytes   pack, wait, MPI_Sendrecv of the packed bytes, unpack, wait
 *   pull    a "ready" message each way; pack into own staging, record an IPC event; a note and a
 *           0-byte marker each way; the receiver's stream waits for the peer's event and unpacks
 *           straight from the peer's staging (read over NVLink); wait; a "done" message each way
 *   pull1   as pull with one message each way (the note), no ready, marker or done
 *   push    as pull, but the pack writes into the peer's staging (over NVLink) and the receiver
 *           unpacks from its own staging
 *   bytesg, pull1g  bytes and pull1 with each kernel launched as a one-node CUDA graph made once
 *   halo: the six faces of the grid both ways (face j of dimension j / 2, side j % 2, sends its
 *   layer 1 or N-2 to the peer's ghost layer N-1 or 0 on the other side; the z faces are
 *   contiguous planes, which an interposer passes to the MPI as they are):
 *   contig6 six messages of 512 KiB, MPI_Irecv x6, MPI_Isend x6, MPI_Waitall
 *   bytes6  the x and y faces packed by one 4-node graph, waited for, sent as bytes beside the z
 *           planes, MPI_Waitall, unpacked by one graph, waited for
 *   proto6  the z planes through the MPI; the x and y faces as proto, four ready messages and four
 *           notes, packed by one graph and unpacked by one graph after the peer's event
 *   proto   the protocol an interposer would run, graphs: the receive posted and its ready message
 *           sent; the pack launched before the peer's ready message is looked at; the note is the
 *           one message on the program's communicator; the unpack after the peer's event; the
 *           done message sent without waiting and reaped at the next exchange
 * Each line: p10 / p50 / p90 of the timed repetitions, µs of rank 0's host wall time, each
 * repetition after a barrier; then a check of the received face against the peer's values.
 * Build: nvcc -O2 -arch=sm_90 -I$MPI/include -L$MPI/lib -lmpi pull.cu -o pull
 */
#include <mpi.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 256
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

static int rank, peer;

/* Element i (0..N*N) of the face at index `at` of dimension `d` (0: x, the fastest; 1: y; 2: z,
 * a contiguous plane). */
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
__global__ void fill(double *g, int r) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)N * N * N; i += (size_t)gridDim.x * blockDim.x)
    g[i] = r * 1e9 + (double)i;
}

static double *grid, *stage, *rstage, *peer_stage, *peer_rstage, *cflat, *rflat;
static cudaEvent_t ev, peer_ev;
static const int BLOCKS = 256, THREADS = 256;
static const size_t FACE = (size_t)N * N * sizeof(double);

/* One-node graphs of the kernels, made once per (kernel, face, buffer). */
static cudaGraphExec_t graph_of(void *fn, double *a, double *b, int d, int at) {
  static struct { void *fn; double *a, *b; int d, at; cudaGraphExec_t x; } kept[32];
  static int n = 0;
  for (int i = 0; i < n; i++)
    if (kept[i].fn == fn && kept[i].a == a && kept[i].b == b && kept[i].d == d && kept[i].at == at) return kept[i].x;
  cudaGraph_t g;
  cudaGraphNode_t node;
  void *args[4] = {&a, &b, &d, &at};
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
  kept[n].fn = fn; kept[n].a = a; kept[n].b = b; kept[n].d = d; kept[n].at = at; kept[n].x = x;
  n++;
  return x;
}
/* One graph of four nodes: the x and y faces' packs (into the four slices of `stage4`) or
 * unpacks (from the four slices of `from`). */
static double *stage4, *rstage4, *peer_stage4, *flat6[6], *rflat6[6];
static const int XY[4] = {0, 1, 2, 3};
static int send_layer(int j) { return j % 2 ? N - 2 : 1; }
static int ghost_layer(int j) { return j % 2 ? N - 1 : 0; }
static cudaGraphExec_t graph4(int unpacking, double *from) {
  static cudaGraphExec_t kept[2][2];
  static double *kept_from[2][2];
  int slot = from == peer_stage4;
  if (kept[unpacking][slot] && kept_from[unpacking][slot] == from) return kept[unpacking][slot];
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  for (int k = 0; k < 4; k++) {
    int j = XY[k], d = j / 2;
    /* The peer's staging holds its faces in its own order: my ghost j takes its face j ^ 1. */
    double *slice = (unpacking ? from : stage4) + (size_t)(from == peer_stage4 ? k ^ 1 : k) * N * N;
    int at = unpacking ? ghost_layer(j) : send_layer(j);
    void *args[4] = {&grid, &slice, &d, &at};
    cudaKernelNodeParams kp;
    memset(&kp, 0, sizeof kp);
    kp.func = unpacking ? (void *)unpack : (void *)pack;
    kp.gridDim = dim3(256);
    kp.blockDim = dim3(256);
    kp.kernelParams = args;
    cudaGraphNode_t node;
    CK(cudaGraphAddKernelNode(&node, g, NULL, 0, &kp));
  }
  CK(cudaGraphInstantiate(&kept[unpacking][slot], g, 0));
  kept_from[unpacking][slot] = from;
  return kept[unpacking][slot];
}

static void gpack(double *out, int d) { CK(cudaGraphLaunch(graph_of((void *)pack, grid, out, d, 1), 0)); }
static void gunpack(double *in, int d) { CK(cudaGraphLaunch(graph_of((void *)unpack, grid, in, d, N - 1), 0)); }

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The peer's face j^1 arrives in my ghost j (its tag: 20 + the sender's face). */
static void halo(const char *name, int kind) {
  const int warm = 200, reps = 2000;
  static double t[2000];
  CK(cudaDeviceSynchronize());
  fill<<<1024, 256>>>(grid, rank);
  CK(cudaDeviceSynchronize());
  static MPI_Request done[8];
  int have_done = 0;
  for (int it = 0; it < warm + reps; it++) {
    MPI_Request rq[32];
    int nr = 0;
    char r_out[4] = {1, 1, 1, 1}, r_in[4], note_out[4] = {1, 1, 1, 1}, note_in[4], done_out[4] = {1, 1, 1, 1}, done_in[4];
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (kind == 0) {
      for (int j = 0; j < 6; j++) MPI_Irecv(rflat6[j], (int)FACE, MPI_BYTE, peer, 20 + (j ^ 1), MPI_COMM_WORLD, &rq[nr++]);
      for (int j = 0; j < 6; j++) MPI_Isend(flat6[j], (int)FACE, MPI_BYTE, peer, 20 + j, MPI_COMM_WORLD, &rq[nr++]);
      MPI_Waitall(nr, rq, MPI_STATUSES_IGNORE);
    } else {
      double *zg[2], *zs[2];
      for (int k = 0; k < 2; k++) {
        zg[k] = grid + face_at(2, ghost_layer(4 + k), 0);
        zs[k] = grid + face_at(2, send_layer(4 + k), 0);
      }
      if (kind == 1) {
        for (int k = 0; k < 4; k++) MPI_Irecv(rstage4 + (size_t)k * N * N, (int)FACE, MPI_BYTE, peer, 20 + (XY[k] ^ 1), MPI_COMM_WORLD, &rq[nr++]);
        for (int k = 0; k < 2; k++) MPI_Irecv(zg[k], (int)FACE, MPI_BYTE, peer, 20 + ((4 + k) ^ 1), MPI_COMM_WORLD, &rq[nr++]);
        CK(cudaGraphLaunch(graph4(0, NULL), 0));
        CK(cudaStreamSynchronize(0));
        for (int k = 0; k < 4; k++) MPI_Isend(stage4 + (size_t)k * N * N, (int)FACE, MPI_BYTE, peer, 20 + XY[k], MPI_COMM_WORLD, &rq[nr++]);
        for (int k = 0; k < 2; k++) MPI_Isend(zs[k], (int)FACE, MPI_BYTE, peer, 20 + 4 + k, MPI_COMM_WORLD, &rq[nr++]);
        MPI_Waitall(nr, rq, MPI_STATUSES_IGNORE);
        CK(cudaGraphLaunch(graph4(1, rstage4), 0));
        CK(cudaStreamSynchronize(0));
      } else {
        if (have_done) MPI_Waitall(8, done, MPI_STATUSES_IGNORE);
        MPI_Request notes[4], readies[4];
        for (int k = 0; k < 4; k++) MPI_Irecv(&note_in[k], 1, MPI_BYTE, peer, 20 + (XY[k] ^ 1), MPI_COMM_WORLD, &notes[k]);
        for (int k = 0; k < 2; k++) MPI_Irecv(zg[k], (int)FACE, MPI_BYTE, peer, 20 + ((4 + k) ^ 1), MPI_COMM_WORLD, &rq[nr++]);
        for (int k = 0; k < 4; k++) MPI_Isend(&r_out[k], 1, MPI_BYTE, peer, 40 + (XY[k] ^ 1), MPI_COMM_WORLD, &rq[nr++]);
        CK(cudaGraphLaunch(graph4(0, NULL), 0));
        for (int k = 0; k < 2; k++) MPI_Isend(zs[k], (int)FACE, MPI_BYTE, peer, 20 + 4 + k, MPI_COMM_WORLD, &rq[nr++]);
        for (int k = 0; k < 4; k++) MPI_Irecv(&r_in[k], 1, MPI_BYTE, peer, 40 + XY[k], MPI_COMM_WORLD, &readies[k]);
        MPI_Waitall(4, readies, MPI_STATUSES_IGNORE);
        CK(cudaEventRecord(ev, 0));
        for (int k = 0; k < 4; k++) MPI_Isend(&note_out[k], 1, MPI_BYTE, peer, 20 + XY[k], MPI_COMM_WORLD, &rq[nr++]);
        MPI_Waitall(4, notes, MPI_STATUSES_IGNORE);
        CK(cudaStreamWaitEvent(0, peer_ev, 0));
        CK(cudaGraphLaunch(graph4(1, peer_stage4), 0));
        MPI_Waitall(nr, rq, MPI_STATUSES_IGNORE);
        CK(cudaStreamSynchronize(0));
        for (int k = 0; k < 4; k++) {
          MPI_Irecv(&done_in[k], 1, MPI_BYTE, peer, 60 + k, MPI_COMM_WORLD, &done[k]);
          MPI_Isend(&done_out[k], 1, MPI_BYTE, peer, 60 + k, MPI_COMM_WORLD, &done[4 + k]);
        }
        have_done = 1;
      }
    }
    double dt = MPI_Wtime() - t0;
    if (it >= warm) t[it - warm] = dt * 1e6;
  }
  if (have_done) MPI_Waitall(8, done, MPI_STATUSES_IGNORE);
  qsort(t, reps, sizeof t[0], cmp);
  long bad = -1;
  if (kind != 0) {
    double *h = (double *)malloc((size_t)N * N * N * sizeof(double));
    CK(cudaMemcpy(h, grid, (size_t)N * N * N * sizeof(double), cudaMemcpyDeviceToHost));
    bad = 0;
    for (int j = 0; j < 6; j++)
      for (size_t i = 0; i < (size_t)N * N; i++) {
        int d = j / 2;
        /* Cells on two faces' edges get whichever face is unpacked last: skip them. */
        size_t a = i / N, b = i % N;
        if (a == 0 || a == N - 1 || b == 0 || b == N - 1) continue;
        if (h[face_at(d, ghost_layer(j), i)] != peer * 1e9 + (double)face_at(d, send_layer(j ^ 1), i)) bad++;
      }
    free(h);
  }
  long all_bad = 0;
  MPI_Reduce(&bad, &all_bad, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%-7s halo-3d %8.2f / %8.2f / %8.2f us   %s\n", name, t[reps / 10], t[reps / 2], t[reps * 9 / 10],
           kind == 0 ? "-" : all_bad == 0 ? "received faces checked: ok" : "received faces checked: WRONG");
  fflush(stdout);
}

static void way(const char *name, int d, int kind) {
  const int warm = 200, reps = 2000;
  static double t[2000];
  CK(cudaDeviceSynchronize());
  fill<<<1024, 256>>>(grid, rank);
  CK(cudaDeviceSynchronize());
  MPI_Request rq[6];
  for (int it = 0; it < warm + reps; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    char r_in = 0, r_out = 1, note_in = 0, note_out = 1, done_in = 0, done_out = 1;
    if (kind == 0) {
      MPI_Sendrecv(cflat, (int)FACE, MPI_BYTE, peer, 9, rflat, (int)FACE, MPI_BYTE, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (kind == 1) {
      pack<<<BLOCKS, THREADS>>>(grid, stage, d, 1);
      CK(cudaStreamSynchronize(0));
      MPI_Sendrecv(stage, (int)FACE, MPI_BYTE, peer, 9, rstage, (int)FACE, MPI_BYTE, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      unpack<<<BLOCKS, THREADS>>>(grid, rstage, d, N - 1);
      CK(cudaStreamSynchronize(0));
    } else if (kind == 5) {
      gpack(stage, d);
      CK(cudaStreamSynchronize(0));
      MPI_Sendrecv(stage, (int)FACE, MPI_BYTE, peer, 9, rstage, (int)FACE, MPI_BYTE, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      gunpack(rstage, d);
      CK(cudaStreamSynchronize(0));
    } else if (kind == 6) {
      MPI_Irecv(&note_in, 1, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &rq[0]);
      gpack(stage, d);
      CK(cudaEventRecord(ev, 0));
      MPI_Send(&note_out, 1, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
      MPI_Wait(&rq[0], MPI_STATUS_IGNORE);
      CK(cudaStreamWaitEvent(0, peer_ev, 0));
      gunpack(peer_stage, d);
      CK(cudaStreamSynchronize(0));
    } else if (kind == 7) {
      static MPI_Request done[2];
      static int have_done = 0;
      if (have_done) MPI_Waitall(2, done, MPI_STATUSES_IGNORE); /* the peer is done with my staging */
      MPI_Irecv(&note_in, 1, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &rq[0]);
      MPI_Isend(&r_out, 1, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &rq[1]);
      gpack(stage, d);
      MPI_Recv(&r_in, 1, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      CK(cudaEventRecord(ev, 0));
      MPI_Send(&note_out, 1, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
      MPI_Wait(&rq[0], MPI_STATUS_IGNORE);
      CK(cudaStreamWaitEvent(0, peer_ev, 0));
      gunpack(peer_stage, d);
      CK(cudaStreamSynchronize(0));
      MPI_Irecv(&done_in, 1, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &done[0]);
      MPI_Isend(&done_out, 1, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &done[1]);
      have_done = it + 1 < warm + reps;
      if (!have_done) MPI_Waitall(2, done, MPI_STATUSES_IGNORE);
      MPI_Wait(&rq[1], MPI_STATUS_IGNORE);
    } else {
      int full = kind != 3;
      /* The receive side first: the real receive (here the marker), then the ready message. */
      MPI_Irecv(&note_in, 1, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &rq[0]);
      if (full) {
        MPI_Irecv(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD, &rq[1]);
        MPI_Isend(&r_out, 1, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &rq[2]);
        MPI_Recv(&r_in, 1, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
      /* The send side: pack (into own or the peer's staging), record, note, marker. */
      pack<<<BLOCKS, THREADS>>>(grid, kind == 4 ? peer_rstage : stage, d, 1);
      CK(cudaEventRecord(ev, 0));
      MPI_Isend(&note_out, 1, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &rq[3]);
      if (full) MPI_Isend(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD, &rq[4]);
      /* The receive completes: marker and note in, then the unpack after the peer's event. */
      MPI_Waitall(full ? 2 : 1, rq, MPI_STATUSES_IGNORE);
      CK(cudaStreamWaitEvent(0, peer_ev, 0));
      unpack<<<BLOCKS, THREADS>>>(grid, kind == 4 ? rstage : peer_stage, d, N - 1);
      CK(cudaStreamSynchronize(0));
      if (full) {
        MPI_Irecv(&done_in, 1, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &rq[0]);
        MPI_Isend(&done_out, 1, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &rq[1]);
        MPI_Wait(&rq[2], MPI_STATUS_IGNORE);
        MPI_Wait(&rq[4], MPI_STATUS_IGNORE);
        MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
      }
      MPI_Wait(&rq[3], MPI_STATUS_IGNORE);
    }
    double dt = MPI_Wtime() - t0;
    if (it >= warm) t[it - warm] = dt * 1e6;
  }
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
  CK(cudaMalloc(&grid, (size_t)N * N * N * sizeof(double)));
  CK(cudaMalloc(&stage, FACE));
  CK(cudaMalloc(&rstage, FACE));
  CK(cudaMalloc(&cflat, FACE));
  CK(cudaMalloc(&rflat, FACE));
  CK(cudaMalloc(&stage4, 4 * FACE));
  CK(cudaMalloc(&rstage4, 4 * FACE));
  for (int j = 0; j < 6; j++) {
    CK(cudaMalloc(&flat6[j], FACE));
    CK(cudaMalloc(&rflat6[j], FACE));
  }
  CK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
  cudaIpcMemHandle_t mh[3], pmh[3];
  cudaIpcEventHandle_t eh, peh;
  CK(cudaIpcGetMemHandle(&mh[0], stage));
  CK(cudaIpcGetMemHandle(&mh[1], rstage));
  CK(cudaIpcGetMemHandle(&mh[2], stage4));
  CK(cudaIpcGetEventHandle(&eh, ev));
  MPI_Sendrecv(mh, sizeof mh, MPI_BYTE, peer, 0, pmh, sizeof pmh, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Sendrecv(&eh, sizeof eh, MPI_BYTE, peer, 0, &peh, sizeof peh, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  CK(cudaIpcOpenMemHandle((void **)&peer_stage, pmh[0], cudaIpcMemLazyEnablePeerAccess));
  CK(cudaIpcOpenMemHandle((void **)&peer_rstage, pmh[1], cudaIpcMemLazyEnablePeerAccess));
  CK(cudaIpcOpenMemHandle((void **)&peer_stage4, pmh[2], cudaIpcMemLazyEnablePeerAccess));
  CK(cudaIpcOpenEventHandle(&peer_ev, peh));
  int dev;
  CK(cudaGetDevice(&dev));
  if (rank == 0) printf("2 ranks, GPUs %d and the peer's; 2000 repetitions after 200, p10 / p50 / p90\n", dev);
  for (int round = 0; round < (argc > 1 ? 0 : 2); round++)
    for (int d = 0; d < 2; d++) {
      way("contig", d, 0);
      way("bytes", d, 1);
      way("bytesg", d, 5);
      way("pull1", d, 3);
      way("pull1g", d, 6);
      way("proto", d, 7);
      way("contig", d, 0);
    }
  for (int round = 0; round < 3; round++) {
    halo("contig6", 0);
    halo("bytes6", 1);
    halo("proto6", 2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CK(cudaIpcCloseMemHandle(peer_stage4));
  CK(cudaIpcCloseMemHandle(peer_stage));
  CK(cudaIpcCloseMemHandle(peer_rstage));
  MPI_Finalize();
  return 0;
}
