// Host time of the calls that order a pack on one GPU before an unpack on another across
// processes: a graph launch, an IPC event recorded, a stream's wait for a peer's IPC event,
// the same inside one graph (event record and wait nodes), and stream memory operations.
// Then an ordering check: the peer's wait node on an IPC event holds a kernel back until a
// slow kernel of this rank has written. 2 ranks, one GPU each (or shared).
//   nvcc -O2 -o evbench evbench.cu $(mpicc --showme:compile) $(mpicc --showme:link) -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <algorithm>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("r%d %s:%d %s: %s\n", rank, __FILE__, __LINE__, #x, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define CD(x) do { CUresult e_ = (x); if (e_ != CUDA_SUCCESS) { const char* s_; cuGetErrorString(e_, &s_); printf("r%d %s:%d %s: %s\n", rank, __FILE__, __LINE__, #x, s_); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

static int rank;
static double now_us() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }

__global__ void bump(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] += 1.0f; }
__global__ void slow_write(volatile unsigned* p, unsigned v, long long spin) {
  long long t0 = clock64(); while (clock64() - t0 < spin) {} if (threadIdx.x == 0) *p = v; }
__global__ void read_peer(const volatile unsigned* peer, unsigned* out) { if (threadIdx.x == 0) *out = *peer; }

static cudaGraphExec_t build(int wait_first, cudaEvent_t wait_ev, int record_after, cudaEvent_t rec_ev, float* buf, int n) {
  cudaGraph_t g; CK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t prev = nullptr, node;
  if (wait_first) { CK(cudaGraphAddEventWaitNode(&node, g, nullptr, 0, wait_ev)); prev = node; }
  void* args[] = {&buf, &n};
  cudaKernelNodeParams kp = {}; kp.func = (void*)bump; kp.gridDim = dim3((n + 255) / 256); kp.blockDim = dim3(256); kp.kernelParams = args;
  CK(cudaGraphAddKernelNode(&node, g, prev ? &prev : nullptr, prev ? 1 : 0, &kp)); prev = node;
  if (record_after) CK(cudaGraphAddEventRecordNode(&node, g, &prev, 1, rec_ev));
  cudaGraphExec_t x; CK(cudaGraphInstantiate(&x, g, 0)); return x;
}

