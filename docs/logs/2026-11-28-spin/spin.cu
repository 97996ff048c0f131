// The GPU chain of a lent message across two processes, with the receiver's kernel queued before
// the sender's kernel has run and held back on its GPU by a spin on a flag. Rank 0 runs a kernel
// (the pack) and makes it known; rank 1 runs a kernel (the unpack) after it and waits for its
// stream. Timed on rank 1 from a common start (a barrier on a shared-memory word) to its
// stream's end; p10/p50/p90 over the rounds. Ways:
//   event:        rank 0 records an IPC event after its kernel, then writes a host word; rank 1
//                 polls the word, cuStreamWaitEvent on the peer's event, launches, synchronizes
//                 (the direct path as it stands; chain.cu of 2026-11-28-events measured it too)
//   spin host:    rank 1 launches at once a one-thread kernel spinning on a word of shared host
//                 memory, then its kernel; rank 0 queues cuStreamWriteValue64 after its kernel
//   spin own:     the same, the word in rank 1's device memory, written by rank 0 over IPC
//   fused own:    rank 1's kernel itself spins (thread 0 of every block, then __syncthreads);
//                 one launch; rank 0 writes with cuStreamWriteValue64 over IPC
//   fused signal: as fused own, but rank 0's kernel writes the word itself: its last block
//                 (a counter) fences to the system and stores the round (no stream write)
//   fused ctl:    as fused own, each block reading the value it waits for from mapped host
//                 memory (written by rank 1's host before the launch), as the interposer's
//                 waiting unpack reads its ticket
//   fused ctl peer: as fused ctl, the kernel reading rank 0's buffer over CUDA IPC (a pull)
//   fused ctl peer graph: as fused ctl peer, launched as a CUDA graph of one kernel node whose
//                 arguments never change
// Every spin gives up after 1 s of the GPU's global timer and counts it (a lost round).
//   nvcc -O2 -arch=sm_90 -o spin spin.cu $(mpicc --showme:compile) $(mpicc --showme:link) -lcuda -lrt
#include <cuda.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <time.h>
#include <algorithm>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("r%d line %d %s: %s\n", rank, __LINE__, #x, cudaGetErrorString(e_)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define CD(x) do { CUresult e_ = (x); if (e_ != CUDA_SUCCESS) { const char* s_; cuGetErrorString(e_, &s_); printf("r%d line %d %s: %s\n", rank, __LINE__, #x, s_); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
static int rank;
static double now_us() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }

__device__ unsigned long long gtime() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
// Spins until *flag >= want, at most 1 s; counts a give-up in *lost.
__device__ void wait_flag(const volatile unsigned long long* flag, unsigned long long want, unsigned int* lost) {
  unsigned long long t0 = gtime();
  while (*flag < want) {
    if (gtime() - t0 > 1000000000ull) { atomicAdd(lost, 1u); return; }
  }
}
__global__ void bump(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] += 1.0f; }
__global__ void spin(const unsigned long long* flag, unsigned long long want, unsigned int* lost) {
  wait_flag(flag, want, lost);
  __threadfence();
}
__global__ void fused(float* p, int n, const unsigned long long* flag, unsigned long long want, unsigned int* lost) {
  if (threadIdx.x == 0) { wait_flag(flag, want, lost); __threadfence(); }
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] += 1.0f;
}
__global__ void fused_ctl(float* p, const float* src, int n, const unsigned long long* flag,
                          const volatile unsigned long long* ctl, unsigned int* lost) {
  if (threadIdx.x == 0) { unsigned long long want = ctl[0]; wait_flag(flag, want, lost); __threadfence(); }
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = src[i] + 1.0f;
}
// bump, then the last block to finish stores `round` into *flag (visible to the peer's GPU).
__global__ void signal_bump(float* p, int n, unsigned int* done, unsigned long long* flag, unsigned long long round) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] += 1.0f;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    if (atomicAdd(done, 1u) == gridDim.x - 1) {
      *done = 0;
      __threadfence_system();
      *(volatile unsigned long long*)flag = round;
    }
  }
}

