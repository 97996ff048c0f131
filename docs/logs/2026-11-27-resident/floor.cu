// Launch, completion and gating floors of one GPU, for the interposer's fixed cost.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <pthread.h>
#include <atomic>
#include <algorithm>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1);} } while (0)
#define DK(x) do { CUresult e = (x); if (e != CUDA_SUCCESS) { const char* s; cuGetErrorString(e, &s); printf("%s: %s\n", #x, s); exit(1);} } while (0)

static double now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }
static void spin_us(double us) { double t = now(); while (now() - t < us) {} }
static void report(const char* name, std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  printf("%-62s p10 %7.2f  p50 %7.2f  p90 %7.2f us\n", name, v[v.size() / 10], v[v.size() / 2], v[v.size() * 9 / 10]);
  v.clear();
}

__global__ void empty() {}
// x face of a 256^3 f64 grid: n 8-byte elements at a stride; the last block to finish writes *flag = v
__global__ void pack(const double* __restrict__ src, double* __restrict__ dst, int n, int stride,
                     unsigned* counter, volatile unsigned* flag, unsigned v) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    dst[i] = src[(size_t)i * stride];
  if (flag) {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      unsigned t = atomicAdd(counter, 1);
      if (t == gridDim.x - 1) { *counter = 0; __threadfence_system(); *flag = v; }
    }
  }
}

// The same pack in a kernel already running: a gate word in mapped host memory opens round r,
// the blocks pack their shares, and the last block of the round writes r to the flag. What
// remains of a pack when neither a launch nor the GPU's dispatch is paid (the kernel holds its
// blocks on the GPU between rounds). Loads of the gate are system-scope acquires; with `relay`,
// only block 0 polls host memory and hands the round on through a device word.
__device__ __forceinline__ unsigned load_sys(const unsigned* p) {
  unsigned v; asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}
__device__ __forceinline__ unsigned load_gpu(const unsigned* p) {
  unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}
__global__ void resident(const double* __restrict__ src, double* __restrict__ dst, int n, int stride,
                         unsigned* counter, const unsigned* gate, volatile unsigned* flag, unsigned rounds,
                         unsigned* relay) {
  for (unsigned r = 1; r <= rounds; r++) {
    if (threadIdx.x == 0) {
      if (relay && blockIdx.x != 0) { while (load_gpu(relay) < r) __nanosleep(32); }
      else { while (load_sys(gate) < r) __nanosleep(32); if (relay) atomicExch(relay, r); }
    }
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
      dst[i] = src[(size_t)i * stride];
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      unsigned t = atomicAdd(counter, 1);
      if (t == gridDim.x - 1) { *counter = 0; __threadfence_system(); *flag = r; }
    }
  }
}

static const int N = 2000, W = 200;
static volatile unsigned* hflag; static unsigned* dflag;   // mapped host word the GPU writes
static volatile unsigned* hgate; static unsigned* dgate;   // mapped host word the host writes
static double *src, *dst; static unsigned* counter;
static const int n = 65536, stride = 256, grid = 256, block = 256;
static std::atomic<int> noise_on(0);
static cudaStream_t noise_stream;

static void* noise(void*) {
  CK(cudaSetDevice(0));
  while (noise_on.load() >= 0) {
    if (noise_on.load() == 1) { empty<<<1, 1, 0, noise_stream>>>(); cudaStreamSynchronize(noise_stream); }
  }
  return nullptr;
}