template <class F> static void timeit(const char* name, int iters, F f) {
  std::vector<double> t(iters);
  for (int i = 0; i < iters; i++) { MPI_Barrier(MPI_COMM_WORLD); double a = now_us(); f(i); t[i] = now_us() - a; cudaStreamSynchronize(0); }
  std::sort(t.begin(), t.end());
  double sum = 0; for (double x : t) sum += x;
  printf("r%d %-44s median %6.2f us  p10 %6.2f  p90 %6.2f  mean %6.2f\n", rank, name, t[iters / 2], t[iters / 10], t[iters * 9 / 10], sum / iters);
  fflush(stdout);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);
  int peer = rank ^ 1, ndev; CK(cudaGetDeviceCount(&ndev)); CK(cudaSetDevice(rank % ndev));
  const int n = 65536, iters = argc > 1 ? atoi(argv[1]) : 3000;
  float* buf; CK(cudaMalloc(&buf, n * sizeof(float)));
  cudaEvent_t ev, plain; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess));
  CK(cudaEventCreateWithFlags(&plain, cudaEventDisableTiming));
  cudaIpcEventHandle_t h, ph; CK(cudaIpcGetEventHandle(&h, ev));
  MPI_Sendrecv(&h, sizeof h, MPI_BYTE, peer, 0, &ph, sizeof ph, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  cudaEvent_t pev; CK(cudaIpcOpenEventHandle(&pev, ph));
  cudaGraphExec_t g_k = build(0, nullptr, 0, nullptr, buf, n);
  cudaGraphExec_t g_kr = build(0, nullptr, 1, ev, buf, n);
  cudaGraphExec_t g_wk = build(1, pev, 0, nullptr, buf, n);
  cudaGraphExec_t g_wkr = build(1, pev, 1, ev, buf, n);
  unsigned* flag; CK(cudaHostAlloc(&flag, 64, cudaHostAllocMapped)); *flag = 0;
  CUdeviceptr dflag; CD(cuMemHostGetDevicePointer(&dflag, flag, 0));
  CUstream legacy = CU_STREAM_LEGACY;
  if (rank == 0) printf("device %d of %d per rank, %d iterations, each call sequence timed on the host, the stream synchronized after\n", rank % ndev, ndev, iters);
  timeit("graph launch (1 kernel)", iters, [&](int) { cudaGraphLaunch(g_k, 0); });
  timeit("graph launch + cudaEventRecord(ipc)", iters, [&](int) { cudaGraphLaunch(g_k, 0); cudaEventRecord(ev, 0); });
  timeit("graph launch + cudaEventRecord(plain)", iters, [&](int) { cudaGraphLaunch(g_k, 0); cudaEventRecord(plain, 0); });
  timeit("graph [kernel -> record(ipc)]", iters, [&](int) { cudaGraphLaunch(g_kr, 0); });
  timeit("cudaStreamWaitEvent(peer ipc) + graph launch", iters, [&](int) { cudaStreamWaitEvent(0, pev, 0); cudaGraphLaunch(g_k, 0); });
  timeit("graph [wait(peer ipc) -> kernel]", iters, [&](int) { cudaGraphLaunch(g_wk, 0); });
  timeit("graph [wait(peer ipc) -> kernel -> record(ipc)]", iters, [&](int) { cudaGraphLaunch(g_wkr, 0); });
  timeit("graph launch + cuStreamWriteValue32(mapped)", iters, [&](int i) { cudaGraphLaunch(g_k, 0); cuStreamWriteValue32(legacy, dflag, i, 0); });
  timeit("cuStreamWaitValue32(mapped, met) + graph launch", iters, [&](int) { cuStreamWaitValue32(legacy, dflag, 0, CU_STREAM_WAIT_VALUE_GEQ); cudaGraphLaunch(g_k, 0); });
  CK(cudaDeviceSynchronize());

  // Ordering: rank 0 writes v after spinning ~40 us and records its IPC event in the same graph
  // launch sequence; rank 1, told at once on the host, waits for that event in a graph's wait
  // node, then reads rank 0's word over IPC. A read before the write is a failure.
  unsigned *word, *out; CK(cudaMalloc(&word, 4096)); CK(cudaMalloc(&out, 4)); CK(cudaMemset(word, 0, 4096));
  cudaIpcMemHandle_t mh, pmh; CK(cudaIpcGetMemHandle(&mh, word));
  MPI_Sendrecv(&mh, sizeof mh, MPI_BYTE, peer, 1, &pmh, sizeof pmh, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  unsigned* pword; CK(cudaIpcOpenMemHandle((void**)&pword, pmh, cudaIpcMemLazyEnablePeerAccess));
  cudaGraph_t g; CK(cudaGraphCreate(&g, 0)); cudaGraphNode_t wn, rn;
  CK(cudaGraphAddEventWaitNode(&wn, g, nullptr, 0, pev));
  void* rargs[] = {&pword, &out}; cudaKernelNodeParams kp = {}; kp.func = (void*)read_peer; kp.gridDim = dim3(1); kp.blockDim = dim3(32); kp.kernelParams = rargs;
  CK(cudaGraphAddKernelNode(&rn, g, &wn, 1, &kp)); cudaGraphExec_t g_read; CK(cudaGraphInstantiate(&g_read, g, 0));
  int bad = 0, rounds = 200;
  for (int r = 1; r <= rounds; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      slow_write<<<1, 32>>>(word, (unsigned)r, 80000); CK(cudaEventRecord(ev, 0));
      MPI_Send(&r, 1, MPI_INT, 1, 2, MPI_COMM_WORLD); CK(cudaDeviceSynchronize());
    } else if (rank == 1) {
      int got; MPI_Recv(&got, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      CK(cudaGraphLaunch(g_read, 0)); unsigned v; CK(cudaMemcpy(&v, out, 4, cudaMemcpyDeviceToHost));
      if (v != (unsigned)r) bad++;
    }
  }
  if (rank == 1) printf("r1 ordering through a graph's wait node on the peer's IPC event: %d of %d reads early\n", bad, rounds);
  MPI_Finalize();
  return 0;
}
