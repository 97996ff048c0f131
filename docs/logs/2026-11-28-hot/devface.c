/* devface: MPI_Sendrecv of the x face of a 256^3 f64 grid on device memory (the subarray
 * {256,256,1} at z = 1 sent, at z = 0 received: 65,536 doubles 2 KiB apart), REPS times, 2
 * ranks with a GPU each; rank 0 prints the p10/p50/p90 of each call's host time and checks
 * the received face.  mpicc -O2 -DUSE_CUDA -o devface devface.c -lcudart
 * Usage: devface [REPS] [contig]   (contig: the same bytes contiguous, MPI_BYTE) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, ndev; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  cudaGetDeviceCount(&ndev); cudaSetDevice(rank % ndev);
  const int n = 256, reps = argc > 1 ? atoi(argv[1]) : 20000, contig = argc > 2 && !strcmp(argv[2], "contig");
  int sizes[3] = {n, n, n}, sub[3] = {n, n, 1}, st[3] = {0, 0, 1}, rt[3] = {0, 0, 0};
  MPI_Datatype s, r;
  MPI_Type_create_subarray(3, sizes, sub, st, MPI_ORDER_C, MPI_DOUBLE, &s); MPI_Type_commit(&s);
  MPI_Type_create_subarray(3, sizes, sub, rt, MPI_ORDER_C, MPI_DOUBLE, &r); MPI_Type_commit(&r);
  size_t cells = (size_t)n * n * n;
  double *h = malloc(sizeof(double) * cells), *g, *a, *b;
  for (size_t i = 0; i < cells; i++) h[i] = rank * 1e8 + (double)i;
  cudaMalloc((void **)&g, sizeof(double) * cells);
  cudaMemcpy(g, h, sizeof(double) * cells, cudaMemcpyHostToDevice);
  cudaMalloc((void **)&a, (size_t)n * n * 8); cudaMalloc((void **)&b, (size_t)n * n * 8);
  double *t = malloc(sizeof(double) * reps);
  int peer = 1 - rank;
  for (int i = 0; i < reps; i++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (contig)
      MPI_Sendrecv(a, n * n * 8, MPI_BYTE, peer, 7, b, n * n * 8, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    else
      MPI_Sendrecv(g, 1, s, peer, 7, g, 1, r, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    t[i] = MPI_Wtime() - t0;
  }
  int bad = 0;
  if (!contig) {
    cudaMemcpy(h, g, sizeof(double) * cells, cudaMemcpyDeviceToHost);
    for (size_t k = 0; k < (size_t)n * n; k++)
      if (h[k * n] != peer * 1e8 + (double)(k * n + 1)) bad++;
  }
  qsort(t, reps, sizeof(double), cmp);
  if (rank == 0)
    printf("devface %s %d reps: p10 %.2f p50 %.2f p90 %.2f us; %d wrong\n", contig ? "contiguous" : "x-face",
           reps, t[reps / 10] * 1e6, t[reps / 2] * 1e6, t[reps * 9 / 10] * 1e6, bad);
  MPI_Finalize();
  return 0;
}
