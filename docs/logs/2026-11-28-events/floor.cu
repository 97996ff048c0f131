// The floor of a kernel launched and waited for on the legacy default stream (graph launch,
// then cudaStreamSynchronize, timed together on the host), for three kernels: an empty one,
// an x-face-like unpack reading 512 KiB contiguous from this GPU and writing 65,536 8-byte
// words 2 KiB apart, and the same unpack reading the 512 KiB from the peer's GPU over CUDA
// IPC (as the direct path's unpack does). Rank 1 times; rank 0 only lends its buffer.
//   nvcc -O2 -o floor floor.cu $(mpicc --showme:compile) $(mpicc --showme:link) -lcuda
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

__global__ void empty_kernel() {}
// One 8-byte word per thread: packed word i goes to row i of a 256 x 256 face, 2 KiB apart.
__global__ void unpack_x(const unsigned long long* __restrict__ packed, unsigned long long* grid, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) grid[(size_t)i * 256] = packed[i];
}

static cudaGraphExec_t graph_of(void* func, dim3 grid, dim3 block, void** args) {
  cudaGraph_t g; CK(cudaGraphCreate(&g, 0)); cudaGraphNode_t node;
  cudaKernelNodeParams kp = {}; kp.func = func; kp.gridDim = grid; kp.blockDim = block; kp.kernelParams = args;
  CK(cudaGraphAddKernelNode(&node, g, nullptr, 0, &kp));
  cudaGraphExec_t x; CK(cudaGraphInstantiate(&x, g, 0)); return x;
}

static void timeit(const char* name, cudaGraphExec_t x, int iters) {
  std::vector<double> t(iters);
  for (int i = 0; i < iters; i++) {
    double a = now_us(); cudaGraphLaunch(x, 0); cudaStreamSynchronize(0); t[i] = now_us() - a;
  }
  std::sort(t.begin(), t.end());
  printf("r%d %-52s p10 %6.2f  p50 %6.2f  p90 %6.2f us\n", rank, name, t[iters / 10], t[iters / 2], t[iters * 9 / 10]);
  fflush(stdout);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = rank ^ 1, ndev; CK(cudaGetDeviceCount(&ndev)); CK(cudaSetDevice(rank % ndev));
  const int iters = argc > 1 ? atoi(argv[1]) : 3000, n = 65536;
  unsigned long long *packed, *grid;
  CK(cudaMalloc(&packed, 2 << 20)); CK(cudaMalloc(&grid, (size_t)n * 256 * 8));
  CK(cudaMemset(packed, 1, 2 << 20));
  cudaIpcMemHandle_t h, ph; CK(cudaIpcGetMemHandle(&h, packed));
  MPI_Sendrecv(&h, sizeof h, MPI_BYTE, peer, 0, &ph, sizeof ph, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  unsigned long long* peer_packed; CK(cudaIpcOpenMemHandle((void**)&peer_packed, ph, cudaIpcMemLazyEnablePeerAccess));
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    int nn = n;
    cudaGraphExec_t e = graph_of((void*)empty_kernel, dim3(1), dim3(32), nullptr);
    void* la[] = {&packed, &grid, &nn}; cudaGraphExec_t l = graph_of((void*)unpack_x, dim3(n / 256), dim3(256), la);
    void* ra[] = {&peer_packed, &grid, &nn}; cudaGraphExec_t r = graph_of((void*)unpack_x, dim3(n / 256), dim3(256), ra);
    printf("device %d of %d, %d launches each, graph launch + cudaStreamSynchronize timed together\n", rank % ndev, ndev, iters);
    for (int round = 0; round < 2; round++) {
      timeit("empty kernel", e, iters);
      timeit("x-face unpack, 512 KiB read on this GPU", l, iters);
      timeit("x-face unpack, 512 KiB read from the peer GPU (IPC)", r, iters);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
