/* mbox.c: what a mailbox message costs between two cores, as the direct path's rings carry them
 * (shm.rs: `head` and `tail` counters on cache lines of their own, the message's length and tag,
 * its bytes after), against a slot whose sequence word shares the message's cache line. Two
 * processes, pinned to the cores given (default 0 and 1), ping-pong ROUNDS messages; printed:
 * the median of 200 batches' mean round trip, halved (one message's latency), in ns.
 * Build: gcc -O2 -o mbox mbox.c   Run: ./mbox [CORE_A CORE_B] */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CAP 65536
typedef struct { _Alignas(64) _Atomic uint64_t head; _Alignas(64) _Atomic uint64_t tail; _Alignas(64) uint8_t q[CAP]; } ring_t;
typedef struct { _Alignas(64) _Atomic uint64_t seq; uint8_t bytes[56]; } slot_t;
typedef struct { ring_t r[2]; slot_t s[2][4]; } shared_t;

static void pin(int core) { cpu_set_t c; CPU_ZERO(&c); CPU_SET(core, &c); sched_setaffinity(0, sizeof c, &c); }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }

static void put(ring_t *r, uint64_t at, const uint8_t *b, size_t n) { for (size_t i = 0; i < n; i++) r->q[(at + i) % CAP] = b[i]; }
static void get(ring_t *r, uint64_t at, uint8_t *b, size_t n) { for (size_t i = 0; i < n; i++) b[i] = r->q[(at + i) % CAP]; }
static uint64_t seen_tail[2];
static void ring_send(ring_t *r, int me, const uint8_t *msg, uint32_t len) {
  uint64_t need = 8 + (len + 7) / 8 * 8, head = atomic_load_explicit(&r->head, memory_order_relaxed);
  if (head - seen_tail[me] + need > CAP) seen_tail[me] = atomic_load_explicit(&r->tail, memory_order_acquire);
  uint8_t h[8]; memcpy(h, &len, 4); memset(h + 4, 0, 4);
  put(r, head, h, 8); put(r, head + 8, msg, len);
  atomic_store_explicit(&r->head, head + need, memory_order_release);
}
/* Spins until a message is there, reads it; returns its first word. */
static uint64_t ring_recv(ring_t *r, uint8_t *scratch) {
  uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed), head;
  while ((head = atomic_load_explicit(&r->head, memory_order_acquire)) == tail) {}
  uint8_t h[8]; get(r, tail, h, 8); uint32_t len; memcpy(&len, h, 4);
  get(r, tail + 8, scratch, len);
  atomic_store_explicit(&r->tail, tail + 8 + (len + 7) / 8 * 8, memory_order_release);
  uint64_t w; memcpy(&w, scratch, 8); return w;
}
static void slot_send(slot_t *s, uint64_t seq, const uint8_t *msg, uint32_t len) {
  memcpy(s->bytes, msg, len < 56 ? len : 56);
  atomic_store_explicit(&s->seq, seq, memory_order_release);
}
static uint64_t slot_recv(slot_t *s, uint64_t seq, uint8_t *scratch) {
  while (atomic_load_explicit(&s->seq, memory_order_acquire) < seq) {}
  memcpy(scratch, s->bytes, 56); uint64_t w; memcpy(&w, scratch, 8); return w;
}

int main(int argc, char **argv) {
  int ca = argc > 2 ? atoi(argv[1]) : 0, cb = argc > 2 ? atoi(argv[2]) : 1;
  shared_t *sh = mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  memset(sh, 0, sizeof *sh);
  const int batches = 200, per = 500;
  int lens[3] = {40, 176, 0};
  const char *names[3] = {"ring, 40-byte message (a ready message)", "ring, 176-byte message (a lent note)", "slot, 56 bytes in the sequence word's line"};
  pid_t pid = fork();
  int me = pid == 0 ? 1 : 0;
  pin(me ? cb : ca);
  uint8_t msg[256], scratch[256];
  memset(msg, 7, sizeof msg);
  for (int v = 0; v < 3; v++) {
    double t[200];
    uint64_t seq = 0;
    for (int b = 0; b < batches + 20; b++) {
      double t0 = now();
      for (int i = 0; i < per; i++) {
        seq++;
        if (me == 0) {
          if (v < 2) { ring_send(&sh->r[1], 0, msg, lens[v]); ring_recv(&sh->r[0], scratch); }
          else { slot_send(&sh->s[1][0], seq, msg, 56); slot_recv(&sh->s[0][0], seq, scratch); }
        } else {
          if (v < 2) { ring_recv(&sh->r[1], scratch); ring_send(&sh->r[0], 1, msg, lens[v]); }
          else { slot_recv(&sh->s[1][0], seq, scratch); slot_send(&sh->s[0][0], seq, msg, 56); }
        }
      }
      if (b >= 20) t[b - 20] = (now() - t0) / per / 2;
    }
    if (me == 0) {
      for (int i = 0; i < batches; i++) for (int j = i + 1; j < batches; j++) if (t[j] < t[i]) { double x = t[i]; t[i] = t[j]; t[j] = x; }
      printf("cores %d,%d  %-45s %7.1f ns (p10 %.1f, p90 %.1f)\n", ca, cb, names[v], t[batches / 2], t[batches / 10], t[batches * 9 / 10]);
      fflush(stdout);
    }
  }
  if (pid) waitpid(pid, NULL, 0);
  return 0;
}
