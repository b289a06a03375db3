/* scaling — seed 001, the ScaleMM README's demo: N threads each run the same
 * allocate + reallocate + free loop on mixed small sizes, and the result is
 * the average time per thread. Every thread does the same fixed work, so an
 * allocator that scales draws a flat line up to the number of cores and a
 * line rising in proportion to threads/cores after it.
 *
 * SIZE counts the blocks each thread allocates (each is also reallocated
 * and freed). A round allocates BATCH blocks, reallocates each to a new
 * size, then frees them all, checking every block's stamp on the way.
 *
 * time_s: the average over threads of each thread's own run time. */
#include "bench.h"

#define BATCH 256

static const long SIZES[3] = {20000, 2000000, 5000000};

typedef struct worker {
  int index;
  long blocks;
  double seconds; /* written by the worker, read after join */
} worker_t;

static pthread_barrier_t start_line;

/* Mixed small sizes: mostly up to 128 bytes, some up to 1 KiB, a few up to 4 KiB. */
static size_t small_size(rng_t *rng) {
  uint64_t r = rng_below(rng, 100);
  if (r < 70) return rng_range(rng, 8, 128);
  if (r < 95) return rng_range(rng, 129, 1024);
  return rng_range(rng, 1025, 4096);
}

static void *worker_run(void *arg) {
  worker_t *w = arg;
  rng_t rng = rng_make(1000 + (uint64_t)w->index);
  void *blocks[BATCH];
  size_t sizes[BATCH];
  pthread_barrier_wait(&start_line);
  double start = bench_now();
  for (long done = 0; done < w->blocks; done += BATCH) {
    for (int i = 0; i < BATCH; i++) {
      sizes[i] = small_size(&rng);
      blocks[i] = bench_malloc(sizes[i]);
      block_stamp(blocks[i], sizes[i], bench_tag((uint64_t)i));
    }
    for (int i = 0; i < BATCH; i++) {
      size_t new_size = small_size(&rng);
      size_t kept = new_size < sizes[i] ? new_size : sizes[i];
      blocks[i] = bench_realloc(blocks[i], new_size);
      block_check(blocks[i], sizes[i], kept, bench_tag((uint64_t)i), "after realloc");
      sizes[i] = new_size;
      block_stamp(blocks[i], sizes[i], bench_tag((uint64_t)i + 7));
    }
    for (int i = 0; i < BATCH; i++) {
      block_check(blocks[i], sizes[i], sizes[i], bench_tag((uint64_t)i + 7), "before free");
      free(blocks[i]);
    }
  }
  w->seconds = bench_now() - start;
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t args = bench_init(argc, argv, "scaling", SIZES, 1);
  worker_t *workers = bench_calloc((size_t)args.threads, sizeof *workers);
  pthread_t *tids = bench_calloc((size_t)args.threads, sizeof *tids);
  pthread_barrier_init(&start_line, NULL, (unsigned)args.threads);
  for (int i = 0; i < args.threads; i++) workers[i] = (worker_t){.index = i, .blocks = args.size};
  double start = bench_now();
  bench_spawn(tids, args.threads, worker_run, workers, sizeof *workers);
  bench_join(tids, args.threads);
  double wall = bench_now() - start;
  double sum = 0;
  for (int i = 0; i < args.threads; i++) sum += workers[i].seconds;
  bench_report("threads=%d time_s=%.4f wall_s=%.4f blocks_per_thread=%ld", args.threads,
               sum / args.threads, wall, args.size);
  pthread_barrier_destroy(&start_line);
  free(workers);
  free(tids);
  return 0;
}
