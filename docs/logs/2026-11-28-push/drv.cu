/* drv.cu: what a lent face's driver calls cost in one process, with and without MPI around them.
 * One rank, one GPU: a one-node graph of a small kernel launched, an event recorded after it,
 * the stream made to wait for that event, the stream synchronized; each call timed alone, 20,000
 * times after 2,000, p50 in us. With "mpi", MPI_Init first and an MPI_Iprobe between the rounds
 * (the MPI's progress between the driver's calls, as in a program's loop).
 * Build: nvcc -O2 -arch=sm_90 -I$MPI/include -L$MPI/lib -lmpi drv.cu -o drv */
#include <mpi.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__global__ void k(double *p) { p[blockIdx.x * blockDim.x + threadIdx.x] += 1.0; }
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

int main(int argc, char **argv) {
  int mpi = argc > 1 && !strcmp(argv[1], "mpi");
  if (mpi) MPI_Init(&argc, &argv);
  double *p;
  cudaMalloc(&p, 256 * 256 * sizeof(double));
  cudaGraph_t g; cudaGraphExec_t ge;
  cudaStream_t s = 0;
  cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeGlobal);
  k<<<256, 256, 0, cudaStreamPerThread>>>(p);
  cudaStreamEndCapture(cudaStreamPerThread, &g);
  cudaGraphInstantiate(&ge, g, 0);
  cudaEvent_t ev;
  cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming);
  const int warm = 2000, reps = 20000;
  double *t[4];
  for (int i = 0; i < 4; i++) t[i] = (double *)malloc(sizeof(double) * reps);
  for (int it = 0; it < warm + reps; it++) {
    if (mpi) { int flag; MPI_Iprobe(MPI_ANY_SOURCE, 99, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE); }
    double a = now(); cudaGraphLaunch(ge, s);
    double b = now(); cudaEventRecord(ev, s);
    double c = now(); cudaStreamWaitEvent(s, ev, 0);
    double d = now(); cudaStreamSynchronize(s);
    double e = now();
    if (it >= warm) { int i = it - warm; t[0][i] = b - a; t[1][i] = c - b; t[2][i] = d - c; t[3][i] = e - d; }
  }
  const char *names[4] = {"graph launch", "event record", "stream waits event", "synchronize"};
  printf("%-10s", mpi ? "MPI" : "no MPI");
  for (int i = 0; i < 4; i++) { qsort(t[i], reps, sizeof(double), cmp); printf("  %s %.2f", names[i], t[i][reps / 2]); }
  printf("\n");
  if (mpi) MPI_Finalize();
  return 0;
}
