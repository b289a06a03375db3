/* mstress — threads that come and go, after mimalloc-bench's mstress (a
 * server-like stress test: sizes spread over powers of two, objects that
 * migrate between threads, some that live long, unequal threads, and all
 * threads replaced by new ones after each phase while some objects survive).
 *
 * The run is ROUNDS rounds. A round starts THREADS threads and ends when all
 * have exited; the next round starts new ones. Thread i of a round does a
 * share of the round's allocations in proportion to (i mod 8) + 1, so some
 * threads work eight times longer than others. Each step of a thread:
 *   - allocates an object: three times in four a short-lived one (8 bytes to
 *     2 KiB, every power of two as likely, one in 100 of them 32 times
 *     bigger), put in the thread's own list; else a kept one (16 bytes to
 *     4 KiB, same spread), held until the thread exits;
 *   - two times in three frees a random member of its list;
 *   - one time in four swaps a random member of its list with a random slot
 *     of a shared array of SHARED_SLOTS objects (one atomic exchange): what
 *     it gets back was allocated by another thread, or in an earlier round
 *     by a thread that has exited, and it is freed here later.
 * A thread that exits frees its list and its kept objects; what it left in
 * the shared array lives on into the next round. The main thread frees the
 * array's last contents after the last round (not timed).
 *
 * SIZE counts allocations in all rounds together, so the work is the same at
 * every thread count. Every object carries its id and size, with the id's
 * tag stamped in its body, checked when it is freed; the counts and id sums
 * of allocations and frees must agree.
 *
 * time_s: all rounds, thread starts and exits included. */
#include "bench.h"

#include <stdatomic.h>

#define ROUNDS       25
#define SHARED_SLOTS 1000

static const long SIZES[3] = {100000, 6000000, 24000000};

typedef struct object {
  uint64_t id;
  uint64_t size;
} object_t;

typedef struct worker {
  _Alignas(64) int index;
  int round;
  long allocs;
  uint64_t allocated, freed;    /* counts */
  uint64_t alloc_sum, free_sum; /* sums of ids */
} worker_t;

static _Atomic(object_t *) shared[SHARED_SLOTS];

/* Every power of two from 2^lo to 2^hi as likely, uniform within it. */
static size_t power_spread(rng_t *rng, int lo, int hi) {
  int k = lo + (int)rng_below(rng, (uint64_t)(hi - lo + 1));
  size_t size = rng_range(rng, (size_t)1 << k, ((size_t)2 << k) - 1);
  return size < sizeof(object_t) + 1 ? sizeof(object_t) + 1 : size;
}

static object_t *object_new(worker_t *w, uint64_t id, size_t size) {
  object_t *o = bench_malloc(size);
  o->id = id;
  o->size = size;
  block_stamp(o + 1, size - sizeof *o, bench_tag(id));
  w->allocated++;
  w->alloc_sum += id;
  return o;
}

static void object_free(worker_t *w, object_t *o, const char *what) {
  if (o == NULL) return;
  size_t body = o->size - sizeof *o;
  block_check(o + 1, body, body, bench_tag(o->id), what);
  w->freed++;
  w->free_sum += o->id;
  free(o);
}

static void *worker_run(void *arg) {
  worker_t *w = arg;
  rng_t rng = rng_make(9000 + (uint64_t)w->round * 1000 + (uint64_t)w->index);
  uint64_t id = ((uint64_t)w->round << 48) | ((uint64_t)w->index << 32);
  size_t capacity = (size_t)w->allocs + 1;
  object_t **list = bench_calloc(capacity, sizeof *list);
  object_t **kept = bench_calloc(capacity, sizeof *kept);
  size_t listed = 0, held = 0;
  for (long step = 0; step < w->allocs; step++) {
    if (rng_below(&rng, 4) != 0) {
      size_t size = power_spread(&rng, 3, 10);
      if (rng_below(&rng, 100) == 0) size *= 32;
      list[listed++] = object_new(w, id++, size);
    } else {
      kept[held++] = object_new(w, id++, power_spread(&rng, 4, 11));
    }
    if (rng_below(&rng, 3) != 0 && listed > 0) {
      size_t i = (size_t)rng_below(&rng, listed);
      object_free(w, list[i], "freed by its thread");
      list[i] = NULL;
    }
    if (rng_below(&rng, 4) == 0 && listed > 0) {
      size_t i = (size_t)rng_below(&rng, listed);
      size_t slot = (size_t)rng_below(&rng, SHARED_SLOTS);
      list[i] = atomic_exchange_explicit(&shared[slot], list[i], memory_order_acq_rel);
    }
  }
  for (size_t i = 0; i < listed; i++) object_free(w, list[i], "freed at exit");
  for (size_t i = 0; i < held; i++) object_free(w, kept[i], "kept, freed at exit");
  free(list);
  free(kept);
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t args = bench_init(argc, argv, "mstress", SIZES, 2);
  int n = args.threads;
  worker_t *workers = aligned_alloc(64, sizeof(worker_t) * (size_t)n);
  pthread_t *tids = bench_calloc((size_t)n, sizeof *tids);
  if (workers == NULL) bench_fail("cannot allocate the workers");
  long weights = 0;
  for (int i = 0; i < n; i++) weights += i % 8 + 1;
  long per_round = args.size / ROUNDS;

  uint64_t allocated = 0, freed = 0, alloc_sum = 0, free_sum = 0;
  double start = bench_now();
  for (int round = 0; round < ROUNDS; round++) {
    for (int i = 0; i < n; i++) {
      long share = per_round * (i % 8 + 1) / weights;
      workers[i] = (worker_t){.index = i, .round = round, .allocs = share > 0 ? share : 1};
    }
    bench_spawn(tids, n, worker_run, workers, sizeof(worker_t));
    bench_join(tids, n);
    for (int i = 0; i < n; i++) {
      allocated += workers[i].allocated;
      freed += workers[i].freed;
      alloc_sum += workers[i].alloc_sum;
      free_sum += workers[i].free_sum;
    }
  }
  double seconds = bench_now() - start;

  worker_t last = {0};
  for (size_t slot = 0; slot < SHARED_SLOTS; slot++)
    object_free(&last, atomic_load(&shared[slot]), "left in the shared array");
  freed += last.freed;
  free_sum += last.free_sum;
  if (allocated != freed || alloc_sum != free_sum)
    bench_fail("objects lost: %lu allocated, %lu freed", (unsigned long)allocated,
               (unsigned long)freed);
  bench_report("threads=%d time_s=%.4f rounds=%d allocs=%lu", n, seconds, ROUNDS,
               (unsigned long)allocated);
  free(workers);
  free(tids);
  return 0;
}
