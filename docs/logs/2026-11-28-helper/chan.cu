// The x face of a 256^3 f64 grid exchanged between two processes on two GPUs, both ways at
// once (a lone MPI_Sendrecv's traffic), four ways, p10/p50/p90 µs per exchange on each rank
// from a common start (a barrier on a shared-memory word):
//   contiguous:  MPI_Sendrecv of the same 512 KiB, contiguous, device buffers (CUDA-aware MPI)
//   loan:        the interposer's loan by hand: pack into own staging, record an IPC event,
//                a note (a shared-memory word); on the peer's note, wait on its event, unpack
//                reading its staging over CUDA IPC, synchronize
//   channel:     the pack and the unpack launched at once, ordered on the GPUs: the pack's last
//                block stores the exchange's number into the peer's flag word (its device
//                memory, mapped here); the unpack's blocks spin on their own flag word, then
//                read the peer's staging; the notes as in `loan`, then synchronize
//   channel graph: the same two kernels as one CUDA graph, their arguments set per launch
//   channel line: a graph of four nodes in a line with plain edges: the plain pack, a
//                one-thread kernel storing the number into the peer's flag, a one-thread
//                kernel spinning on the own flag, the plain unpack (arguments set per launch)
// Staging alternates between two slots per rank (an exchange's slot is read by the peer
// before the peer's next exchange starts, so two suffice for one pair in lockstep). Every
// unpack checks each value against the peer's grid plus the exchange's number (the pack adds
// it), and counts mismatches, so a stale or early read shows.
//   nvcc -O2 -arch=sm_90 -I/opt/ompi-cuda/include -L/opt/ompi-cuda/lib \
//     -Xlinker -rpath=/opt/ompi-cuda/lib -o chan chan.cu -lmpi -lcuda -lrt
//   cuda_mpirun -np 2 --bind-to core ./chan [ROUNDS] [SETS]
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
static int rank;
static double now_us() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }

constexpr int N = 256;               // the grid's edge
constexpr int FACE = N * N;          // elements of the x face
constexpr int THREADS = 256;
constexpr int BLOCKS = FACE / THREADS;

__device__ unsigned long long gtime() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__device__ size_t at(int i, int x) { return ((size_t)(i / N) * N + (i % N)) * N + x; }

// The x face at x = N-2, plus `seq`, into `staging`.
__global__ void pack(const double* grid, double* staging, double seq) {
  int i = blockIdx.x * THREADS + threadIdx.x;
  staging[i] = grid[at(i, N - 2)] + seq;
}
// `pack`, then the last block to finish stores `seq` into the peer's flag.
__global__ void pack_signal(const double* grid, double* staging, double seq, unsigned int* done,
                            unsigned long long* peer_flag) {
  int i = blockIdx.x * THREADS + threadIdx.x;
  staging[i] = grid[at(i, N - 2)] + seq;
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(done, 1u) == gridDim.x - 1) {
    *done = 0;
    __threadfence_system();
    *(volatile unsigned long long*)peer_flag = (unsigned long long)seq;
  }
}
// The peer's packed face into the ghost plane x = 0, each value checked against the peer's grid
// (`peer_rank`'s values, see `init`) plus `seq`.
__device__ void unpack_body(double* grid, const double* src, double seq, int peer_rank, unsigned int* bad) {
  int i = blockIdx.x * THREADS + threadIdx.x;
  double v = __ldcg(src + i);
  double want = (double)peer_rank * 1e9 + (double)at(i, N - 2) + seq;
  if (v != want) atomicAdd(bad, 1u);
  grid[at(i, 0)] = v;
}
__global__ void unpack(double* grid, const double* src, double seq, int peer_rank, unsigned int* bad) {
  unpack_body(grid, src, seq, peer_rank, bad);
}
// Thread 0 of each block spins until the own flag reaches `seq` (at most 1 s; a give-up counts
// in `lost`), then the block unpacks.
__global__ void unpack_wait(double* grid, const double* src, double seq, int peer_rank, unsigned int* bad,
                            const unsigned long long* flag, unsigned int* lost) {
  if (threadIdx.x == 0) {
    unsigned long long t0 = gtime();
    while (*(const volatile unsigned long long*)flag < (unsigned long long)seq) {
      if (gtime() - t0 > 1000000000ull) { atomicAdd(lost, 1u); break; }
    }
    __threadfence();
  }
  __syncthreads();
  unpack_body(grid, src, seq, peer_rank, bad);
}
// One thread: the peer's flag set to `seq` once what came before on the stream has run.
__global__ void flag_signal(unsigned long long* peer_flag, unsigned long long seq) {
  __threadfence_system();
  *(volatile unsigned long long*)peer_flag = seq;
}
// One thread: spins until the own flag reaches `seq` (at most 1 s; a give-up counts in `lost`).
__global__ void flag_wait(const unsigned long long* flag, unsigned long long seq, unsigned int* lost) {
  unsigned long long t0 = gtime();
  while (*(const volatile unsigned long long*)flag < seq) {
    if (gtime() - t0 > 1000000000ull) { atomicAdd(lost, 1u); break; }
  }
  __threadfence();
}
__global__ void init(double* grid, int r) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (size_t)N * N * N) grid[i] = (double)r * 1e9 + (double)i;
}

