/* bench.h — what every workload shares: arguments, clock, random numbers,
 * block stamps, RSS, the result line.
 *
 * A workload is one C file that includes this header first. It is
 * deterministic (fixed seeds and op counts) and checks its own data: on
 * corruption it prints "<name>: error: ..." and exits 1. It never links to
 * an allocator; the runner picks one with LD_PRELOAD.
 *
 *   usage: <workload> SIZE [THREADS]
 *     SIZE     tiny | quick | full, or a count whose unit the workload names
 *     THREADS  for the multi-threaded workloads (each has a default)
 *
 * Output: one line, "<name> key=value ...". `time_s` is the workload's main
 * time (each file says what it covers); `peak_rss_kb` (VmHWM) comes last. The
 * runner reads VmHWM from the workload itself because ru_maxrss from wait4
 * starts at the forking parent's high-water mark on Linux.
 *
 * Build flags: -O2 -fno-builtin-malloc -fno-builtin-free (and calloc,
 * realloc), so that the compiler cannot elide an allocation the workload
 * exists to measure. */
#ifndef SHOAL_BENCH_H
#define SHOAL_BENCH_H

#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_PAGE 4096

static const char *bench_name = "bench";

/* ---- failure and checked allocation ---------------------------------- */

#define BENCH_PRINTF __attribute__((format(printf, 1, 2)))

BENCH_PRINTF __attribute__((noreturn)) static inline void bench_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: error: ", bench_name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static inline void *bench_malloc(size_t n) {
  void *p = malloc(n);
  if (p == NULL) bench_fail("malloc(%zu) returned NULL", n);
  return p;
}

static inline void *bench_calloc(size_t count, size_t n) {
  void *p = calloc(count, n);
  if (p == NULL) bench_fail("calloc(%zu, %zu) returned NULL", count, n);
  return p;
}

static inline void *bench_realloc(void *p, size_t n) {
  void *q = realloc(p, n);
  if (q == NULL) bench_fail("realloc(%p, %zu) returned NULL", p, n);
  return q;
}

/* ---- arguments -------------------------------------------------------- */

typedef struct bench_args {
  long size;   /* the count picked by SIZE */
  int threads; /* THREADS, or the workload's default */
} bench_args_t;

/* sizes[] holds the tiny, quick and full counts; a number is taken as is. */
static inline bench_args_t bench_init(int argc, char **argv, const char *name, const long sizes[3],
                                      int default_threads) {
  static const char *names[3] = {"tiny", "quick", "full"};
  bench_name = name;
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s tiny|quick|full|COUNT [THREADS]\n", name);
    exit(2);
  }
  bench_args_t args = {.size = -1, .threads = default_threads};
  for (int i = 0; i < 3; i++)
    if (strcmp(argv[1], names[i]) == 0) args.size = sizes[i];
  if (args.size < 0) {
    char *end;
    args.size = strtol(argv[1], &end, 10);
    if (*end != '\0' || args.size <= 0) bench_fail("bad size '%s'", argv[1]);
  }
  if (argc == 3) {
    char *end;
    args.threads = (int)strtol(argv[2], &end, 10);
    if (*end != '\0' || args.threads <= 0 || args.threads > 1024)
      bench_fail("bad thread count '%s'", argv[2]);
  }
  return args;
}

/* ---- time ------------------------------------------------------------- */

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void bench_sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* ---- random numbers: splitmix64, fixed seeds -------------------------- */

typedef struct rng {
  uint64_t state;
} rng_t;

static inline rng_t rng_make(uint64_t seed) {
  return (rng_t){.state = seed * 0x9E3779B97F4A7C15ull + 1};
}

static inline uint64_t rng_next(rng_t *r) {
  uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, n), n > 0 (the modulo bias is irrelevant here). */
static inline uint64_t rng_below(rng_t *r, uint64_t n) {
  return rng_next(r) % n;
}

/* Uniform in [lo, hi]. */
static inline size_t rng_range(rng_t *r, size_t lo, size_t hi) {
  return lo + (size_t)rng_below(r, (uint64_t)(hi - lo + 1));
}

