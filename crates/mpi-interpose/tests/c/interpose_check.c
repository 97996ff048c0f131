/* interpose_check: an ordinary MPI program (nothing in it knows of an interposer) that moves
 * derived datatypes with every point-to-point form the interposer takes, and checks each result
 * byte for byte against what the profiling interface's own MPI_Pack/MPI_Unpack make of host
 * copies. Rank 0 prints one `sum NAME ...` line per check (checksums of every rank's result,
 * identical with and without the interposer) and ends with `mpi-tests: N passed, M failed`.
 *
 *   mpicc -O2 -o interpose_check interpose_check.c
 *   mpicc -O2 -DUSE_CUDA -o interpose_check_cuda interpose_check.c -lcudart   (device buffers)
 *
 * Flags: --host-mpi   the MPI cannot read device memory: checks whose types or buffers the
 *                     interposer leaves to the MPI use host buffers (device builds only).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef USE_CUDA
#include <cuda_runtime.h>
#endif

static int rank, nranks, host_mpi, passed, failed;

/* ---- buffers: "device" buffers are device memory in a USE_CUDA build ---- */
static void *dev_alloc(size_t n, int on_device) {
#ifdef USE_CUDA
  if (on_device) {
    void *p = NULL;
    if (cudaMalloc(&p, n ? n : 1) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
    return p;
  }
#endif
  (void)on_device;
  return malloc(n ? n : 1);
}
static void dev_free(void *p, int on_device) {
#ifdef USE_CUDA
  if (on_device) { cudaFree(p); return; }
#endif
  (void)on_device;
  free(p);
}
static void upload(void *dst, const void *src, size_t n, int on_device) {
#ifdef USE_CUDA
  if (on_device) { cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice); return; }
#endif
  (void)on_device;
  memcpy(dst, src, n);
}
static void download(void *dst, const void *src, size_t n, int on_device) {
#ifdef USE_CUDA
  if (on_device) { cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost); return; }
#endif
  (void)on_device;
  memcpy(dst, src, n);
}
/* Where buffers of checks the interposer takes live. */
static int dev(void) {
#ifdef USE_CUDA
  return 1;
#else
  return 0;
#endif
}
/* Where buffers of checks the MPI itself must handle live. */
static int dev_passthrough(void) { return dev() && !host_mpi; }

/* ---- patterns and checksums ---- */
static uint8_t pat(int r, int t, size_t i) {
  uint64_t x = (uint64_t)(r + 7) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(t + 3) * 0xC2B2AE3D27D4EB4Full ^
               (uint64_t)i * 0x165667B19E3779F9ull;
  x ^= x >> 29; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 32;
  return (uint8_t)x;
}
static void fill(uint8_t *b, size_t n, int r, int t) { for (size_t i = 0; i < n; i++) b[i] = pat(r, t, i); }
static uint64_t fnv(const uint8_t *b, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
  return h;
}

/* Bytes a buffer of `count` elements of `t` needs from its address (layouts start at or after it). */
static size_t span(MPI_Datatype t, int count) {
  MPI_Aint lb, ext, tlb, text;
  MPI_Type_get_extent(t, &lb, &ext);
  MPI_Type_get_true_extent(t, &tlb, &text);
  if (count == 0) return 0;
  return (size_t)(tlb + (MPI_Aint)(count - 1) * ext + text);
}

/* expected: what receiving `scount` of `st` from a sender whose buffer is pattern (sender, test)
 * into `rcount` of `rt` over a buffer holding `recv_init` gives, by PMPI_Pack/PMPI_Unpack. */
static void expect(uint8_t *expected, const uint8_t *recv_init, size_t rbytes, int sender, int test,
                   MPI_Datatype st, int scount, MPI_Datatype rt, int rcount_used) {
  size_t sbytes = span(st, scount);
  uint8_t *sbuf = malloc(sbytes + 1);
  fill(sbuf, sbytes, sender, test);
  int psize = 0, pos = 0;
  PMPI_Pack_size(scount, st, MPI_COMM_WORLD, &psize);
  uint8_t *packed = malloc((size_t)psize + 1);
  PMPI_Pack(sbuf, scount, st, packed, psize, &pos, MPI_COMM_WORLD);
  memcpy(expected, recv_init, rbytes);
  int upos = 0;
  PMPI_Unpack(packed, pos, &upos, expected, rcount_used, rt, MPI_COMM_WORLD);
  free(sbuf);
  free(packed);
}

static void report(const char *name, int ok, uint64_t sum) {
  uint64_t mine[2] = {(uint64_t)ok, sum};
  uint64_t *all = rank == 0 ? malloc(sizeof mine * (size_t)nranks) : NULL;
  MPI_Gather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    int all_ok = 1;
    printf("sum %s", name);
    for (int r = 0; r < nranks; r++) {
      printf(" %016llx", (unsigned long long)all[2 * r + 1]);
      all_ok &= all[2 * r] != 0;
    }
    printf("\n");
    if (all_ok) passed++; else { failed++; printf("FAILED %s\n", name); }
    fflush(stdout);
    free(all);
  }
}

/* ISEND_RECV and SEND_IRECV pair a blocking call with a non-blocking one: with the direct path
 * a blocking receive posts no real receive, and a blocking send to it sends nothing through
 * the MPI; against a non-blocking peer each must still take its message of 0 bytes. PROBE_RECV
 * probes for the message before receiving it (the receive is posted only once the message has
 * come, so its send cannot have waited for it): the probe must see the message's size. */
enum mode { SENDRECV, SEND_RECV, WAITALL, TEST, TESTALL, WAITANY, WAITSOME, TESTSOME, ISEND_RECV,
            SEND_IRECV, PROBE_RECV, NMODES };
static const char *mode_name[NMODES] = {"sendrecv", "send-recv", "waitall", "test",
                                        "testall", "waitany", "waitsome", "testsome",
                                        "isend-recv", "send-irecv", "probe-recv"};

/* One ring exchange: send `scount` of `st` to the next rank, receive `rcount` of `rt` from the
 * previous one (`sent` elements arrive), by `mode`; buffers on the device where asked. */