struct Shared { volatile long go[2]; volatile long note[2]; };

template <typename T> static T* open_peer(T* mine, int peer, int tag) {
  cudaIpcMemHandle_t h, ph; CK(cudaIpcGetMemHandle(&h, mine));
  MPI_Sendrecv(&h, sizeof h, MPI_BYTE, peer, tag, &ph, sizeof ph, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  T* p; CK(cudaIpcOpenMemHandle((void**)&p, ph, cudaIpcMemLazyEnablePeerAccess));
  return p;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = rank ^ 1, ndev; CK(cudaGetDeviceCount(&ndev)); CK(cudaSetDevice(rank % ndev));
  const int rounds = argc > 1 ? atoi(argv[1]) : 2000, sets = argc > 2 ? atoi(argv[2]) : 2;
  char name[64]; snprintf(name, sizeof name, "/chan-%d", (int)getppid());
  int fd = rank == 0 ? shm_open(name, O_CREAT | O_RDWR, 0600) : -1;
  if (rank == 0 && ftruncate(fd, 4096)) return 1;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) fd = shm_open(name, O_RDWR, 0600);
  Shared* sh = (Shared*)mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  MPI_Barrier(MPI_COMM_WORLD); if (rank == 0) shm_unlink(name);
  if (rank == 0) { sh->go[0] = sh->go[1] = 0; sh->note[0] = sh->note[1] = 0; }
  MPI_Barrier(MPI_COMM_WORLD);

  double* grid; CK(cudaMalloc(&grid, sizeof(double) * N * N * N));
  init<<<(N * N * N + 255) / 256, 256>>>(grid, rank);
  double* staging; CK(cudaMalloc(&staging, 2 * FACE * sizeof(double)));
  unsigned long long* flag; CK(cudaMalloc(&flag, 2 << 20)); CK(cudaMemset(flag, 0, 2 << 20));
  unsigned int* done; CK(cudaMalloc(&done, 64)); CK(cudaMemset(done, 0, 64));
  unsigned int* bad; CK(cudaMallocManaged(&bad, 2 * sizeof(unsigned int))); bad[0] = bad[1] = 0;
  unsigned int* lost = bad + 1;
  double *csend, *crecv; CK(cudaMalloc(&csend, FACE * sizeof(double))); CK(cudaMalloc(&crecv, FACE * sizeof(double)));
  double* peer_staging = open_peer(staging, peer, 1);
  unsigned long long* peer_flag = open_peer(flag, peer, 2);
  cudaEvent_t ev; CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess));
  cudaIpcEventHandle_t eh, peh; CK(cudaIpcGetEventHandle(&eh, ev));
  MPI_Sendrecv(&eh, sizeof eh, MPI_BYTE, peer, 3, &peh, sizeof peh, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  cudaEvent_t pev; CK(cudaIpcOpenEventHandle(&pev, peh));

  // The channel as one graph: pack_signal, then unpack_wait (an edge, so that the spinning
  // blocks never keep the pack from the GPU); arguments set per launch.
  cudaGraphExec_t gx; cudaGraphNode_t pn, un;
  double seq_arg = 0; const double* src_arg = peer_staging; double* dst_arg = staging;
  int peer_rank = peer;
  void* pargs[] = {&grid, &dst_arg, &seq_arg, &done, &peer_flag};
  void* uargs[] = {&grid, &src_arg, &seq_arg, &peer_rank, &bad, &flag, &lost};
  cudaKernelNodeParams pk = {}, uk = {};
  pk.func = (void*)pack_signal; pk.gridDim = dim3(BLOCKS); pk.blockDim = dim3(THREADS); pk.kernelParams = pargs;
  uk.func = (void*)unpack_wait; uk.gridDim = dim3(BLOCKS); uk.blockDim = dim3(THREADS); uk.kernelParams = uargs;
  {
    cudaGraph_t g; CK(cudaGraphCreate(&g, 0));
    CK(cudaGraphAddKernelNode(&pn, g, nullptr, 0, &pk));
    CK(cudaGraphAddKernelNode(&un, g, &pn, 1, &uk));
    CK(cudaGraphInstantiate(&gx, g, 0));
  }
  // The channel as a line of four nodes with plain edges: the plan's pack and unpack as they
  // are (two arguments), a one-thread signal after the pack and a one-thread wait before the
  // unpack.
  cudaGraphExec_t gx4; cudaGraphNode_t n4[4];
  unsigned long long useq_arg = 0;
  void* a0[] = {&grid, &dst_arg, &seq_arg};
  void* a1[] = {&peer_flag, &useq_arg};
  void* a2[] = {&flag, &useq_arg, &lost};
  void* a3[] = {&grid, &src_arg, &seq_arg, &peer_rank, &bad};
  cudaKernelNodeParams k4[4] = {};
  k4[0].func = (void*)pack; k4[0].gridDim = dim3(BLOCKS); k4[0].blockDim = dim3(THREADS); k4[0].kernelParams = a0;
  k4[1].func = (void*)flag_signal; k4[1].gridDim = dim3(1); k4[1].blockDim = dim3(1); k4[1].kernelParams = a1;
  k4[2].func = (void*)flag_wait; k4[2].gridDim = dim3(1); k4[2].blockDim = dim3(1); k4[2].kernelParams = a2;
  k4[3].func = (void*)unpack; k4[3].gridDim = dim3(BLOCKS); k4[3].blockDim = dim3(THREADS); k4[3].kernelParams = a3;
  {
    cudaGraph_t g; CK(cudaGraphCreate(&g, 0));
    for (int i = 0; i < 4; i++) CK(cudaGraphAddKernelNode(&n4[i], g, i ? &n4[i - 1] : nullptr, i ? 1 : 0, &k4[i]));
    CK(cudaGraphInstantiate(&gx4, g, 0));
  }
  CK(cudaDeviceSynchronize());
  MPI_Barrier(MPI_COMM_WORLD);

  const char* names[] = {"contiguous (MPI_Sendrecv, CUDA-aware)", "loan (pack, IPC event, note, unpack)",
                         "channel (two launches, GPU flag, note)", "channel graph (one launch, GPU flag, note)",
                         "channel line (pack, signal, wait, unpack)"};
  const int ways = 5;
  long round_no = 0;
  unsigned long long seq = 0;   // exchanges through staging, both ranks alike
  for (int set = 0; set < sets; set++) {
    for (int way = 0; way < ways; way++) {
      std::vector<double> t;
      for (int r = 0; r < rounds; r++) {
        round_no++;
        sh->go[rank] = round_no; while (sh->go[peer] < round_no) {}
        double t0 = now_us();
        if (way == 0) {
          MPI_Sendrecv(csend, FACE, MPI_DOUBLE, peer, 9, crecv, FACE, MPI_DOUBLE, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          seq++;
          double s = (double)seq;
          double* mine = staging + (seq & 1) * FACE;
          const double* theirs = peer_staging + (seq & 1) * FACE;
          if (way == 1) {
            pack<<<BLOCKS, THREADS>>>(grid, mine, s);
            CK(cudaEventRecord(ev, 0));
            __sync_synchronize(); sh->note[rank] = round_no;
            while (sh->note[peer] < round_no) {}
            CK(cudaStreamWaitEvent(0, pev, 0));
            unpack<<<BLOCKS, THREADS>>>(grid, theirs, s, peer, bad);
          } else if (way == 2) {
            pack_signal<<<BLOCKS, THREADS>>>(grid, mine, s, done, peer_flag);
            unpack_wait<<<BLOCKS, THREADS>>>(grid, theirs, s, peer, bad, flag, lost);
            __sync_synchronize(); sh->note[rank] = round_no;
            while (sh->note[peer] < round_no) {}
          } else if (way == 4) {
            seq_arg = s; dst_arg = mine; src_arg = theirs; useq_arg = seq;
            for (int i = 0; i < 4; i++) CK(cudaGraphExecKernelNodeSetParams(gx4, n4[i], &k4[i]));
            CK(cudaGraphLaunch(gx4, 0));
            __sync_synchronize(); sh->note[rank] = round_no;
            while (sh->note[peer] < round_no) {}
          } else {
            seq_arg = s; dst_arg = mine; src_arg = theirs;
            CK(cudaGraphExecKernelNodeSetParams(gx, pn, &pk));
            CK(cudaGraphExecKernelNodeSetParams(gx, un, &uk));
            CK(cudaGraphLaunch(gx, 0));
            __sync_synchronize(); sh->note[rank] = round_no;
            while (sh->note[peer] < round_no) {}
          }
          CK(cudaStreamSynchronize(0));
        }
        t.push_back(now_us() - t0);
      }
      std::sort(t.begin(), t.end());
      for (int r = 0; r < 2; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (r == rank) {
          printf("set %d r%d %-44s p10 %6.2f  p50 %6.2f  p90 %6.2f us  bad %u lost %u\n", set, rank, names[way],
                 t[t.size() / 10], t[t.size() / 2], t[t.size() * 9 / 10], bad[0], *lost);
          fflush(stdout);
        }
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CK(cudaIpcCloseMemHandle(peer_staging));
  CK(cudaIpcCloseMemHandle(peer_flag));
  MPI_Finalize();
  return 0;
}
