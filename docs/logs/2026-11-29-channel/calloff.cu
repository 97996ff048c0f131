// Can a word written from another stream end a kernel that spins on it? A kernel on the legacy
// stream spins (thread 0 of each block, volatile loads) until a device word reaches 1, at most
// 2 s by the GPU's clock; the host then writes the word from a non-blocking stream, three ways:
// an 8-byte cudaMemcpyAsync from pinned host memory, cuStreamWriteValue64 (driver API), and a
// one-thread kernel; then the spinning kernel launched as a CUDA graph of one node, the word
// written the first two ways. Grids: one block per SM, and one full wave (every block the GPU
// holds).
// Prints, per way and grid, how long the spinning kernel took and whether it gave up.
//   nvcc -O2 -arch=sm_90 -o calloff calloff.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <chrono>
#include <thread>

__device__ unsigned long long gtime() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__global__ void spin(const unsigned long long* w, unsigned int* gave_up) {
  __shared__ int dummy[1024];
  if (threadIdx.x == 0) {
    unsigned long long t0 = gtime();
    while (*(const volatile unsigned long long*)w < 1) {
      if (gtime() - t0 > 2000000000ull) { atomicAdd(gave_up, 1u); break; }
    }
  }
  dummy[threadIdx.x] = 0;
  __syncthreads();
}
__global__ void store(unsigned long long* w) { *(volatile unsigned long long*)w = 1; }

int main() {
  int sms, per_sm;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, spin, 256, 0);
  unsigned long long* w; cudaMalloc(&w, 8);
  unsigned int* gave; cudaMallocManaged(&gave, 4);
  unsigned long long* one; cudaMallocHost(&one, 8); *one = 1;
  cudaStream_t side; cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  const char* ways[5] = {"cudaMemcpyAsync from pinned", "cuStreamWriteValue64", "one-thread kernel",
                         "graph; cudaMemcpyAsync", "graph; cuStreamWriteValue64"};
  for (int g = 0; g < 2; g++) {
    int grid = g == 0 ? sms : sms * per_sm;
    cudaGraphExec_t gx;
    {
      cudaGraph_t gr; cudaGraphNode_t n;
      cudaKernelNodeParams p = {};
      void* args[] = {&w, &gave};
      p.func = (void*)spin; p.gridDim = dim3(grid); p.blockDim = dim3(256); p.kernelParams = args;
      cudaGraphCreate(&gr, 0);
      cudaGraphAddKernelNode(&n, gr, nullptr, 0, &p);
      cudaGraphInstantiate(&gx, gr, 0);
    }
    for (int way = 0; way < 5; way++) {
      cudaMemset(w, 0, 8); *gave = 0; cudaDeviceSynchronize();
      auto t0 = std::chrono::steady_clock::now();
      if (way < 3) spin<<<grid, 256>>>(w, gave);
      else cudaGraphLaunch(gx, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      cudaError_t e = cudaSuccess; CUresult r = CUDA_SUCCESS;
      if (way == 0 || way == 3) e = cudaMemcpyAsync(w, one, 8, cudaMemcpyHostToDevice, side);
      if (way == 1 || way == 4) r = cuStreamWriteValue64((CUstream)side, (CUdeviceptr)w, 1, 0);
      if (way == 2) store<<<1, 1, 0, side>>>(w);
      cudaDeviceSynchronize();
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      printf("grid %5d (%s), %-28s: %8.1f ms, gave up in %u blocks (cuda %d, driver %d)\n", grid,
             g == 0 ? "a block per SM" : "a full wave", ways[way], ms, *gave, (int)e, (int)r);
    }
  }
  return 0;
}
