/* mtalloc — multi-threaded allocate, use and free, after the FastCode MM
 * challenge's benchmark of that name (seed 002): every thread keeps a working
 * set of blocks of mixed sizes and keeps replacing random members of it: it
 * frees the old block (checking its contents), allocates one of a new size
 * and writes every byte of it, as a program that uses its memory does.
 *
 * SIZE counts replacements in all, split evenly among the threads, so the
 * work is the same at every thread count; each thread's blocks are its own
 * (no cross-thread frees: this is the per-thread path under contention for
 * whatever the allocator shares).
 *
 * time_s: the threads' run, from the start line to the last join. */
#include "bench.h"

#define WORKING_SET 512

static const long SIZES[3] = {50000, 4000000, 20000000};

typedef struct worker {
  int index;
  long replacements;
} worker_t;

static pthread_barrier_t start_line;

/* Mostly small (up to 256 bytes), some medium (up to 8 KiB), a few up to
 * 64 KiB: the mix the challenge describes as typical of a Delphi program. */
static size_t mixed_size(rng_t *rng) {
  uint64_t r = rng_below(rng, 1000);
  if (r < 800) return rng_range(rng, 1, 256);
  if (r < 990) return rng_range(rng, 257, 8192);
  return rng_range(rng, 8193, 65536);
}

static void fill(uint8_t *p, size_t n, uint8_t tag) {
  memset(p, tag, n);
}

static void check_filled(const uint8_t *p, size_t n, uint8_t tag) {
  for (size_t i = 0; i < n; i += 61)
    if (p[i] != tag) bench_fail("block %p (%zu bytes) lost its contents at %zu", (void *)p, n, i);
  if (n > 0 && p[n - 1] != tag) bench_fail("block %p (%zu bytes) lost its last byte", (void *)p, n);
}

static void *worker_run(void *arg) {
  worker_t *w = arg;
  rng_t rng = rng_make(4000 + (uint64_t)w->index);
  uint8_t *blocks[WORKING_SET];
  size_t sizes[WORKING_SET];
  for (int i = 0; i < WORKING_SET; i++) {
    sizes[i] = mixed_size(&rng);
    blocks[i] = bench_malloc(sizes[i]);
    fill(blocks[i], sizes[i], bench_tag((uint64_t)i));
  }
  pthread_barrier_wait(&start_line);
  for (long k = 0; k < w->replacements; k++) {
    int i = (int)rng_below(&rng, WORKING_SET);
    check_filled(blocks[i], sizes[i], bench_tag((uint64_t)i));
    free(blocks[i]);
    sizes[i] = mixed_size(&rng);
    blocks[i] = bench_malloc(sizes[i]);
    fill(blocks[i], sizes[i], bench_tag((uint64_t)i));
  }
  for (int i = 0; i < WORKING_SET; i++) {
    check_filled(blocks[i], sizes[i], bench_tag((uint64_t)i));
    free(blocks[i]);
  }
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t args = bench_init(argc, argv, "mtalloc", SIZES, 2);
  worker_t *workers = bench_calloc((size_t)args.threads, sizeof *workers);
  for (int i = 0; i < args.threads; i++)
    workers[i] = (worker_t){.index = i, .replacements = args.size / args.threads};
  double seconds = bench_run_timed(&start_line, args.threads, worker_run, workers, sizeof *workers);
  bench_report("threads=%d time_s=%.4f replacements=%ld", args.threads, seconds, args.size);
  free(workers);
  return 0;
}