static void exchange(const char *name, int test, enum mode mode, MPI_Datatype st, int scount,
                     MPI_Datatype rt, int rcount, int sent, int send_dev, int recv_dev) {
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  size_t sbytes = span(st, scount), rbytes = span(rt, rcount);
  uint8_t *hs = malloc(sbytes + 1), *hr = malloc(rbytes + 1), *want = malloc(rbytes + 1),
          *got = malloc(rbytes + 1);
  fill(hs, sbytes, rank, test);
  fill(hr, rbytes, 1000 + rank, test);
  void *s = dev_alloc(sbytes, send_dev), *r = dev_alloc(rbytes, recv_dev);
  upload(s, hs, sbytes, send_dev);
  upload(r, hr, rbytes, recv_dev);
  MPI_Status stat[2];
  MPI_Request req[2];
  memset(stat, 0, sizeof stat);
  int tag = 100 + test;
  /* PROBE_RECV: the size the probe saw, in bytes (-1 where no probe ran). */
  int probed = -1;
  switch (mode) {
  case SENDRECV:
    MPI_Sendrecv(s, scount, st, next, tag, r, rcount, rt, prev, tag, MPI_COMM_WORLD, &stat[0]);
    break;
  case SEND_RECV:
    if (nranks == 1) {
      MPI_Isend(s, scount, st, next, tag, MPI_COMM_WORLD, &req[1]);
      MPI_Recv(r, rcount, rt, prev, tag, MPI_COMM_WORLD, &stat[0]);
      MPI_Wait(&req[1], MPI_STATUS_IGNORE);
    } else if (rank % 2 == 0) {
      MPI_Send(s, scount, st, next, tag, MPI_COMM_WORLD);
      MPI_Recv(r, rcount, rt, prev, tag, MPI_COMM_WORLD, &stat[0]);
    } else {
      MPI_Recv(r, rcount, rt, prev, tag, MPI_COMM_WORLD, &stat[0]);
      MPI_Send(s, scount, st, next, tag, MPI_COMM_WORLD);
    }
    break;
  case ISEND_RECV:
    MPI_Isend(s, scount, st, next, tag, MPI_COMM_WORLD, &req[1]);
    MPI_Recv(r, rcount, rt, prev, tag, MPI_COMM_WORLD, &stat[0]);
    MPI_Wait(&req[1], MPI_STATUS_IGNORE);
    break;
  case SEND_IRECV:
    MPI_Irecv(r, rcount, rt, prev, tag, MPI_COMM_WORLD, &req[0]);
    MPI_Send(s, scount, st, next, tag, MPI_COMM_WORLD);
    MPI_Wait(&req[0], &stat[0]);
    break;
  case PROBE_RECV: {
    MPI_Status seen;
    if (nranks == 1 || rank % 2 == 1) {
      if (nranks == 1) MPI_Isend(s, scount, st, next, tag, MPI_COMM_WORLD, &req[1]);
      MPI_Probe(prev, tag, MPI_COMM_WORLD, &seen);
      MPI_Get_count(&seen, MPI_BYTE, &probed);
      MPI_Recv(r, rcount, rt, prev, tag, MPI_COMM_WORLD, &stat[0]);
      if (nranks == 1) MPI_Wait(&req[1], MPI_STATUS_IGNORE);
      else MPI_Send(s, scount, st, next, tag, MPI_COMM_WORLD);
    } else {
      MPI_Send(s, scount, st, next, tag, MPI_COMM_WORLD);
      MPI_Probe(prev, tag, MPI_COMM_WORLD, &seen);
      MPI_Get_count(&seen, MPI_BYTE, &probed);
      MPI_Recv(r, rcount, rt, prev, tag, MPI_COMM_WORLD, &stat[0]);
    }
    break;
  }
  default: {
    MPI_Irecv(r, rcount, rt, prev, tag, MPI_COMM_WORLD, &req[0]);
    MPI_Isend(s, scount, st, next, tag, MPI_COMM_WORLD, &req[1]);
    if (mode == WAITALL) {
      MPI_Waitall(2, req, stat);
    } else if (mode == TEST) {
      int flag = 0;
      while (!flag) MPI_Test(&req[0], &flag, &stat[0]);
      MPI_Wait(&req[1], MPI_STATUS_IGNORE);
    } else if (mode == TESTALL) {
      int flag = 0;
      while (!flag) MPI_Testall(2, req, &flag, stat);
    } else if (mode == WAITANY) {
      for (int k = 0; k < 2; k++) {
        int idx = -1;
        MPI_Status one;
        MPI_Waitany(2, req, &idx, &one);
        if (idx >= 0 && idx < 2) stat[idx] = one;
      }
    } else {
      int left = 2;
      while (left > 0) {
        int out = 0, idx[2];
        MPI_Status some[2];
        if (mode == WAITSOME) MPI_Waitsome(2, req, &out, idx, some);
        else MPI_Testsome(2, req, &out, idx, some);
        for (int k = 0; k < out && out != MPI_UNDEFINED; k++) { stat[idx[k]] = some[k]; left--; }
      }
    }
  }
  }
  int n = -1;
  MPI_Get_count(&stat[0], rt, &n);
  download(got, r, rbytes, recv_dev);
  expect(want, hr, rbytes, prev, test, st, scount, rt, sent);
  int tsize = 0;
  MPI_Type_size(rt, &tsize);
  int ok = memcmp(got, want, rbytes) == 0 && n == sent && stat[0].MPI_SOURCE == prev &&
           stat[0].MPI_TAG == tag && (probed < 0 || probed == sent * tsize);
  if (!ok)
    fprintf(stderr, "rank %d: %s (%s): bytes %s, count %d (want %d), source %d, tag %d, probed %d\n",
            rank, name, mode_name[mode], memcmp(got, want, rbytes) == 0 ? "equal" : "DIFFER", n,
            sent, stat[0].MPI_SOURCE, stat[0].MPI_TAG, probed);
  char label[160];
  snprintf(label, sizeof label, "%s/%s", name, mode_name[mode]);
  report(label, ok, fnv(got, rbytes));
  dev_free(s, send_dev);
  dev_free(r, recv_dev);
  free(hs); free(hr); free(want); free(got);
}

static void all_modes(const char *name, int test, MPI_Datatype t, int count, int on_dev) {
  for (int m = 0; m < NMODES; m++) exchange(name, test * 16 + m, (enum mode)m, t, count, t, count, count, on_dev, on_dev);
}

