/* interpose_bench: an ordinary MPI program timing derived datatypes on device buffers, the same
 * with and without the interposer (2 ranks, a CUDA-aware MPI for the plain run):
 *   - MPI_Pack of 2-D and 3-D objects with blocks of 1 to 512 bytes (TEMPI's shapes);
 *   - MPI_Send/MPI_Recv ping-pong of the same objects (half the round trip), and the same with
 *     each receive posted only once MPI_Probe has seen its message (MPI_Probe/MPI_Recv);
 *   - MPI_Sendrecv of faces of a 256^3 f64 grid (MPI_Type_create_subarray), beside the same
 *     bytes sent contiguous (MPI_BYTE) from device memory;
 *   - a whole halo exchange of that grid as codes write it: the six faces (x, y, z, both
 *     sides) with MPI_Irecv, MPI_Isend and one MPI_Waitall, the peer rank the neighbour on
 *     every side, beside six contiguous messages of the same sizes (with --host-mpi the four
 *     x and y faces only), and the same exchange through persistent requests (MPI_Recv_init
 *     and MPI_Send_init once, then MPI_Startall and MPI_Waitall each time).
 * Rank 0 prints `bench KIND NAME BYTES MEDIAN_US ITERATIONS MEAN_US P90_US` lines (the mean and
 * the 90th percentile show the slow runs a median hides).
 *
 *   mpicc -O2 -DUSE_CUDA -o interpose_bench interpose_bench.c -lcudart
 *
 * Flags: --budget SECONDS   time per case after the warm-up runs (default 1; at least 3 timed runs
 *                           unless one run alone exceeds the budget)
 *        --grid N           the halo grid's edge (default 256)
 *        --host-mpi         the MPI cannot read device memory: leave out the contiguous
 *                           device-buffer baselines (run it preloaded only)
 *        --only TEXT        only the cases whose `KIND NAME` contains TEXT (a profile of one
 *                           exchange, say)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>

static int rank, nranks;
static double budget = 1.0;
static const char *only = NULL;

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Runs `op` (which returns its own measured time in seconds on rank 0) until the budget is
 * spent; every rank runs the same number of times (rank 0 decides). */
typedef double (*op_fn)(void *ctx);
static void measure(const char *kind, const char *name, long bytes, op_fn op, void *ctx) {
  if (only) {
    char full[160];
    snprintf(full, sizeof full, "%s %s", kind, name);
    if (!strstr(full, only)) return;
  }
  double t[1000];
  int n = 0;
  /* Warm-up: kernels compiled, staging allocated, and with an interposer's direct path its
   * greetings read and the peers' staging mapped (the first messages go by bytes): one run,
   * and four more where one is short against the budget (rank 0 decides for all). */
  int more = op(ctx) < budget / 20;
  MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (int w = 0; more && w < 4; w++) op(ctx);
  double spent = 0;
  for (;;) {
    int go = 1;
    if (rank == 0) go = n < 1000 && (n < 3 ? spent < budget * 4 || n == 0 : spent < budget);
    MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!go) break;
    double dt = op(ctx);
    t[n++] = dt;
    spent += dt;
  }
  if (rank == 0) {
    qsort(t, (size_t)n, sizeof t[0], cmp);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i];
    printf("bench %s %s %ld %.3f %d %.3f %.3f\n", kind, name, bytes, t[n / 2] * 1e6, n, sum / n * 1e6,
           t[(n * 9) / 10] * 1e6);
    fflush(stdout);
  }
}

struct pack_ctx { void *src, *dst; MPI_Datatype t; int size; };
static double pack_op(void *p) {
  struct pack_ctx *c = p;
  int pos = 0;
  double t0 = MPI_Wtime();
  MPI_Pack(c->src, 1, c->t, c->dst, c->size, &pos, MPI_COMM_WORLD);
  cudaDeviceSynchronize();
  return MPI_Wtime() - t0;
}