int main() {
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  int v = 0; cuDriverGetVersion(&v); printf("driver %d\n", v);
  CUdevice dev; DK(cuDeviceGet(&dev, 0));
  int a = 0; cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev);
  printf("wait value nor %d\n", a);
  unsigned flags; CK(cudaGetDeviceFlags(&flags)); printf("device flags 0x%x\n", flags);
  CK(cudaHostAlloc((void**)&hflag, 64, cudaHostAllocMapped)); CK(cudaHostGetDevicePointer((void**)&dflag, (void*)hflag, 0));
  CK(cudaHostAlloc((void**)&hgate, 64, cudaHostAllocMapped)); CK(cudaHostGetDevicePointer((void**)&dgate, (void*)hgate, 0));
  *hflag = 0; *hgate = 0;
  CK(cudaMalloc(&src, (size_t)n * stride * 8)); CK(cudaMalloc(&dst, (size_t)n * 8)); CK(cudaMalloc(&counter, 64));
  CK(cudaMemset(src, 1, (size_t)n * stride * 8)); CK(cudaMemset(counter, 0, 64));
  cudaStream_t s, s2; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&noise_stream, cudaStreamNonBlocking));
  cudaEvent_t ev; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK(cudaDeviceSynchronize());
  std::vector<double> l, t;
  unsigned seq = 0;

  for (int i = 0; i < N + W; i++) { double t0 = now(); empty<<<1, 1>>>(); double t1 = now(); CK(cudaStreamSynchronize(0)); double t2 = now();
    if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t0); } }
  report("empty, legacy stream: launch", l); report("empty, legacy stream: launch + cudaStreamSynchronize", t);
  for (int i = 0; i < N + W; i++) { double t0 = now(); empty<<<1, 1, 0, s>>>(); double t1 = now(); CK(cudaStreamSynchronize(s)); double t2 = now();
    if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t0); } }
  report("empty, non-blocking stream: launch", l); report("empty, non-blocking stream: launch + cudaStreamSynchronize", t);
  for (int i = 0; i < N + W; i++) { double t0 = now(); pack<<<grid, block>>>(src, dst, n, stride, counter, nullptr, 0); double t1 = now(); CK(cudaStreamSynchronize(0)); double t2 = now();
    if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t0); } }
  report("pack 512K, legacy: launch", l); report("pack 512K, legacy: launch + cudaStreamSynchronize", t);
  for (int i = 0; i < N + W; i++) { double t0 = now(); pack<<<grid, block, 0, s>>>(src, dst, n, stride, counter, nullptr, 0); double t1 = now(); CK(cudaStreamSynchronize(s)); double t2 = now();
    if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t0); } }
  report("pack 512K, non-blocking: launch", l); report("pack 512K, non-blocking: launch + cudaStreamSynchronize", t);
  for (int i = 0; i < N + W; i++) { ++seq; double t0 = now(); pack<<<grid, block, 0, s>>>(src, dst, n, stride, counter, dflag, seq); double t1 = now(); while (*hflag != seq) {} double t2 = now();
    if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t0); } }
  CK(cudaStreamSynchronize(s));
  report("pack 512K, last block writes mapped flag: launch", l); report("pack 512K, last block writes mapped flag: until flag seen", t);
  for (int i = 0; i < N + W; i++) { ++seq; double t0 = now(); pack<<<grid, block, 0, s>>>(src, dst, n, stride, counter, nullptr, 0);
    DK(cuStreamWriteValue32((CUstream)s, (CUdeviceptr)dflag, seq, 0)); double t1 = now(); while (*hflag != seq) {} double t2 = now();
    if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t0); } }
  CK(cudaStreamSynchronize(s));
  report("pack 512K + cuStreamWriteValue32: launch + write", l); report("pack 512K + cuStreamWriteValue32: until flag seen", t);
  for (int i = 0; i < N + W; i++) { double t0 = now(); pack<<<grid, block, 0, s>>>(src, dst, n, stride, counter, nullptr, 0);
    CK(cudaEventRecord(ev, s)); double t1 = now(); while (cudaEventQuery(ev) != cudaSuccess) {} double t2 = now();
    if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t0); } }
  report("pack 512K + event: launch + record", l); report("pack 512K + event: until cudaEventQuery succeeds", t);
  for (int i = 0; i < N + W; i++) { double t0 = now(); pack<<<grid, block, 0, s>>>(src, dst, n, stride, counter, nullptr, 0);
    double t1 = now(); while (cudaStreamQuery(s) != cudaSuccess) {} double t2 = now();
    if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t0); } }
  report("pack 512K: until cudaStreamQuery succeeds", t); l.clear();
  // gated: wait-value on a mapped host word, then the pack with its flag; the gate opened after 30 us
  std::vector<double> e;
  for (int i = 0; i < N + W; i++) { ++seq; double t0 = now();
    DK(cuStreamWaitValue32((CUstream)s2, (CUdeviceptr)dgate, seq, CU_STREAM_WAIT_VALUE_GEQ));
    pack<<<grid, block, 0, s2>>>(src, dst, n, stride, counter, dflag, seq); double t1 = now();
    spin_us(30); double t2 = now(); *hgate = seq; while (*hflag != seq) {} double t3 = now();
    if (i >= W) { e.push_back(t1 - t0); t.push_back(t3 - t2); } }
  CK(cudaStreamSynchronize(s2));
  report("gated pack: enqueue wait-value + launch", e); report("gated pack: gate opened until flag seen", t);
  // the gate opened before the kernel was even queued behind it: lower bound for the stream op
  for (int i = 0; i < N + W; i++) { ++seq; *hgate = seq; double t0 = now();
    DK(cuStreamWaitValue32((CUstream)s2, (CUdeviceptr)dgate, seq, CU_STREAM_WAIT_VALUE_GEQ));
    pack<<<grid, block, 0, s2>>>(src, dst, n, stride, counter, dflag, seq); while (*hflag != seq) {} double t1 = now();
    if (i >= W) t.push_back(t1 - t0); }
  report("wait-value already satisfied + pack + flag: total", t);
  // graph of the pack (fixed flag value; the flag reset by the host)
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  pack<<<grid, block, 0, s>>>(src, dst, n, stride, counter, dflag, 7);
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < N + W; i++) { *hflag = 0; double t0 = now(); CK(cudaGraphLaunch(ge, s)); double t1 = now(); while (*hflag != 7) {} double t2 = now();
    if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t0); } }
  CK(cudaStreamSynchronize(s));
  report("graph of the pack: cudaGraphLaunch", l); report("graph of the pack: until flag seen", t);

  // the same graph on the legacy stream, waited for with cudaStreamSynchronize
  for (int i = 0; i < N + W; i++) { double t0 = now(); CK(cudaGraphLaunch(ge, 0)); double t1 = now(); CK(cudaStreamSynchronize(0)); double t2 = now();
    if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t0); } }
  report("graph, legacy stream: cudaGraphLaunch", l); report("graph, legacy stream: launch + cudaStreamSynchronize", t);
  // one executable graph per kernel, its arguments set before each launch (two destinations in turn)
  {
    cudaGraphNode_t nodes[4]; size_t nn = 4; CK(cudaGraphGetNodes(g, nodes, &nn));
    cudaKernelNodeParams kp; CK(cudaGraphKernelNodeGetParams(nodes[0], &kp));
    double* dst2; CK(cudaMalloc(&dst2, (size_t)n * 8));
    for (int i = 0; i < N + W; i++) {
      const double* a0 = src; double* a1 = (i & 1) ? dst2 : dst; int a2 = n, a3 = stride; unsigned* a4 = counter; volatile unsigned* a5 = nullptr; unsigned a6 = 0;
      void* args[7] = {&a0, &a1, &a2, &a3, &a4, &a5, &a6};
      kp.kernelParams = args;
      double t0 = now(); CK(cudaGraphExecKernelNodeSetParams(ge, nodes[0], &kp)); CK(cudaGraphLaunch(ge, 0)); double t1 = now(); CK(cudaStreamSynchronize(0)); double t2 = now();
      if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t0); } }
    report("graph, arguments set each call, legacy: set + launch", l); report("graph, arguments set each call, legacy: + cudaStreamSynchronize", t);
    // driver launch of the same kernel
    cudaFunction_t rf; CK(cudaGetFuncBySymbol(&rf, (const void*)pack)); CUfunction f = (CUfunction)rf;
    for (int i = 0; i < N + W; i++) {
      const double* a0 = src; double* a1 = dst; int a2 = n, a3 = stride; unsigned* a4 = counter; volatile unsigned* a5 = nullptr; unsigned a6 = 0;
      void* args[7] = {&a0, &a1, &a2, &a3, &a4, &a5, &a6};
      double t0 = now(); DK(cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, 0, args, nullptr)); double t1 = now(); DK(cuStreamSynchronize(0)); double t2 = now();
      if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t0); } }
    report("cuLaunchKernel, legacy: launch", l); report("cuLaunchKernel, legacy: launch + cuStreamSynchronize", t);
    // two kernels back to back (pack then a second pack), one wait: what a second kernel adds
    for (int i = 0; i < N + W; i++) {
      double t0 = now(); pack<<<grid, block>>>(src, dst, n, stride, counter, nullptr, 0); pack<<<grid, block>>>(src, dst2, n, stride, counter, nullptr, 0); double t1 = now(); CK(cudaStreamSynchronize(0)); double t2 = now();
      if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t0); } }
    report("two packs back to back, legacy: launches", l); report("two packs back to back, legacy: + cudaStreamSynchronize", t);
  }
  // what a launcher checks before a graph launch: the capture state of the stream, the context
  {
    CUstreamCaptureStatus cs;
    CUcontext cur;
    for (int i = 0; i < N + W; i++) { double t0 = now(); DK(cuStreamIsCapturing((CUstream)0, &cs)); double t1 = now(); DK(cuStreamIsCapturing((CUstream)s, &cs)); double t2 = now();
      if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t1); } }
    report("cuStreamIsCapturing, legacy stream", l); report("cuStreamIsCapturing, non-blocking stream", t);
    for (int i = 0; i < N + W; i++) { double t0 = now(); DK(cuCtxGetCurrent(&cur)); double t1 = now();
      if (i >= W) l.push_back(t1 - t0); }
    report("cuCtxGetCurrent", l);
    // the driver API's graph: one kernel node, arguments set per launch (as the library does)
    cudaFunction_t rf; CK(cudaGetFuncBySymbol(&rf, (const void*)pack));
    CUgraph dg; CUgraphNode dn; CUgraphExec de;
    const double* a0 = src; double* a1 = dst; int a2 = n, a3 = stride; unsigned* a4 = counter; volatile unsigned* a5 = nullptr; unsigned a6 = 0;
    void* args[7] = {&a0, &a1, &a2, &a3, &a4, &a5, &a6};
    CUDA_KERNEL_NODE_PARAMS p = {};
    p.func = (CUfunction)rf; p.gridDimX = grid; p.gridDimY = 1; p.gridDimZ = 1; p.blockDimX = block; p.blockDimY = 1; p.blockDimZ = 1;
    p.kernelParams = args;
    DK(cuGraphCreate(&dg, 0)); DK(cuGraphAddKernelNode(&dn, dg, nullptr, 0, &p)); DK(cuGraphInstantiateWithFlags(&de, dg, 0));
    for (int i = 0; i < N + W; i++) {
      double t0 = now(); DK(cuStreamIsCapturing((CUstream)0, &cs)); DK(cuGraphExecKernelNodeSetParams(de, dn, &p)); DK(cuGraphLaunch(de, (CUstream)0)); double t1 = now(); DK(cuStreamSynchronize(0)); double t2 = now();
      if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t0); } }
    report("driver graph, capture check + set + launch, legacy", l); report("driver graph, legacy: + cuStreamSynchronize", t);
  }
  // launches while another thread launches and synchronizes on its own stream
  pthread_t th; pthread_create(&th, nullptr, noise, nullptr); noise_on = 1; spin_us(1000);
  for (int i = 0; i < N + W; i++) { ++seq; double t0 = now(); pack<<<grid, block, 0, s>>>(src, dst, n, stride, counter, dflag, seq); double t1 = now(); while (*hflag != seq) {} double t2 = now();
    if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t0); } }
  noise_on = -1; pthread_join(th, nullptr); CK(cudaDeviceSynchronize());
  report("pack + flag, another thread launching: launch", l); report("pack + flag, another thread launching: until flag seen", t);
  // pointer queries
  CUdeviceptr base; size_t sz; unsigned long long id; CUmemorytype mt; int ord;
  CUpointer_attribute at[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void* out[3] = {&mt, &id, &ord};
  for (int i = 0; i < N + W; i++) { double t0 = now(); DK(cuPointerGetAttributes(3, at, out, (CUdeviceptr)(src + 5))); double t1 = now(); DK(cuMemGetAddressRange(&base, &sz, (CUdeviceptr)(src + 5))); double t2 = now();
    if (i >= W) { l.push_back(t1 - t0); t.push_back(t2 - t1); } }
  report("cuPointerGetAttributes (3)", l); report("cuMemGetAddressRange", t);
  CUpointer_attribute at2[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* out2[2] = {&base, &sz};
  for (int i = 0; i < N + W; i++) { double t0 = now(); DK(cuPointerGetAttributes(2, at2, out2, (CUdeviceptr)(src + 5))); double t1 = now();
    if (i >= W) { l.push_back(t1 - t0); } }
  report("cuPointerGetAttributes (range start, size)", l);
  printf("range ok %d\n", base == (CUdeviceptr)src);
  // a resident pack kernel released through mapped host memory (all its blocks resident)
  {
    unsigned* relay; CK(cudaMalloc(&relay, 64));
    struct { const char* name; int g; bool relay; } cases[] = {
      {"resident pack, 256 blocks poll host memory", grid, false},
      {"resident pack, block 0 polls and relays", grid, true},
      {"resident pack, 1 block polls host memory", 1, false},
    };
    for (auto& c : cases) {
      CK(cudaDeviceSynchronize()); *hgate = 0; *hflag = 0; CK(cudaMemset(counter, 0, 64)); CK(cudaMemset(relay, 0, 64)); CK(cudaDeviceSynchronize());
      resident<<<c.g, block, 0, s>>>(src, dst, n, stride, counter, (const unsigned*)dgate, dflag, N + W, c.relay ? relay : nullptr);
      CK(cudaGetLastError()); spin_us(2000);
      for (unsigned i = 1; i <= (unsigned)(N + W); i++) { double t0 = now(); *hgate = i; while (*hflag != i) {} double t1 = now();
        if (i > (unsigned)W) t.push_back(t1 - t0); spin_us(5); }
      CK(cudaStreamSynchronize(s));
      char name[96]; snprintf(name, sizeof name, "%s: gate opened until flag seen", c.name); report(name, t);
    }
  }
  return 0;
}
