/* mtrealloc — multi-threaded realloc, after the FastCode MM challenge's
 * realloc benchmark (seed 002): every thread keeps a set of blocks and
 * resizes random members in steps, growing each a little at a time up to a
 * limit and then shrinking it back, as buffers and strings do. The contents
 * a resize keeps are checked.
 *
 * SIZE counts resizes in all, split evenly among the threads.
 *
 * time_s: the threads' run, from the start line to the last join. */
#include "bench.h"

#include <stdbool.h>

#define BLOCKS_PER_THREAD 256
#define GROWTH_LIMIT      (48 * 1024)

static const long SIZES[3] = {50000, 4000000, 20000000};

typedef struct worker {
  int index;
  long resizes;
} worker_t;

typedef struct buffer {
  uint8_t *data;
  size_t size;
  bool growing;
} buffer_t;

static pthread_barrier_t start_line;

/* A step of 1..64 bytes most of the time, now and then a big one. */
static size_t step(rng_t *rng) {
  return rng_below(rng, 16) == 0 ? rng_range(rng, 256, 4096) : rng_range(rng, 1, 64);
}

static void resize(buffer_t *b, rng_t *rng, uint8_t tag) {
  size_t delta = step(rng), new_size;
  if (b->growing) {
    new_size = b->size + delta;
    if (new_size >= GROWTH_LIMIT) b->growing = false;
  } else {
    new_size = b->size > delta + 1 ? b->size - delta : 1;
    if (new_size == 1) b->growing = true;
  }
  size_t kept = new_size < b->size ? new_size : b->size;
  b->data = bench_realloc(b->data, new_size);
  if (b->data[0] != tag || b->data[kept / 2] != tag || b->data[kept - 1] != tag)
    bench_fail("realloc of %p from %zu to %zu bytes lost contents", (void *)b->data, b->size,
               new_size);
  if (new_size > b->size) memset(b->data + b->size, tag, new_size - b->size);
  b->size = new_size;
}

static void *worker_run(void *arg) {
  worker_t *w = arg;
  rng_t rng = rng_make(5000 + (uint64_t)w->index);
  buffer_t buffers[BLOCKS_PER_THREAD];
  for (int i = 0; i < BLOCKS_PER_THREAD; i++) {
    buffers[i] = (buffer_t){.size = rng_range(&rng, 1, 512), .growing = true};
    buffers[i].data = bench_malloc(buffers[i].size);
    memset(buffers[i].data, bench_tag((uint64_t)i), buffers[i].size);
  }
  pthread_barrier_wait(&start_line);
  for (long k = 0; k < w->resizes; k++) {
    int i = (int)rng_below(&rng, BLOCKS_PER_THREAD);
    resize(&buffers[i], &rng, bench_tag((uint64_t)i));
  }
  for (int i = 0; i < BLOCKS_PER_THREAD; i++) free(buffers[i].data);
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t args = bench_init(argc, argv, "mtrealloc", SIZES, 2);
  worker_t *workers = bench_calloc((size_t)args.threads, sizeof *workers);
  for (int i = 0; i < args.threads; i++)
    workers[i] = (worker_t){.index = i, .resizes = args.size / args.threads};
  double seconds = bench_run_timed(&start_line, args.threads, worker_run, workers, sizeof *workers);
  bench_report("threads=%d time_s=%.4f resizes=%ld", args.threads, seconds, args.size);
  free(workers);
  return 0;
}
