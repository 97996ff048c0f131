// The GPU chain of a lent message across two processes, four ways of ordering it: rank 0 runs
// a kernel (the pack) and makes it known; rank 1 runs a kernel (the unpack) after it and waits
// for its stream. Timed on rank 1 from a common start (a barrier on a shared-memory word) to
// its stream's end; p50/p90 over the rounds.
//   event: rank 0 records an IPC event after its kernel, then writes a host word; rank 1 polls
//          the word, cuStreamWaitEvent on the peer's event, launches, synchronizes (the path now)
//   host flag: rank 1 queues cuStreamWaitValue64 on a word of shared host memory at once,
//          then its kernel; rank 0 queues cuStreamWriteValue64 of the round after its kernel
//   peer flag: the same, the word in rank 0's device memory, mapped over IPC on rank 1
//   own flag: the same, the word in rank 1's device memory, written by rank 0 over IPC
//   nvcc -O2 -o chain chain.cu $(mpicc --showme:compile) $(mpicc --showme:link) -lcuda
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
__global__ void bump(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] += 1.0f; }

struct Shared { volatile long go[2]; volatile long note; volatile unsigned long long flag; };

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = rank ^ 1, ndev; CK(cudaGetDeviceCount(&ndev)); CK(cudaSetDevice(rank % ndev));
  const int n = 65536, rounds = argc > 1 ? atoi(argv[1]) : 2000;
  // Shared host memory: rank 0 maps an anonymous shared file, rank 1 opens it.
  char name[64]; snprintf(name, sizeof name, "/chain-%d", (int)getppid());
  int fd = rank == 0 ? shm_open(name, O_CREAT | O_RDWR, 0600) : -1;
  if (rank == 0) ftruncate(fd, 4096);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) fd = shm_open(name, O_RDWR, 0600);
  Shared* sh = (Shared*)mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  MPI_Barrier(MPI_COMM_WORLD); if (rank == 0) shm_unlink(name);
  if (rank == 0) { sh->go[0] = sh->go[1] = 0; sh->note = 0; sh->flag = 0; }
  CD(cuMemHostRegister((void*)sh, 4096, CU_MEMHOSTREGISTER_DEVICEMAP));
  CUdeviceptr hflag; CD(cuMemHostGetDevicePointer(&hflag, (void*)&sh->flag, 0));
  float* buf; CK(cudaMalloc(&buf, n * sizeof(float)));
  cudaEvent_t ev; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess));
  cudaIpcEventHandle_t h, ph; CK(cudaIpcGetEventHandle(&h, ev));
  MPI_Sendrecv(&h, sizeof h, MPI_BYTE, peer, 0, &ph, sizeof ph, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  cudaEvent_t pev; CK(cudaIpcOpenEventHandle(&pev, ph));
  unsigned long long* dflag; CK(cudaMalloc(&dflag, 2 << 20)); CK(cudaMemset(dflag, 0, 2 << 20));
  cudaIpcMemHandle_t mh, pmh; CK(cudaIpcGetMemHandle(&mh, dflag));
  MPI_Sendrecv(&mh, sizeof mh, MPI_BYTE, peer, 1, &pmh, sizeof pmh, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  unsigned long long* pflag; CK(cudaIpcOpenMemHandle((void**)&pflag, pmh, cudaIpcMemLazyEnablePeerAccess));
  cudaGraph_t g; CK(cudaGraphCreate(&g, 0)); cudaGraphNode_t kn; void* args[] = {&buf, (void*)&n};
  cudaKernelNodeParams kp = {}; kp.func = (void*)bump; kp.gridDim = dim3(n / 256); kp.blockDim = dim3(256); kp.kernelParams = args;
  CK(cudaGraphAddKernelNode(&kn, g, nullptr, 0, &kp)); cudaGraphExec_t gx; CK(cudaGraphInstantiate(&gx, g, 0));
  CUstream s = CU_STREAM_LEGACY;
  const char* names[] = {"event + host note", "host flag (shared host memory)", "peer flag (sender's device memory)", "own flag (receiver's device memory)"};
  unsigned long long seq = 0;
  long round_no = 0;
  for (int way = 0; way < 4; way++) {
    std::vector<double> t;
    for (int r = 0; r < rounds; r++) {
      seq++; round_no++;
      // a barrier of two through shared memory
      sh->go[rank] = round_no; while (sh->go[peer] < round_no) {}
      double t0 = now_us();
      if (rank == 0) {
        CK(cudaGraphLaunch(gx, 0));
        if (way == 0) { CK(cudaEventRecord(ev, 0)); __sync_synchronize(); sh->note = round_no; }
        else if (way == 1) CD(cuStreamWriteValue64(s, hflag, seq, 0));
        else if (way == 2) CD(cuStreamWriteValue64(s, (CUdeviceptr)dflag, seq, 0));
        else CD(cuStreamWriteValue64(s, (CUdeviceptr)pflag, seq, 0));
        CK(cudaStreamSynchronize(0));
      } else {
        if (way == 0) { while (sh->note < round_no) {} CK(cudaStreamWaitEvent(0, pev, 0)); }
        else if (way == 1) CD(cuStreamWaitValue64(s, hflag, seq, CU_STREAM_WAIT_VALUE_GEQ));
        else if (way == 2) CD(cuStreamWaitValue64(s, (CUdeviceptr)pflag, seq, CU_STREAM_WAIT_VALUE_GEQ));
        else CD(cuStreamWaitValue64(s, (CUdeviceptr)dflag, seq, CU_STREAM_WAIT_VALUE_GEQ));
        CK(cudaGraphLaunch(gx, 0));
        CK(cudaStreamSynchronize(0));
        t.push_back(now_us() - t0);
      }
    }
    if (rank == 1) {
      std::sort(t.begin(), t.end());
      printf("%-40s p10 %6.2f  p50 %6.2f  p90 %6.2f us\n", names[way], t[t.size() / 10], t[t.size() / 2], t[t.size() * 9 / 10]);
      fflush(stdout);
    }
  }
  // both kernels alone on one GPU, no ordering: the floor of two launches waited for
  MPI_Finalize();
  return 0;
}
