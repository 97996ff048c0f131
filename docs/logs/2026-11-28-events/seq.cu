// The driver calls of one rank's lent face in the order the interposer makes them, each timed
// on the host: the pack's graph launch, an IPC event recorded, the peer's IPC event waited for
// on the stream, the unpack's graph launch (another graph), the stream synchronized. Two
// ranks, one GPU each, in step (a barrier per round); no protocol, no datatypes: what is
// left of the interposer's steps beyond these is its own work.
//   nvcc -O2 -o seq seq.cu $(mpicc --showme:compile) $(mpicc --showme:link)
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <algorithm>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("r%d line %d %s: %s\n", rank, __LINE__, #x, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
static int rank;
static double now_us() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }
__global__ void pack_x(const unsigned long long* grid, unsigned long long* packed, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) packed[i] = grid[(size_t)i * 256]; }
__global__ void unpack_x(const unsigned long long* packed, unsigned long long* grid, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) grid[(size_t)i * 256 + 1] = packed[i]; }

static cudaGraphExec_t graph_of(void* func, int n, void** args) {
  cudaGraph_t g; CK(cudaGraphCreate(&g, 0)); cudaGraphNode_t node;
  cudaKernelNodeParams kp = {}; kp.func = func; kp.gridDim = dim3(n / 256); kp.blockDim = dim3(256); kp.kernelParams = args;
  CK(cudaGraphAddKernelNode(&node, g, nullptr, 0, &kp));
  cudaGraphExec_t x; CK(cudaGraphInstantiate(&x, g, 0)); return x;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = rank ^ 1, ndev; CK(cudaGetDeviceCount(&ndev)); CK(cudaSetDevice(rank % ndev));
  const int iters = argc > 1 ? atoi(argv[1]) : 3000; int n = 65536;
  unsigned long long *grid, *stage;
  CK(cudaMalloc(&grid, (size_t)n * 256 * 8)); CK(cudaMalloc(&stage, 2 << 20));
  cudaIpcMemHandle_t mh, pmh; CK(cudaIpcGetMemHandle(&mh, stage));
  MPI_Sendrecv(&mh, sizeof mh, MPI_BYTE, peer, 0, &pmh, sizeof pmh, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  unsigned long long* peer_stage; CK(cudaIpcOpenMemHandle((void**)&peer_stage, pmh, cudaIpcMemLazyEnablePeerAccess));
  cudaEvent_t ev; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess));
  cudaIpcEventHandle_t h, ph; CK(cudaIpcGetEventHandle(&h, ev));
  MPI_Sendrecv(&h, sizeof h, MPI_BYTE, peer, 1, &ph, sizeof ph, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  cudaEvent_t pev; CK(cudaIpcOpenEventHandle(&pev, ph));
  void* pa[] = {&grid, &stage, &n}; cudaGraphExec_t gp = graph_of((void*)pack_x, n, pa);
  void* ua[] = {&peer_stage, &grid, &n}; cudaGraphExec_t gu = graph_of((void*)unpack_x, n, ua);
  const char* names[] = {"pack graph launch", "IPC event recorded", "peer's IPC event waited on", "unpack graph launch", "stream synchronized"};
  std::vector<double> t[5];
  for (int it = 0; it < iters + 200; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double a = now_us();
    cudaGraphLaunch(gp, 0); double b = now_us();
    cudaEventRecord(ev, 0); double c = now_us();
    MPI_Barrier(MPI_COMM_WORLD); /* stands for the note: the peer's record has happened */
    double c2 = now_us();
    cudaStreamWaitEvent(0, pev, 0); double d = now_us();
    cudaGraphLaunch(gu, 0); double e = now_us();
    cudaStreamSynchronize(0); double f = now_us();
    if (it >= 200) { t[0].push_back(b - a); t[1].push_back(c - b); t[2].push_back(d - c2); t[3].push_back(e - d); t[4].push_back(f - e); }
  }
  if (rank == 1) {
    printf("device %d of %d, %d rounds, medians (p90), us\n", rank % ndev, ndev, iters);
    for (int k = 0; k < 5; k++) {
      std::sort(t[k].begin(), t[k].end());
      printf("  %-28s %6.2f (%6.2f)\n", names[k], t[k][iters / 2], t[k][iters * 9 / 10]);
    }
  }
  MPI_Finalize();
  return 0;
}