/* MPI_Pack/MPI_Unpack of two types one after the other, against PMPI_Pack/PMPI_Unpack. */
static void pack_check(const char *name, int test, MPI_Datatype a, int na, MPI_Datatype b, int nb) {
  size_t abytes = span(a, na), bbytes = span(b, nb);
  uint8_t *ha = malloc(abytes + 1), *hb = malloc(bbytes + 1);
  fill(ha, abytes, rank, test);
  fill(hb, bbytes, rank, test + 1);
  int sa, sb, psa, psb;
  MPI_Pack_size(na, a, MPI_COMM_WORLD, &sa);
  MPI_Pack_size(nb, b, MPI_COMM_WORLD, &sb);
  PMPI_Pack_size(na, a, MPI_COMM_WORLD, &psa);
  PMPI_Pack_size(nb, b, MPI_COMM_WORLD, &psb);
  int total = sa + sb;
  uint8_t *want = malloc((size_t)total), *got = malloc((size_t)total);
  int wpos = 0;
  PMPI_Pack(ha, na, a, want, total, &wpos, MPI_COMM_WORLD);
  PMPI_Pack(hb, nb, b, want, total, &wpos, MPI_COMM_WORLD);
  void *da = dev_alloc(abytes, dev()), *db = dev_alloc(bbytes, dev());
  upload(da, ha, abytes, dev());
  upload(db, hb, bbytes, dev());
  int ok = sa == psa && sb == psb;
  uint64_t sum = 0;
  /* Into a host buffer, then (device builds) into a device buffer. */
  for (int out_dev = 0; out_dev <= dev(); out_dev++) {
    void *out = dev_alloc((size_t)total, out_dev);
    upload(out, want, 0, out_dev);
    int pos = 0;
    MPI_Pack(da, na, a, out, total, &pos, MPI_COMM_WORLD);
    MPI_Pack(db, nb, b, out, total, &pos, MPI_COMM_WORLD);
    download(got, out, (size_t)pos, out_dev);
    ok &= pos == wpos && memcmp(got, want, (size_t)wpos) == 0;
    /* The sum is of the host-buffer round (both builds have it); device rounds are checked. */
    if (out_dev == 0) sum ^= fnv(got, (size_t)pos);
    /* Unpack back over buffers holding another pattern. */
    uint8_t *ia = malloc(abytes + 1), *ib = malloc(bbytes + 1), *wa = malloc(abytes + 1),
            *wb = malloc(bbytes + 1), *ga = malloc(abytes + 1), *gb = malloc(bbytes + 1);
    fill(ia, abytes, 500 + rank, test);
    fill(ib, bbytes, 500 + rank, test + 1);
    memcpy(wa, ia, abytes);
    memcpy(wb, ib, bbytes);
    int up = 0;
    PMPI_Unpack(want, wpos, &up, wa, na, a, MPI_COMM_WORLD);
    PMPI_Unpack(want, wpos, &up, wb, nb, b, MPI_COMM_WORLD);
    upload(da, ia, abytes, dev());
    upload(db, ib, bbytes, dev());
    int gpos = 0;
    MPI_Unpack(out, wpos, &gpos, da, na, a, MPI_COMM_WORLD);
    MPI_Unpack(out, wpos, &gpos, db, nb, b, MPI_COMM_WORLD);
    download(ga, da, abytes, dev());
    download(gb, db, bbytes, dev());
    ok &= gpos == up && memcmp(ga, wa, abytes) == 0 && memcmp(gb, wb, bbytes) == 0;
    if (out_dev == 0) sum ^= fnv(ga, abytes) * 3 ^ fnv(gb, bbytes) * 5;
    free(ia); free(ib); free(wa); free(wb); free(ga); free(gb);
    dev_free(out, out_dev);
  }
  if (!ok) fprintf(stderr, "rank %d: %s differs from PMPI_Pack/PMPI_Unpack\n", rank, name);
  report(name, ok, sum);
  dev_free(da, dev());
  dev_free(db, dev());
  free(ha); free(hb); free(want); free(got);
}

/* Four messages with one tag from the previous rank, of every kind in turn (a derived type on a
 * device buffer, the same on a host buffer, an empty message, the derived type again), all
 * receives posted before the sends: MPI matches them in order, so each receive must get its own
 * message and count, whichever way each message moves. */
static void same_tag(const char *name, MPI_Datatype t, int test) {
  enum { K = 4 };
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  const int scount[K] = {1, 1, 0, 1}, ondev[K] = {dev(), 0, dev(), dev()};
  size_t bytes = span(t, 1);
  uint8_t *hs[K], *hr[K], *want = malloc(bytes + 1), *got = malloc(bytes + 1);
  void *s[K], *r[K];
  MPI_Request rq[2 * K];
  MPI_Status stat[2 * K];
  for (int k = 0; k < K; k++) {
    hs[k] = malloc(bytes + 1);
    hr[k] = malloc(bytes + 1);
    fill(hs[k], bytes, rank, test + k);
    fill(hr[k], bytes, 1000 + rank, test + k);
    s[k] = dev_alloc(bytes, ondev[k]);
    r[k] = dev_alloc(bytes, ondev[k]);
    upload(s[k], hs[k], bytes, ondev[k]);
    upload(r[k], hr[k], bytes, ondev[k]);
  }
  for (int k = 0; k < K; k++) MPI_Irecv(r[k], 1, t, prev, 400 + test, MPI_COMM_WORLD, &rq[k]);
  for (int k = 0; k < K; k++) MPI_Isend(s[k], scount[k], t, next, 400 + test, MPI_COMM_WORLD, &rq[K + k]);
  MPI_Waitall(2 * K, rq, stat);
  int ok = 1;
  uint64_t sum = 0;
  for (int k = 0; k < K; k++) {
    download(got, r[k], bytes, ondev[k]);
    expect(want, hr[k], bytes, prev, test + k, t, scount[k], t, scount[k]);
    int n = -1;
    MPI_Get_count(&stat[k], t, &n);
    ok &= memcmp(got, want, bytes) == 0 && n == scount[k];
    sum = sum * 31 + fnv(got, bytes);
    dev_free(s[k], ondev[k]);
    dev_free(r[k], ondev[k]);
    free(hs[k]);
    free(hr[k]);
  }
  if (!ok) fprintf(stderr, "rank %d: %s: a receive got another message or count\n", rank, name);
  report(name, ok, sum);
  free(want);
  free(got);
}

/* One element of `t` to send to the next rank and one to receive from the previous one, on the
 * device where this build puts buffers: the send holding this rank's pattern for `test`, the
 * receive the pattern it starts with (also kept in `hr`); `want` and `got` for the checks. */
struct ring_pair {
  int next, prev;
  size_t bytes;
  uint8_t *hs, *hr, *want, *got;
  void *s, *r;
};
static struct ring_pair ring_pair_new(MPI_Datatype t, int test) {
  struct ring_pair p = {(rank + 1) % nranks, (rank + nranks - 1) % nranks, span(t, 1)};
  p.hs = malloc(p.bytes);
  p.hr = malloc(p.bytes);
  p.want = malloc(p.bytes);
  p.got = malloc(p.bytes);
  p.s = dev_alloc(p.bytes, dev());
  p.r = dev_alloc(p.bytes, dev());
  fill(p.hs, p.bytes, rank, test);
  fill(p.hr, p.bytes, 1000 + rank, test);
  upload(p.s, p.hs, p.bytes, dev());
  upload(p.r, p.hr, p.bytes, dev());
  return p;
}
static void ring_pair_free(struct ring_pair *p) {
  dev_free(p->s, dev());
  dev_free(p->r, dev());
  free(p->hs); free(p->hr); free(p->want); free(p->got);
}

/* A receive waited for only after its message was sent: posted, a barrier, the send made and
 * completed, a barrier, then MPI_Waitall (with the interposer's direct path, the receive finds
 * its note there already and queues its unpack before the real wait). */