struct Shared { volatile long go[2]; volatile long note; volatile unsigned long long flag; };

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = rank ^ 1, ndev; CK(cudaGetDeviceCount(&ndev)); CK(cudaSetDevice(rank % ndev));
  int n = 65536; const int rounds = argc > 1 ? atoi(argv[1]) : 2000;
  char name[64]; snprintf(name, sizeof name, "/spin-%d", (int)getppid());
  int fd = rank == 0 ? shm_open(name, O_CREAT | O_RDWR, 0600) : -1;
  if (rank == 0) { if (ftruncate(fd, 4096)) return 1; }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) fd = shm_open(name, O_RDWR, 0600);
  Shared* sh = (Shared*)mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  MPI_Barrier(MPI_COMM_WORLD); if (rank == 0) shm_unlink(name);
  if (rank == 0) { sh->go[0] = sh->go[1] = 0; sh->note = 0; sh->flag = 0; }
  MPI_Barrier(MPI_COMM_WORLD);
  CD(cuMemHostRegister((void*)sh, 4096, CU_MEMHOSTREGISTER_DEVICEMAP));
  CUdeviceptr hflag; CD(cuMemHostGetDevicePointer(&hflag, (void*)&sh->flag, 0));
  float* buf; CK(cudaMalloc(&buf, n * sizeof(float)));
  unsigned int* lost; CK(cudaMallocManaged(&lost, sizeof(unsigned int))); *lost = 0;
  unsigned int* done; CK(cudaMalloc(&done, sizeof(unsigned int))); CK(cudaMemset(done, 0, sizeof(unsigned int)));
  cudaEvent_t ev; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess));
  cudaIpcEventHandle_t h, ph; CK(cudaIpcGetEventHandle(&h, ev));
  MPI_Sendrecv(&h, sizeof h, MPI_BYTE, peer, 0, &ph, sizeof ph, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  cudaEvent_t pev; CK(cudaIpcOpenEventHandle(&pev, ph));
  // Each rank's flag word in its own device memory, mapped by the peer.
  unsigned long long* dflag; CK(cudaMalloc(&dflag, 2 << 20)); CK(cudaMemset(dflag, 0, 2 << 20));
  cudaIpcMemHandle_t mh, pmh; CK(cudaIpcGetMemHandle(&mh, dflag));
  MPI_Sendrecv(&mh, sizeof mh, MPI_BYTE, peer, 1, &pmh, sizeof pmh, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  unsigned long long* pflag; CK(cudaIpcOpenMemHandle((void**)&pflag, pmh, cudaIpcMemLazyEnablePeerAccess));
  // The peer's buffer, mapped here; mapped host memory for the value waited for.
  cudaIpcMemHandle_t bh, pbh; CK(cudaIpcGetMemHandle(&bh, buf));
  MPI_Sendrecv(&bh, sizeof bh, MPI_BYTE, peer, 2, &pbh, sizeof pbh, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  float* pbuf; CK(cudaIpcOpenMemHandle((void**)&pbuf, pbh, cudaIpcMemLazyEnablePeerAccess));
  unsigned long long* ctl; CK(cudaHostAlloc((void**)&ctl, 64, cudaHostAllocMapped)); ctl[0] = 0;
  unsigned long long* dctl; CK(cudaHostGetDevicePointer((void**)&dctl, ctl, 0));
  float* out; CK(cudaMalloc(&out, n * sizeof(float)));
  cudaGraphExec_t gx;
  {
    cudaGraph_t g; CK(cudaGraphCreate(&g, 0)); cudaGraphNode_t kn;
    void* args[] = {&out, &pbuf, &n, &dflag, &dctl, &lost};
    cudaKernelNodeParams kp = {}; kp.func = (void*)fused_ctl; kp.gridDim = dim3(n / 256); kp.blockDim = dim3(256); kp.kernelParams = args;
    CK(cudaGraphAddKernelNode(&kn, g, nullptr, 0, &kp)); CK(cudaGraphInstantiate(&gx, g, 0));
  }
  CK(cudaDeviceSynchronize());
  MPI_Barrier(MPI_COMM_WORLD);
  CUstream s = CU_STREAM_LEGACY;
  const char* names[] = {"event + host note", "spin host (shared host memory)", "spin own (receiver's device memory)",
                         "fused own (one launch)", "fused signal (the sender's kernel writes)",
                         "fused ctl (value from host memory)", "fused ctl peer (reads the peer's buffer)",
                         "fused ctl peer graph (one node, same args)"};
  const int ways = 8;
  unsigned long long seq = 0;
  long round_no = 0;
  int grid = n / 256;
  for (int way = 0; way < ways; way++) {
    std::vector<double> t;
    for (int r = 0; r < rounds; r++) {
      seq++; round_no++;
      sh->go[rank] = round_no; while (sh->go[peer] < round_no) {}
      double t0 = now_us();
      if (rank == 0) {
        if (way == 4) signal_bump<<<grid, 256>>>(buf, n, done, pflag, seq);
        else bump<<<grid, 256>>>(buf, n);
        if (way == 0) { CK(cudaEventRecord(ev, 0)); __sync_synchronize(); sh->note = round_no; }
        else if (way == 1) CD(cuStreamWriteValue64(s, hflag, seq, 0));
        else if (way == 2 || way == 3 || way >= 5) CD(cuStreamWriteValue64(s, (CUdeviceptr)pflag, seq, 0));
        CK(cudaStreamSynchronize(0));
      } else {
        if (way == 0) { while (sh->note < round_no) {} CK(cudaStreamWaitEvent(0, pev, 0)); bump<<<grid, 256>>>(buf, n); }
        else if (way == 1) { spin<<<1, 1>>>((const unsigned long long*)hflag, seq, lost); bump<<<grid, 256>>>(buf, n); }
        else if (way == 2) { spin<<<1, 1>>>(dflag, seq, lost); bump<<<grid, 256>>>(buf, n); }
        else if (way == 5) { ctl[0] = seq; fused_ctl<<<grid, 256>>>(out, buf, n, dflag, dctl, lost); }
        else if (way == 6) { ctl[0] = seq; fused_ctl<<<grid, 256>>>(out, pbuf, n, dflag, dctl, lost); }
        else if (way == 7) { ctl[0] = seq; CK(cudaGraphLaunch(gx, 0)); }
        else fused<<<grid, 256>>>(buf, n, dflag, seq, lost);
        CK(cudaStreamSynchronize(0));
        t.push_back(now_us() - t0);
      }
    }
    if (rank == 1) {
      std::sort(t.begin(), t.end());
      printf("%-44s p10 %6.2f  p50 %6.2f  p90 %6.2f us  lost %u\n", names[way], t[t.size() / 10], t[t.size() / 2], t[t.size() * 9 / 10], *lost);
      fflush(stdout);
    }
  }
  // the floor: rank 1's kernel alone, launched and waited for
  if (rank == 1) {
    std::vector<double> t;
    for (int r = 0; r < rounds; r++) { double t0 = now_us(); bump<<<grid, 256>>>(buf, n); CK(cudaStreamSynchronize(0)); t.push_back(now_us() - t0); }
    std::sort(t.begin(), t.end());
    printf("%-44s p10 %6.2f  p50 %6.2f  p90 %6.2f us\n", "one kernel alone, launched and waited for", t[t.size() / 10], t[t.size() / 2], t[t.size() * 9 / 10]);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CK(cudaIpcCloseMemHandle(pflag));
  MPI_Finalize();
  return 0;
}