/* ---- block stamps ----------------------------------------------------- */
/* A stamp writes a block's tag at offsets 0, n/2, n-1 and every BENCH_PAGE
 * bytes: it touches every page of a large block and costs a few stores on a
 * small one. Two blocks that overlap, or a realloc that loses data, show as
 * a wrong tag. Tags are never 0, so a calloc'd block must read as all 0. */

static inline uint8_t bench_tag(uint64_t id) {
  return (uint8_t)(id % 251 + 1);
}

static inline void block_stamp(void *p, size_t n, uint8_t tag) {
  uint8_t *b = p;
  for (size_t i = 0; i < n; i += BENCH_PAGE) b[i] = tag;
  b[n / 2] = tag;
  b[n - 1] = tag;
}

/* Checks the stamp of an n-byte block at the offsets below `upto` (upto <= n
 * after a shrinking realloc). Pass tag 0 to check a calloc'd block. */
static inline void block_check(const void *p, size_t n, size_t upto, uint8_t tag,
                               const char *what) {
  const uint8_t *b = p;
  size_t offsets[3] = {0, n / 2, n - 1};
  for (int k = 0; k < 3; k++)
    if (offsets[k] < upto && b[offsets[k]] != tag)
      bench_fail("%s: block %p (%zu bytes) has %u at offset %zu, expected %u", what, p, n,
                 b[offsets[k]], offsets[k], tag);
  for (size_t i = BENCH_PAGE; i < upto; i += BENCH_PAGE)
    if (b[i] != tag)
      bench_fail("%s: block %p (%zu bytes) has %u at offset %zu, expected %u", what, p, n, b[i], i,
                 tag);
}

/* ---- memory use ------------------------------------------------------- */

/* A field of /proc/self/status in KiB ("VmRSS", "VmHWM"); -1 if unknown. */
static inline long bench_status_kb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  long kb = -1;
  size_t len = strlen(field);
  while (fgets(line, sizeof line, f) != NULL)
    if (strncmp(line, field, len) == 0 && line[len] == ':') {
      kb = strtol(line + len + 1, NULL, 10);
      break;
    }
  fclose(f);
  return kb;
}

static inline long bench_rss_kb(void) {
  return bench_status_kb("VmRSS");
}

/* ---- threads ---------------------------------------------------------- */

/* Starts n threads running fn(args + i * stride). */
static inline void bench_spawn(pthread_t *tids, int n, void *(*fn)(void *), void *args,
                               size_t stride) {
  for (int i = 0; i < n; i++)
    if (pthread_create(&tids[i], NULL, fn, (char *)args + (size_t)i * stride) != 0)
      bench_fail("pthread_create failed for thread %d", i);
}

static inline void bench_join(pthread_t *tids, int n) {
  for (int i = 0; i < n; i++) pthread_join(tids[i], NULL);
}

/* Runs n threads of fn(args + i * stride), each of which waits once on
 * *start_line when ready; releases them together and returns the seconds
 * from the release to the last join. */
static inline double bench_run_timed(pthread_barrier_t *start_line, int n, void *(*fn)(void *),
                                     void *args, size_t stride) {
  pthread_t *tids = calloc((size_t)n, sizeof *tids);
  if (tids == NULL) bench_fail("out of memory for %d threads", n);
  pthread_barrier_init(start_line, NULL, (unsigned)n + 1);
  bench_spawn(tids, n, fn, args, stride);
  pthread_barrier_wait(start_line);
  double start = bench_now();
  bench_join(tids, n);
  double seconds = bench_now() - start;
  pthread_barrier_destroy(start_line);
  free(tids);
  return seconds;
}

/* ---- the result line -------------------------------------------------- */

BENCH_PRINTF static inline void bench_report(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s ", bench_name);
  vprintf(fmt, ap);
  printf(" peak_rss_kb=%ld\n", bench_status_kb("VmHWM"));
  va_end(ap);
  fflush(stdout);
}

#endif
