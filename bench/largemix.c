/* largemix — large blocks allocated and freed in random order, after
 * mimalloc-bench's malloc-large (large allocations of several MiB with a
 * bounded number live), here over the whole span where allocators hand
 * blocks from their own pages over to the kernel's mappings.
 *
 * Each thread keeps SLOTS slots, which it fills before the clock starts. A
 * replacement picks a random slot, checks and frees its block, and allocates
 * a new one of 64 KiB to 5 MiB (each power of two from 64 KiB to 4 MiB as
 * likely, uniform within it, the last capped at 5 MiB: mean about 1.1 MiB),
 * stamped on every page so the memory is touched. So at most SLOTS blocks a
 * thread are live (about 20 MiB on average), and the allocator decides
 * whether a freed block's pages are kept for the next one or go back to the
 * kernel and fault in again.
 *
 * SIZE counts replacements in all, split evenly among the threads; THREADS
 * is 1 (the public run) or more, each with its own slots and seed.
 *
 * time_s: the replacements, from the start line to the last join. */
#include "bench.h"

#define SLOTS    20
#define KIB      ((size_t)1024)
#define MIB      (KIB * KIB)
#define MIN_SIZE (64 * KIB)
#define MAX_SIZE (5 * MIB)

static const long SIZES[3] = {100, 24000, 100000};

typedef struct slot {
  uint8_t *block;
  size_t size;
  uint64_t id;
} slot_t;

typedef struct worker {
  _Alignas(64) int index;
  long replacements;
  slot_t slots[SLOTS];
  rng_t rng;
  uint64_t next_id;
} worker_t;

static pthread_barrier_t start_line;

static size_t large_size(rng_t *rng) {
  size_t low = MIN_SIZE << rng_below(rng, 7); /* 64 KiB .. 4 MiB */
  size_t high = 2 * low - 1 < MAX_SIZE ? 2 * low - 1 : MAX_SIZE;
  return rng_range(rng, low, high);
}

static void slot_fill(worker_t *w, slot_t *s) {
  s->size = large_size(&w->rng);
  s->id = w->next_id++;
  s->block = bench_malloc(s->size);
  block_stamp(s->block, s->size, bench_tag(s->id));
}

static void slot_free(slot_t *s) {
  block_check(s->block, s->size, s->size, bench_tag(s->id), "freed");
  free(s->block);
}

static void *worker_run(void *arg) {
  worker_t *w = arg;
  for (int k = 0; k < SLOTS; k++) slot_fill(w, &w->slots[k]);
  pthread_barrier_wait(&start_line);
  for (long i = 0; i < w->replacements; i++) {
    slot_t *s = &w->slots[rng_below(&w->rng, SLOTS)];
    slot_free(s);
    slot_fill(w, s);
  }
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t args = bench_init(argc, argv, "largemix", SIZES, 1);
  int n = args.threads;
  worker_t *workers = aligned_alloc(64, sizeof(worker_t) * (size_t)n);
  if (workers == NULL) bench_fail("cannot allocate the workers");
  long per_thread = args.size / n > 0 ? args.size / n : 1;
  for (int i = 0; i < n; i++)
    workers[i] =
        (worker_t){.index = i, .replacements = per_thread, .rng = rng_make(600 + (uint64_t)i)};
  double seconds = bench_run_timed(&start_line, n, worker_run, workers, sizeof(worker_t));

  uint64_t bytes = 0;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < SLOTS; k++) {
      bytes += workers[i].slots[k].size;
      slot_free(&workers[i].slots[k]);
    }
  bench_report("threads=%d time_s=%.4f replacements=%ld live_end_kb=%lu", n, seconds,
               per_thread * n, (unsigned long)(bytes / KIB));
  free(workers);
  return 0;
}