static void sent_before_the_wait(const char *name, MPI_Datatype t, int test) {
  struct ring_pair p = ring_pair_new(t, test);
  MPI_Request rq, sq;
  MPI_Status st;
  MPI_Irecv(p.r, 1, t, p.prev, 600 + test, MPI_COMM_WORLD, &rq);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Isend(p.s, 1, t, p.next, 600 + test, MPI_COMM_WORLD, &sq);
  MPI_Wait(&sq, MPI_STATUS_IGNORE);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Waitall(1, &rq, &st);
  int n = -1;
  MPI_Get_count(&st, t, &n);
  download(p.got, p.r, p.bytes, dev());
  expect(p.want, p.hr, p.bytes, p.prev, test, t, 1, t, 1);
  report(name, memcmp(p.got, p.want, p.bytes) == 0 && n == 1, fnv(p.got, p.bytes));
  ring_pair_free(&p);
}

/* A receive that got its message through the MPI although it could have been lent (the send
 * made of plain doubles, the same values), and the receives of that source and tag after it:
 * four rounds, typed, plain, typed, typed; each round's receive is posted before a barrier and
 * its send made after it, so that a sender finds what its receiver said of the receive before
 * it looks. Every round's buffer and count are checked. */
static void plain_then_typed(const char *name, MPI_Datatype t, int test) {
  struct ring_pair p = ring_pair_new(t, test);
  int tag = 700 + test, ok = 1, psize = 0;
  uint64_t sum = 1469598103934665603ull;
  PMPI_Pack_size(1, t, MPI_COMM_WORLD, &psize);
  uint8_t *packed = malloc((size_t)psize + 1);
  void *flat = dev_alloc((size_t)psize, dev_passthrough());
  for (int round = 0; round < 4; round++) {
    int tt = test + 1000 * round, n = -1;
    MPI_Request rq;
    MPI_Status st;
    fill(p.hs, p.bytes, rank, tt);
    fill(p.hr, p.bytes, 1000 + rank, tt);
    upload(p.s, p.hs, p.bytes, dev());
    upload(p.r, p.hr, p.bytes, dev());
    MPI_Irecv(p.r, 1, t, p.prev, tag, MPI_COMM_WORLD, &rq);
    MPI_Barrier(MPI_COMM_WORLD);
    if (round == 1) {
      int pos = 0;
      PMPI_Pack(p.hs, 1, t, packed, psize, &pos, MPI_COMM_WORLD);
      upload(flat, packed, (size_t)pos, dev_passthrough());
      MPI_Send(flat, pos / (int)sizeof(double), MPI_DOUBLE, p.next, tag, MPI_COMM_WORLD);
    } else {
      MPI_Send(p.s, 1, t, p.next, tag, MPI_COMM_WORLD);
    }
    MPI_Wait(&rq, &st);
    MPI_Get_count(&st, t, &n);
    download(p.got, p.r, p.bytes, dev());
    expect(p.want, p.hr, p.bytes, p.prev, tt, t, 1, t, 1);
    ok &= memcmp(p.got, p.want, p.bytes) == 0 && n == 1;
    sum = sum * 31 + fnv(p.got, p.bytes);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (!ok) fprintf(stderr, "rank %d: %s: a buffer or count after a plain send\n", rank, name);
  report(name, ok, sum);
  dev_free(flat, dev_passthrough());
  free(packed);
  ring_pair_free(&p);
}

/* MPI_Request_get_status polled until it says a request is complete, and the buffers used
 * before any wait (MPI allows it): the send buffer is overwritten at once (the peer must get what
 * it held before), the receive buffer must hold the message with its count, and is then
 * overwritten too; the wait that completes both must change neither buffer nor count. With
 * MPI_Isend/MPI_Irecv, or (`persistent_reqs`) two rounds of persistent requests. */
static void get_status(const char *name, MPI_Datatype t, int test, int persistent_reqs) {
  struct ring_pair p = ring_pair_new(t, test);
  uint8_t *junk = malloc(p.bytes);
  MPI_Request rq[2];
  int tag = 500 + test, ok = 1;
  uint64_t sum = 1469598103934665603ull;
  if (persistent_reqs) {
    MPI_Recv_init(p.r, 1, t, p.prev, tag, MPI_COMM_WORLD, &rq[0]);
    MPI_Send_init(p.s, 1, t, p.next, tag, MPI_COMM_WORLD, &rq[1]);
  }
  for (int round = 0; round < (persistent_reqs ? 2 : 1); round++) {
    int tt = test + 1000 * round;
    fill(p.hs, p.bytes, rank, tt);
    fill(p.hr, p.bytes, 1000 + rank, tt);
    fill(junk, p.bytes, 2000 + rank, tt);
    upload(p.s, p.hs, p.bytes, dev());
    upload(p.r, p.hr, p.bytes, dev());
    if (persistent_reqs) {
      MPI_Startall(2, rq);
    } else {
      MPI_Irecv(p.r, 1, t, p.prev, tag, MPI_COMM_WORLD, &rq[0]);
      MPI_Isend(p.s, 1, t, p.next, tag, MPI_COMM_WORLD, &rq[1]);
    }
    int sflag = 0, rflag = 0, n = -1, n2 = -1;
    MPI_Status st, st2[2];
    while (!sflag) MPI_Request_get_status(rq[1], &sflag, MPI_STATUS_IGNORE);
    upload(p.s, junk, p.bytes, dev());
    while (!rflag) MPI_Request_get_status(rq[0], &rflag, &st);
    download(p.got, p.r, p.bytes, dev());
    expect(p.want, p.hr, p.bytes, p.prev, tt, t, 1, t, 1);
    MPI_Get_count(&st, t, &n);
    ok &= memcmp(p.got, p.want, p.bytes) == 0 && n == 1;
    sum = sum * 31 + fnv(p.got, p.bytes);
    upload(p.r, junk, p.bytes, dev());
    MPI_Waitall(2, rq, st2);
    download(p.got, p.r, p.bytes, dev());
    MPI_Get_count(&st2[0], t, &n2);
    ok &= memcmp(p.got, junk, p.bytes) == 0 && n2 == 1;
    MPI_Barrier(MPI_COMM_WORLD); /* every peer has checked what it got before the next round */
  }
  if (persistent_reqs) {
    MPI_Request_free(&rq[0]);
    MPI_Request_free(&rq[1]);
  }
  if (!ok) fprintf(stderr, "rank %d: %s: a buffer or count after MPI_Request_get_status\n", rank, name);
  report(name, ok, sum);
  ring_pair_free(&p);
  free(junk);
}

/* MPI_Request_free on a started send (the receive completes it), and MPI_Cancel of a receive
 * nothing matches (its buffer must stay as it was). */
static void free_and_cancel(MPI_Datatype t, int test) {
  struct ring_pair p = ring_pair_new(t, test);
  MPI_Request rq, sq;
  MPI_Irecv(p.r, 1, t, p.prev, 300 + test, MPI_COMM_WORLD, &rq);
  MPI_Isend(p.s, 1, t, p.next, 300 + test, MPI_COMM_WORLD, &sq);
  MPI_Request_free(&sq);
  MPI_Status st;
  MPI_Wait(&rq, &st);
  int ok = sq == MPI_REQUEST_NULL;
  download(p.got, p.r, p.bytes, dev());
  expect(p.want, p.hr, p.bytes, p.prev, test, t, 1, t, 1);
  ok &= memcmp(p.got, p.want, p.bytes) == 0;
  MPI_Barrier(MPI_COMM_WORLD); /* every freed send has been received */
  report("request-free-of-a-send", ok, fnv(p.got, p.bytes));

  upload(p.r, p.hr, p.bytes, dev());
  MPI_Irecv(p.r, 1, t, p.prev, 999, MPI_COMM_WORLD, &rq);
  MPI_Cancel(&rq);
  MPI_Wait(&rq, &st);
  int cancelled = 0;
  MPI_Test_cancelled(&st, &cancelled);
  download(p.got, p.r, p.bytes, dev());
  ok = cancelled && memcmp(p.got, p.hr, p.bytes) == 0;
  report("cancelled-receive", ok, fnv(p.got, p.bytes));
  ring_pair_free(&p);
}

/* Persistent requests: MPI_Recv_init and MPI_Send_init once, then `rounds` rounds of starts and a
 * completion by `how`, the send buffer holding a new pattern each round and the receive buffer
 * reset each round, every round checked; then a wait on the inactive receive (its buffer must
 * stay as it is), a round whose receive is freed while active (freeing completes it) and whose
 * send is freed while active, and the frees. */
enum { P_STARTALL_WAITALL, P_START_WAIT, P_TEST, P_TESTALL, P_WAITANY, P_WAITSOME, P_TESTSOME,
       P_TESTANY, P_NHOW };
static const char *how_name[P_NHOW] = {"startall-waitall", "start-wait", "test", "testall",
                                       "waitany", "waitsome", "testsome", "testany"};
static void persistent(const char *name, int test, int how, MPI_Datatype st, int scount,
                       MPI_Datatype rt, int rcount, int sent, int send_dev, int recv_dev) {
  const int rounds = 3;
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  size_t sbytes = span(st, scount), rbytes = span(rt, rcount);
  uint8_t *hs = malloc(sbytes + 1), *hr = malloc(rbytes + 1), *want = malloc(rbytes + 1),
          *got = malloc(rbytes + 1);
  void *s = dev_alloc(sbytes, send_dev), *r = dev_alloc(rbytes, recv_dev);
  fill(hr, rbytes, 1000 + rank, test);
  MPI_Request req[2];
  int tag = 400 + test, ok = 1, n = -1;
  MPI_Recv_init(r, rcount, rt, prev, tag, MPI_COMM_WORLD, &req[0]);
  MPI_Send_init(s, scount, st, next, tag, MPI_COMM_WORLD, &req[1]);
  uint64_t sum = 1469598103934665603ull;
  for (int round = 0; round < rounds + 1; round++) {
    int t = test + 1000 * (round + 1);
    fill(hs, sbytes, rank, t);
    upload(s, hs, sbytes, send_dev);
    upload(r, hr, rbytes, recv_dev);
    MPI_Status stat[2];
    memset(stat, 0, sizeof stat);
    if (round == rounds) {
      /* The last round frees the send while it is active; the receive completes it. */
      MPI_Start(&req[0]);
      MPI_Start(&req[1]);
      MPI_Request_free(&req[1]);
      MPI_Wait(&req[0], &stat[0]);
      MPI_Barrier(MPI_COMM_WORLD); /* every freed send has been received */
      ok &= req[1] == MPI_REQUEST_NULL;
    } else if (how == P_START_WAIT) {
      MPI_Start(&req[0]);
      MPI_Start(&req[1]);
      MPI_Wait(&req[0], &stat[0]);
      MPI_Wait(&req[1], MPI_STATUS_IGNORE);
    } else {
      MPI_Startall(2, req);
      if (how == P_STARTALL_WAITALL) {
        MPI_Waitall(2, req, stat);
      } else if (how == P_TEST) {
        int flag = 0;
        while (!flag) MPI_Test(&req[0], &flag, &stat[0]);
        MPI_Wait(&req[1], MPI_STATUS_IGNORE);
      } else if (how == P_TESTALL) {
        int flag = 0;
        while (!flag) MPI_Testall(2, req, &flag, stat);
      } else if (how == P_WAITANY || how == P_TESTANY) {
        for (int k = 0; k < 2;) {
          int idx = -1, flag = 1;
          MPI_Status one;
          if (how == P_WAITANY) MPI_Waitany(2, req, &idx, &one);
          else MPI_Testany(2, req, &idx, &flag, &one);
          if (flag && idx >= 0 && idx < 2) { stat[idx] = one; k++; }
        }
      } else {
        int left = 2;
        while (left > 0) {
          int out = 0, idx[2];
          MPI_Status some[2];
          if (how == P_WAITSOME) MPI_Waitsome(2, req, &out, idx, some);
          else MPI_Testsome(2, req, &out, idx, some);
          for (int k = 0; k < out && out != MPI_UNDEFINED; k++) { stat[idx[k]] = some[k]; left--; }
        }
      }
    }
    MPI_Get_count(&stat[0], rt, &n);
    download(got, r, rbytes, recv_dev);
    expect(want, hr, rbytes, prev, t, st, scount, rt, sent);
    int this_ok = memcmp(got, want, rbytes) == 0 && n == sent && stat[0].MPI_SOURCE == prev;
    if (!this_ok)
      fprintf(stderr, "rank %d: %s (%s) round %d: bytes %s, count %d (want %d), source %d\n", rank,
              name, how_name[how], round, memcmp(got, want, rbytes) == 0 ? "equal" : "DIFFER", n,
              sent, stat[0].MPI_SOURCE);
    ok &= this_ok;
    for (size_t i = 0; i < rbytes; i++) { sum ^= got[i]; sum *= 1099511628211ull; }
    if (round == rounds - 1) {
      /* A wait on the inactive receive returns at once and leaves its buffer alone. */
      uint8_t *fresh = malloc(rbytes + 1);
      fill(fresh, rbytes, 2000 + rank, test);
      upload(r, fresh, rbytes, recv_dev);
      MPI_Status empty;
      MPI_Wait(&req[0], &empty);
      download(got, r, rbytes, recv_dev);
      int inactive_ok = memcmp(got, fresh, rbytes) == 0;
      if (!inactive_ok) fprintf(stderr, "rank %d: %s (%s): a wait on the inactive receive changed its buffer\n", rank, name, how_name[how]);
      ok &= inactive_ok;
      free(fresh);
    }
  }
  MPI_Request_free(&req[0]);
  ok &= req[0] == MPI_REQUEST_NULL;
  char label[160];
  snprintf(label, sizeof label, "%s/%s", name, how_name[how]);
  report(label, ok, sum);
  dev_free(s, send_dev);
  dev_free(r, recv_dev);
  free(hs); free(hr); free(want); free(got);
}

/* How halo() exchanges its six faces. */
enum halo_how { HALO_ISEND, HALO_SENDRECV, HALO_PERSISTENT };

/* A 3-D halo exchange of subarray faces: x neighbours along the ring, y and z periodic onto
 * this rank; every face and ghost plane a MPI_Type_create_subarray of the whole block.
 * HALO_PERSISTENT makes the twelve requests once with MPI_Recv_init/MPI_Send_init, adds a
 * contiguous MPI_INT exchange around the ring (which passes through) to the same
 * MPI_Startall/MPI_Waitall, and runs three rounds with new data each. */
static void halo(const char *name, int test, enum halo_how how) {
  const int n[3] = {10, 12, 14}; /* z, y, x with one ghost layer on each side */
  const size_t elem = sizeof(double);
  size_t bytes = (size_t)n[0] * n[1] * n[2] * elem;
  MPI_Datatype face[3][2], ghost[3][2];
  for (int d = 0; d < 3; d++) {
    int sub[3] = {n[0] - 2, n[1] - 2, n[2] - 2};
    sub[d] = 1;
    for (int side = 0; side < 2; side++) {
      int fs[3] = {1, 1, 1}, gs[3] = {1, 1, 1};
      fs[d] = side == 0 ? 1 : n[d] - 2;
      gs[d] = side == 0 ? 0 : n[d] - 1;
      MPI_Type_create_subarray(3, n, sub, fs, MPI_ORDER_C, MPI_DOUBLE, &face[d][side]);
      MPI_Type_create_subarray(3, n, sub, gs, MPI_ORDER_C, MPI_DOUBLE, &ghost[d][side]);
      MPI_Type_commit(&face[d][side]);
      MPI_Type_commit(&ghost[d][side]);
    }
  }
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  uint8_t *h = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
  void *g = dev_alloc(bytes, dev());
  enum { NFLAT = 64 };
  int flat_out[NFLAT], flat_in[NFLAT];
  /* Ghost side 0 receives the peer's high face (side 1), and so on. */
  MPI_Request req[14];
  int k = 0;
  int rounds = how == HALO_PERSISTENT ? 3 : 1, ok = 1;
  uint64_t sum = 0;
  for (int round = 0; round < rounds; round++) {
    int t = test + 1000 * round;
    fill(h, bytes, rank, t);
    upload(g, h, bytes, dev());
    for (int i = 0; i < NFLAT; i++) { flat_out[i] = rank * 100000 + t * 100 + i; flat_in[i] = -1; }
    if (how != HALO_PERSISTENT || round == 0) {
      k = 0;
      for (int d = 0; d < 3; d++) {
        for (int side = 0; side < 2; side++) {
          int to = d == 2 ? (side == 1 ? next : prev) : rank;
          int from = d == 2 ? (side == 0 ? prev : next) : rank;
          int tag_send = 10 * d + side, tag_recv = 10 * d + (1 - side);
          if (how == HALO_SENDRECV) {
            /* My face of this side goes to `to`, whose opposite ghost takes it; my opposite
             * ghost takes the face of this side from the other direction. */
            int source = d == 2 ? (side == 1 ? prev : next) : rank;
            MPI_Sendrecv(g, 1, face[d][side], to, tag_send, g, 1, ghost[d][1 - side], source,
                         tag_send, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            (void)from; (void)tag_recv;
          } else if (how == HALO_ISEND) {
            MPI_Irecv(g, 1, ghost[d][side], from, tag_recv, MPI_COMM_WORLD, &req[k++]);
            MPI_Isend(g, 1, face[d][side], to, tag_send, MPI_COMM_WORLD, &req[k++]);
          } else {
            MPI_Recv_init(g, 1, ghost[d][side], from, tag_recv, MPI_COMM_WORLD, &req[k++]);
            MPI_Send_init(g, 1, face[d][side], to, tag_send, MPI_COMM_WORLD, &req[k++]);
          }
        }
      }
      if (how == HALO_PERSISTENT) {
        MPI_Recv_init(flat_in, NFLAT, MPI_INT, prev, 77, MPI_COMM_WORLD, &req[k++]);
        MPI_Send_init(flat_out, NFLAT, MPI_INT, next, 77, MPI_COMM_WORLD, &req[k++]);
      }
    }
    if (how == HALO_PERSISTENT) MPI_Startall(k, req);
    if (how != HALO_SENDRECV) MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
    download(got, g, bytes, dev());
    /* Expected: ghosts from the senders' faces; the interior as it was. */
    memcpy(want, h, bytes);
    for (int d = 0; d < 3; d++) {
      for (int side = 0; side < 2; side++) {
        /* ghost[d][side] holds the face[d][1-side] of the rank that sends it. */
        int from = d == 2 ? (side == 0 ? prev : next) : rank;
        uint8_t *peer = malloc(bytes);
        fill(peer, bytes, from, t);
        int fside = 1 - side;
        int psize, pos = 0, up = 0;
        PMPI_Pack_size(1, face[d][fside], MPI_COMM_WORLD, &psize);
        uint8_t *packed = malloc((size_t)psize);
        PMPI_Pack(peer, 1, face[d][fside], packed, psize, &pos, MPI_COMM_WORLD);
        PMPI_Unpack(packed, pos, &up, want, 1, ghost[d][side], MPI_COMM_WORLD);
        free(packed);
        free(peer);
      }
    }
    int round_ok = memcmp(got, want, bytes) == 0;
    if (how == HALO_PERSISTENT)
      for (int i = 0; i < NFLAT; i++) round_ok &= flat_in[i] == prev * 100000 + t * 100 + i;
    if (!round_ok) fprintf(stderr, "rank %d: %s differs in round %d\n", rank, name, round);
    ok &= round_ok;
    sum ^= fnv(got, bytes) + (uint64_t)round;
  }
  if (how == HALO_PERSISTENT)
    for (int i = 0; i < k; i++) MPI_Request_free(&req[i]);
  report(name, ok, sum);
  for (int d = 0; d < 3; d++)
    for (int side = 0; side < 2; side++) { MPI_Type_free(&face[d][side]); MPI_Type_free(&ghost[d][side]); }
  dev_free(g, dev());
  free(h); free(want); free(got);
}

/* A loop of MPI_Sendrecv of one x face (8-byte blocks) around the ring, new data each round,
 * the ranks in step (a barrier before each round), every round checked against
 * MPI_Pack/MPI_Unpack of host copies. With the direct path's
 * channels on, they open from the third round; rounds that break them on the way: another call
 * on odd ranks (MPI_Irecv/MPI_Isend into a waiting MPI_Sendrecv), a face of another size, a
 * receive into host memory on odd ranks. The loop goes on after each. */
static void channel_loop(const char *name, int test) {
  const int n[3] = {34, 66, 10};
  size_t bytes = (size_t)n[0] * n[1] * n[2] * sizeof(double);
  MPI_Datatype face[2], ghost[2]; /* [1]: half the face, another packed size */
  for (int v = 0; v < 2; v++) {
    int sub[3] = {v ? (n[0] - 2) / 2 : n[0] - 2, n[1] - 2, 1};
    int fs[3] = {1, 1, n[2] - 2}, gs[3] = {1, 1, 0};
    MPI_Type_create_subarray(3, n, sub, fs, MPI_ORDER_C, MPI_DOUBLE, &face[v]);
    MPI_Type_create_subarray(3, n, sub, gs, MPI_ORDER_C, MPI_DOUBLE, &ghost[v]);
    MPI_Type_commit(&face[v]);
    MPI_Type_commit(&ghost[v]);
  }
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks, odd = rank % 2;
  uint8_t *h = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes), *peer = malloc(bytes);
  void *g = dev_alloc(bytes, dev());
  int ok = 1;
  uint64_t sum = 0;
  for (int round = 0; round < 24; round++) {
    int t = test + 1000 * round, v = round == 10;
    int other_call = round == 6 && odd, host_recv = round == 14 && odd && dev();
    fill(h, bytes, rank, t);
    upload(g, h, bytes, dev());
    void *rbuf = g;
    if (host_recv) {
      rbuf = malloc(bytes);
      memcpy(rbuf, h, bytes);
    }
    int round_ok = 1;
    /* In step, as a halo code's time steps are: every ready message comes in time. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (other_call) {
      MPI_Request rq[2];
      MPI_Irecv(rbuf, 1, ghost[v], prev, test, MPI_COMM_WORLD, &rq[0]);
      MPI_Isend(g, 1, face[v], next, test, MPI_COMM_WORLD, &rq[1]);
      MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
    } else {
      MPI_Status st;
      int cnt = -1;
      MPI_Sendrecv(g, 1, face[v], next, test, rbuf, 1, ghost[v], prev, test, MPI_COMM_WORLD, &st);
      MPI_Get_count(&st, ghost[v], &cnt);
      round_ok &= cnt == 1 && st.MPI_SOURCE == prev && st.MPI_TAG == test;
    }
    if (host_recv) {
      memcpy(got, rbuf, bytes);
      free(rbuf);
    } else {
      download(got, g, bytes, dev());
    }
    memcpy(want, h, bytes);
    fill(peer, bytes, prev, t);
    int psize, pos = 0, up = 0;
    PMPI_Pack_size(1, face[v], MPI_COMM_WORLD, &psize);
    uint8_t *packed = malloc((size_t)psize);
    PMPI_Pack(peer, 1, face[v], packed, psize, &pos, MPI_COMM_WORLD);
    PMPI_Unpack(packed, pos, &up, want, 1, ghost[v], MPI_COMM_WORLD);
    free(packed);
    round_ok &= memcmp(got, want, bytes) == 0;
    if (!round_ok) fprintf(stderr, "rank %d: %s differs in round %d\n", rank, name, round);
    ok &= round_ok;
    sum ^= fnv(got, bytes) + (uint64_t)round;
  }
  report(name, ok, sum);
  for (int v = 0; v < 2; v++) {
    MPI_Type_free(&face[v]);
    MPI_Type_free(&ghost[v]);
  }
  dev_free(g, dev());
  free(h); free(want); free(got); free(peer);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) if (strcmp(argv[i], "--host-mpi") == 0) host_mpi = 1;
#ifdef USE_CUDA
  {
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int ndev = 0;
    cudaGetDeviceCount(&ndev);
    if (ndev > 0) cudaSetDevice((lr ? atoi(lr) : 0) % ndev);
  }
#endif
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  /* Regular layouts (the interposer takes them on device buffers). */
  MPI_Datatype column, blocks, resized, sub2f, dup, inner, obj3;
  MPI_Type_vector(64, 1, 8, MPI_DOUBLE, &column);
  MPI_Type_commit(&column);
  all_modes("vector-column", 1, column, 2, dev());
  MPI_Type_vector(33, 3, 7, MPI_INT, &blocks);
  MPI_Type_commit(&blocks);
  all_modes("vector-blocks", 2, blocks, 1, dev());
  {
    MPI_Datatype v;
    MPI_Type_vector(4, 1, 2, MPI_FLOAT, &v);
    MPI_Type_create_resized(v, 0, 64, &resized);
    MPI_Type_free(&v);
    MPI_Type_commit(&resized);
    all_modes("resized-vector", 3, resized, 5, dev());
  }
  {
    int sizes[2] = {20, 30}, subs[2] = {7, 11}, starts[2] = {3, 5};
    MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_FORTRAN, MPI_DOUBLE, &sub2f);
    MPI_Type_commit(&sub2f);
    all_modes("subarray-2d-fortran", 4, sub2f, 1, dev());
  }
  MPI_Type_dup(column, &dup);
  MPI_Type_commit(&dup);
  exchange("dup-of-vector", 5 * 16, WAITALL, dup, 1, dup, 1, 1, dev(), dev());
  /* 2-D and 3-D objects with blocks of 1 to 512 bytes (TEMPI's shapes). */
  {
    const int bl[4] = {1, 8, 64, 512};
    for (int i = 0; i < 4; i++) {
      char label[64];
      MPI_Type_vector(16, bl[i], 2 * bl[i], MPI_BYTE, &inner);
      MPI_Type_create_hvector(6, 1, (MPI_Aint)(16 * 2 * bl[i] + 32), inner, &obj3);
      MPI_Type_commit(&inner);
      MPI_Type_commit(&obj3);
      snprintf(label, sizeof label, "object-2d-block-%d", bl[i]);
      exchange(label, 6 * 16 + i, SENDRECV, inner, 3, inner, 3, 3, dev(), dev());
      snprintf(label, sizeof label, "object-3d-block-%d", bl[i]);
      exchange(label, 7 * 16 + i, WAITALL, obj3, 2, obj3, 2, 2, dev(), dev());
      MPI_Type_free(&obj3);
      MPI_Type_free(&inner);
    }
  }
  /* A short message: 2 elements sent, 3 posted. */
  exchange("short-receive", 8 * 16, SEND_RECV, column, 2, column, 3, 2, dev(), dev());
  exchange("short-receive-waitall", 8 * 16 + 1, WAITALL, column, 2, column, 3, 2, dev(), dev());
  /* An empty message: nothing sent, two elements posted; the buffer must stay as it is. */
  exchange("empty-message", 8 * 16 + 2, SEND_RECV, column, 0, column, 2, 0, dev(), dev());
  exchange("empty-message-waitall", 8 * 16 + 3, WAITALL, column, 0, column, 2, 0, dev(), dev());
  same_tag("same-tag-in-order", column, 8 * 16 + 4);
  /* A freed handle reused for another type. */
  {
    MPI_Datatype a, b;
    MPI_Type_vector(10, 2, 5, MPI_DOUBLE, &a);
    MPI_Type_commit(&a);
    MPI_Type_free(&a);
    MPI_Type_vector(7, 3, 4, MPI_INT, &b);
    MPI_Type_commit(&b);
    exchange("free-then-reuse", 9 * 16, WAITALL, b, 2, b, 2, 2, dev(), dev());
    MPI_Type_free(&b);
  }
  /* Mixed buffers: device sends to host and host to device (device builds), and a regular
   * type sent as one type and received as another with the same signature. */
  exchange("mixed-device-to-host", 10 * 16, SENDRECV, column, 2, column, 2, 2, dev(), 0);
  exchange("mixed-host-to-device", 10 * 16 + 1, WAITALL, column, 2, column, 2, 2, 0, dev());
  {
    MPI_Datatype flat;
    MPI_Type_contiguous(128, MPI_DOUBLE, &flat);
    MPI_Type_commit(&flat);
    exchange("vector-to-contiguous", 10 * 16 + 2, SENDRECV, column, 2, flat, 1, 1, dev(), dev_passthrough());
    exchange("contiguous-to-vector", 10 * 16 + 3, WAITALL, flat, 1, column, 2, 2, dev_passthrough(), dev());
    MPI_Type_free(&flat);
  }
  /* Types the IR does not express, and contiguous ones: the MPI's own business. */
  {
    MPI_Datatype idx, st, contig;
    int lens[3] = {1, 2, 3}, displs[3] = {0, 5, 11};
    MPI_Type_indexed(3, lens, displs, MPI_DOUBLE, &idx);
    MPI_Type_commit(&idx);
    exchange("indexed-passes-through", 11 * 16, WAITALL, idx, 4, idx, 4, 4, dev_passthrough(), dev_passthrough());
    int bl[2] = {1, 1};
    MPI_Aint dis[2] = {0, 8};
    MPI_Datatype ty[2] = {MPI_INT, MPI_DOUBLE};
    MPI_Type_create_struct(2, bl, dis, ty, &st);
    MPI_Type_commit(&st);
    exchange("struct-passes-through", 11 * 16 + 1, SENDRECV, st, 9, st, 9, 9, dev_passthrough(), dev_passthrough());
    MPI_Type_contiguous(100, MPI_DOUBLE, &contig);
    MPI_Type_commit(&contig);
    exchange("contiguous-passes-through", 11 * 16 + 2, SEND_RECV, contig, 2, contig, 2, 2, dev_passthrough(), dev_passthrough());
    exchange("double-passes-through", 11 * 16 + 3, TESTALL, MPI_DOUBLE, 50, MPI_DOUBLE, 50, 50, dev_passthrough(), dev_passthrough());
    MPI_Type_free(&idx);
    MPI_Type_free(&st);
    MPI_Type_free(&contig);
  }
  /* MPI_Pack / MPI_Unpack / MPI_Pack_size. */
  {
    int sizes[3] = {6, 7, 8}, subs[3] = {6, 1, 8}, starts[3] = {0, 3, 0};
    MPI_Datatype yface;
    MPI_Type_create_subarray(3, sizes, subs, starts, MPI_ORDER_C, MPI_DOUBLE, &yface);
    MPI_Type_commit(&yface);
    pack_check("pack-vector-then-subarray", 12 * 16, column, 2, yface, 1);
    pack_check("pack-resized-then-blocks", 12 * 16 + 2, resized, 3, blocks, 2);
    MPI_Type_free(&yface);
  }
  /* Persistent requests, every way of completing them, a regular type and a subarray face. */
  for (int h = 0; h < P_NHOW; h++) persistent("persistent-vector-column", 15 * 16 + h, h, column, 2, column, 2, 2, dev(), dev());
  {
    int sizes[3] = {6, 7, 8}, subs[3] = {6, 7, 1}, starts[3] = {0, 0, 2};
    MPI_Datatype xface;
    MPI_Type_create_subarray(3, sizes, subs, starts, MPI_ORDER_C, MPI_DOUBLE, &xface);
    MPI_Type_commit(&xface);
    persistent("persistent-subarray-face", 15 * 16 + 8, P_STARTALL_WAITALL, xface, 1, xface, 1, 1, dev(), dev());
    persistent("persistent-short-receive", 15 * 16 + 9, P_START_WAIT, column, 2, column, 3, 2, dev(), dev());
    persistent("persistent-device-to-host", 15 * 16 + 10, P_STARTALL_WAITALL, column, 2, column, 2, 2, dev(), 0);
    MPI_Type_free(&xface);
    MPI_Datatype idx;
    int lens[3] = {1, 2, 3}, displs[3] = {0, 5, 11};
    MPI_Type_indexed(3, lens, displs, MPI_DOUBLE, &idx);
    MPI_Type_commit(&idx);
    persistent("persistent-indexed-passes-through", 15 * 16 + 11, P_WAITANY, idx, 4, idx, 4, 4, dev_passthrough(), dev_passthrough());
    MPI_Type_free(&idx);
  }
  sent_before_the_wait("sent-before-the-wait", column, 14 * 16 + 11);
  plain_then_typed("plain-then-typed", column, 14 * 16 + 12);
  get_status("request-get-status", column, 14 * 16 + 9, 0);
  get_status("persistent-request-get-status", column, 14 * 16 + 10, 1);
  /* The 3-D halo exchange of subarray faces. */
  halo("halo-3d-isend-irecv-waitall", 13 * 16, HALO_ISEND);
  halo("halo-3d-sendrecv", 13 * 16 + 1, HALO_SENDRECV);
  halo("halo-3d-startall-waitall", 13 * 16 + 2, HALO_PERSISTENT);
  channel_loop("sendrecv-face-loop", 13 * 16 + 3);
  /* Last: after a cancel the interposer's direct path stops on this rank. */
  free_and_cancel(column, 14 * 16);
  same_tag("same-tag-after-a-cancel", column, 14 * 16 + 8);

  MPI_Type_free(&column);
  MPI_Type_free(&blocks);
  MPI_Type_free(&resized);
  MPI_Type_free(&sub2f);
  MPI_Type_free(&dup);
  if (rank == 0) printf("mpi-tests: %d passed, %d failed\n", passed, failed);
  MPI_Finalize();
  return failed == 0 ? 0 : 1;
}