/* With `probe`, each receive is posted only once MPI_Probe has seen its message. */
struct pp_ctx { void *buf; MPI_Datatype t; int count; int probe; };
static void pp_recv(struct pp_ctx *c, int from) {
  if (c->probe) MPI_Probe(from, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Recv(c->buf, c->count, c->t, from, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}
static double pingpong_op(void *p) {
  struct pp_ctx *c = p;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  if (rank == 0) {
    MPI_Send(c->buf, c->count, c->t, 1, 7, MPI_COMM_WORLD);
    pp_recv(c, 1);
  } else if (rank == 1) {
    pp_recv(c, 0);
    MPI_Send(c->buf, c->count, c->t, 0, 7, MPI_COMM_WORLD);
  }
  return (MPI_Wtime() - t0) / 2;
}

struct sr_ctx { void *buf, *rbuf; MPI_Datatype st, rt; int count; };
static double sendrecv_op(void *p) {
  struct sr_ctx *c = p;
  int peer = rank ^ 1;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  MPI_Sendrecv(c->buf, c->count, c->st, peer, 9, c->rbuf, c->count, c->rt, peer, 9, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  return MPI_Wtime() - t0;
}

/* A halo exchange: `n` receives and `n` sends posted, then one MPI_Waitall. */
struct halo_ctx { void *sbuf[6], *rbuf[6]; MPI_Datatype st[6], rt[6]; int count[6], stag[6], rtag[6], n;
                  MPI_Request preq[12]; };
static double halo_op(void *p) {
  struct halo_ctx *c = p;
  int peer = rank ^ 1;
  MPI_Request req[12];
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < c->n; i++)
    MPI_Irecv(c->rbuf[i], c->count[i], c->rt[i], peer, c->rtag[i], MPI_COMM_WORLD, &req[i]);
  for (int i = 0; i < c->n; i++)
    MPI_Isend(c->sbuf[i], c->count[i], c->st[i], peer, c->stag[i], MPI_COMM_WORLD, &req[c->n + i]);
  MPI_Waitall(2 * c->n, req, MPI_STATUSES_IGNORE);
  return MPI_Wtime() - t0;
}

/* The same exchange through persistent requests made once (halo_init): one MPI_Startall of the
 * receives and sends, then one MPI_Waitall. */
static void halo_init(struct halo_ctx *c) {
  int peer = rank ^ 1;
  for (int i = 0; i < c->n; i++)
    MPI_Recv_init(c->rbuf[i], c->count[i], c->rt[i], peer, c->rtag[i], MPI_COMM_WORLD, &c->preq[i]);
  for (int i = 0; i < c->n; i++)
    MPI_Send_init(c->sbuf[i], c->count[i], c->st[i], peer, c->stag[i], MPI_COMM_WORLD, &c->preq[c->n + i]);
}
static double halo_persistent_op(void *p) {
  struct halo_ctx *c = p;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  MPI_Startall(2 * c->n, c->preq);
  MPI_Waitall(2 * c->n, c->preq, MPI_STATUSES_IGNORE);
  return MPI_Wtime() - t0;
}
static void halo_free(struct halo_ctx *c) {
  for (int i = 0; i < 2 * c->n; i++) MPI_Request_free(&c->preq[i]);
}

static void *dmalloc(size_t n) {
  void *p = NULL;
  if (cudaMalloc(&p, n) != cudaSuccess) { fprintf(stderr, "cudaMalloc(%zu) failed\n", n); MPI_Abort(MPI_COMM_WORLD, 2); }
  cudaMemset(p, rank + 1, n);
  return p;
}

int main(int argc, char **argv) {
  int grid = 256, host_mpi = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--host-mpi") == 0) host_mpi = 1;
    else if (i + 1 < argc && strcmp(argv[i], "--budget") == 0) budget = atof(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--grid") == 0) grid = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--only") == 0) only = argv[++i];
  }
  {
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int ndev = 0;
    cudaGetDeviceCount(&ndev);
    if (ndev > 0) cudaSetDevice((lr ? atoi(lr) : 0) % ndev);
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (nranks != 2) {
    if (rank == 0) fprintf(stderr, "interpose_bench runs on 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  const long total = 256 * 1024; /* packed bytes of each object */
  const int bls[4] = {1, 8, 64, 512};
  for (int dims = 2; dims <= 3; dims++) {
    for (int i = 0; i < 4; i++) {
      int bl = bls[i];
      MPI_Datatype t, row;
      if (dims == 2) {
        MPI_Type_vector((int)(total / bl), bl, 2 * bl, MPI_BYTE, &t);
      } else {
        int rows = 64, planes = (int)(total / (64L * bl));
        MPI_Type_vector(rows, bl, 2 * bl, MPI_BYTE, &row);
        MPI_Type_create_hvector(planes, 1, (MPI_Aint)rows * 2 * bl + 256, row, &t);
        MPI_Type_free(&row);
      }
      MPI_Type_commit(&t);
      MPI_Aint lb, ext;
      MPI_Type_get_extent(t, &lb, &ext);
      char name[64];
      snprintf(name, sizeof name, "%dd-block-%d", dims, bl);
      struct pack_ctx pc = {dmalloc((size_t)ext), dmalloc((size_t)total), t, (int)total};
      measure("MPI_Pack", name, total, pack_op, &pc);
      struct pp_ctx pp = {pc.src, t, 1, 0}, probed = {pc.src, t, 1, 1};
      measure("MPI_Send/MPI_Recv", name, total, pingpong_op, &pp);
      measure("MPI_Probe/MPI_Recv", name, total, pingpong_op, &probed);
      cudaFree(pc.src);
      cudaFree(pc.dst);
      MPI_Type_free(&t);
    }
  }
  /* Halo faces of a grid^3 f64 block: x (8-byte blocks), y (rows), against contiguous bytes. */
  {
    int n[3] = {grid, grid, grid};
    size_t bytes = (size_t)grid * grid * grid * sizeof(double);
    void *g = dmalloc(bytes);
    const char *names[2] = {"face-x", "face-y"};
    for (int f = 0; f < 2; f++) {
      int sub[3] = {grid, grid, grid}, s0[3] = {0, 0, 0}, s1[3] = {0, 0, 0};
      int d = f == 0 ? 2 : 1;
      sub[d] = 1;
      s0[d] = 1;
      s1[d] = grid - 1;
      MPI_Datatype face, ghost;
      MPI_Type_create_subarray(3, n, sub, s0, MPI_ORDER_C, MPI_DOUBLE, &face);
      MPI_Type_create_subarray(3, n, sub, s1, MPI_ORDER_C, MPI_DOUBLE, &ghost);
      MPI_Type_commit(&face);
      MPI_Type_commit(&ghost);
      int fsize;
      MPI_Type_size(face, &fsize);
      struct sr_ctx sr = {g, g, face, ghost, 1};
      measure("MPI_Sendrecv", names[f], fsize, sendrecv_op, &sr);
      if (!host_mpi) {
        void *a = dmalloc((size_t)fsize), *b = dmalloc((size_t)fsize);
        struct sr_ctx flat = {a, b, MPI_BYTE, MPI_BYTE, fsize};
        char cname[64];
        snprintf(cname, sizeof cname, "%s-contiguous", names[f]);
        measure("MPI_Sendrecv", cname, fsize, sendrecv_op, &flat);
        cudaFree(a);
        cudaFree(b);
      }
      MPI_Type_free(&face);
      MPI_Type_free(&ghost);
    }
    /* The whole exchange: face i (dimension i / 2, low side for even i) goes to the peer's
     * opposite ghost (tag 20 + i is received as 20 + (i ^ 1)). The z faces are contiguous and
     * pass through to the MPI, so an MPI that cannot read device memory gets the x and y
     * faces only ("halo-xy"). */
    struct halo_ctx h = {.n = 0}, flat = {.n = 0};
    long hbytes = 0;
    for (int i = 0; i < 6; i++) {
      int d = i / 2, side = i % 2;
      if (host_mpi && d == 0) continue;
      int k = h.n++;
      flat.n++;
      int sub[3] = {grid, grid, grid}, fs[3] = {0, 0, 0}, gs[3] = {0, 0, 0};
      sub[d] = 1;
      fs[d] = side == 0 ? 1 : grid - 2;
      gs[d] = side == 0 ? 0 : grid - 1;
      MPI_Type_create_subarray(3, n, sub, fs, MPI_ORDER_C, MPI_DOUBLE, &h.st[k]);
      MPI_Type_create_subarray(3, n, sub, gs, MPI_ORDER_C, MPI_DOUBLE, &h.rt[k]);
      MPI_Type_commit(&h.st[k]);
      MPI_Type_commit(&h.rt[k]);
      h.sbuf[k] = h.rbuf[k] = g;
      h.count[k] = 1;
      h.stag[k] = flat.stag[k] = 20 + i;
      h.rtag[k] = flat.rtag[k] = 20 + (i ^ 1);
      int fsize;
      MPI_Type_size(h.st[k], &fsize);
      hbytes += fsize;
      flat.st[k] = flat.rt[k] = MPI_BYTE;
      flat.count[k] = fsize;
    }
    measure("MPI_Isend/MPI_Irecv/MPI_Waitall", host_mpi ? "halo-xy" : "halo-3d", hbytes, halo_op, &h);
    halo_init(&h);
    measure("MPI_Startall/MPI_Waitall", host_mpi ? "halo-xy" : "halo-3d", hbytes, halo_persistent_op, &h);
    halo_free(&h);
    if (!host_mpi) {
      for (int i = 0; i < 6; i++) {
        flat.sbuf[i] = dmalloc((size_t)flat.count[i]);
        flat.rbuf[i] = dmalloc((size_t)flat.count[i]);
      }
      measure("MPI_Isend/MPI_Irecv/MPI_Waitall", "halo-3d-contiguous", hbytes, halo_op, &flat);
      halo_init(&flat);
      measure("MPI_Startall/MPI_Waitall", "halo-3d-contiguous", hbytes, halo_persistent_op, &flat);
      halo_free(&flat);
      for (int i = 0; i < 6; i++) {
        cudaFree(flat.sbuf[i]);
        cudaFree(flat.rbuf[i]);
      }
    }
    for (int i = 0; i < h.n; i++) {
      MPI_Type_free(&h.st[i]);
      MPI_Type_free(&h.rt[i]);
    }
    cudaFree(g);
  }
  MPI_Finalize();
  return 0;
}
