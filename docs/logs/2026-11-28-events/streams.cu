// Host time of one graph launch (a one-kernel graph), and of an event record, on the legacy
// default stream, on a blocking stream of one's own and on a non-blocking one, with 0 to 8
// other blocking streams in the context that have run work once (as a CUDA-aware MPI's are).
// One process, GPU 0.   nvcc -O2 -o streams streams.cu
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <algorithm>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("line %d %s: %s\n", __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
static double now_us() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }
__global__ void bump(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] += 1.0f; }

static double median_launch(cudaGraphExec_t g, cudaStream_t s, cudaEvent_t ev, int iters) {
  std::vector<double> t(iters);
  for (int i = 0; i < iters; i++) {
    double a = now_us(); cudaGraphLaunch(g, s); if (ev) cudaEventRecord(ev, s); t[i] = now_us() - a;
    cudaStreamSynchronize(s);
  }
  std::sort(t.begin(), t.end());
  return t[iters / 2];
}

int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 3000, n = 65536;
  CK(cudaSetDevice(0));
  float* buf; CK(cudaMalloc(&buf, n * sizeof(float)));
  cudaStream_t own_blocking, own_nonblocking;
  CK(cudaStreamCreateWithFlags(&own_blocking, cudaStreamDefault));
  CK(cudaStreamCreateWithFlags(&own_nonblocking, cudaStreamNonBlocking));
  cudaEvent_t ev; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaGraph_t g; CK(cudaGraphCreate(&g, 0)); cudaGraphNode_t node; void* args[] = {&buf, &n};
  cudaKernelNodeParams kp = {}; kp.func = (void*)bump; kp.gridDim = dim3(n / 256); kp.blockDim = dim3(256); kp.kernelParams = args;
  CK(cudaGraphAddKernelNode(&node, g, nullptr, 0, &kp)); cudaGraphExec_t x; CK(cudaGraphInstantiate(&x, g, 0));
  std::vector<cudaStream_t> others;
  printf("graph launch (and + event record), host time, median of %d, us\n", iters);
  printf("%-14s %10s %10s %12s %12s %14s %14s\n", "other streams", "legacy", "+record", "own blocking", "+record", "own nonblocking", "+record");
  for (int k : {0, 1, 2, 4, 8}) {
    while ((int)others.size() < k) {
      cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamDefault));
      bump<<<n / 256, 256, 0, s>>>(buf, n); CK(cudaStreamSynchronize(s)); others.push_back(s);
    }
    printf("%-14d %10.2f %10.2f %12.2f %12.2f %14.2f %14.2f\n", k,
           median_launch(x, cudaStreamLegacy, nullptr, iters), median_launch(x, cudaStreamLegacy, ev, iters),
           median_launch(x, own_blocking, nullptr, iters), median_launch(x, own_blocking, ev, iters),
           median_launch(x, own_nonblocking, nullptr, iters), median_launch(x, own_nonblocking, ev, iters));
    fflush(stdout);
  }
  return 0;
}
