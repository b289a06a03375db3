/* rptest — after rpmalloc's benchmark as mimalloc-bench runs it (random
 * sizes from 8 to 16000 bytes with a linear falloff, 1000 blocks a thread,
 * 100 operations a loop, a cross-thread handoff every other loop).
 *
 * Each thread keeps an array of BLOCKS slots. A loop: free the blocks that
 * other threads handed to this one; free OPS blocks at random slots; allocate
 * OPS blocks into random slots (freeing what a slot held); and every
 * CROSS_EVERY-th loop allocate OPS more blocks, chain them and hand the chain
 * to the next thread (one atomic push onto its inbox), which frees them in
 * its next loop. A thread whose receiver still holds INBOX_LIMIT handed-over
 * blocks waits (yielding) before it hands over more, so the blocks in flight
 * stay bounded however the threads are scheduled. Sizes fall off linearly from MIN_SIZE to MAX_SIZE
 * (the density at 8 bytes is the highest, near 16000 it is near 0; the mean is about 5.3 KB), so
 * small blocks are much more frequent than large ones.
 *
 * SIZE counts loops in all, split evenly among the threads, so the work is
 * the same at every thread count. Each block holds its id and size with the
 * id's tag stamped through it (every page), checked when it is freed; the
 * counts and id sums of allocations and frees must agree.
 *
 * time_s: the threads' run, from the start line to the last join (the final
 * frees of what the slots and inboxes hold included). */
#include "bench.h"

#include <sched.h>
#include <stdatomic.h>

#define BLOCKS      1000
#define OPS         100
#define CROSS_EVERY 2
#define MIN_SIZE    8
#define MAX_SIZE    16000
#define INBOX_LIMIT (4 * OPS) /* blocks handed over and not yet freed */

static const long SIZES[3] = {400, 60000, 240000};

typedef struct block {
  struct block *next; /* in a handed-off chain */
  uint32_t size;
  uint32_t id;
} block_t;

typedef struct worker {
  _Alignas(64) _Atomic(block_t *) inbox; /* chains from the previous thread */
  atomic_long pending;                   /* blocks handed over, not yet freed */
  _Alignas(64) int index;
  long loops;
  uint64_t allocated, freed;
  uint64_t alloc_sum, free_sum;
} worker_t;

static worker_t *workers;
static int thread_count;
static pthread_barrier_t start_line;
static atomic_int finished; /* threads done with their loops */

/* The smaller of two uniform draws: density falling linearly to 0 at MAX. */
static size_t falloff_size(rng_t *rng) {
  uint64_t span = MAX_SIZE - MIN_SIZE + 1;
  uint64_t a = rng_below(rng, span), b = rng_below(rng, span);
  size_t size = MIN_SIZE + (size_t)(a < b ? a : b);
  return size < sizeof(block_t) + 1 ? sizeof(block_t) + 1 : size;
}

static block_t *block_new(worker_t *w, rng_t *rng, uint32_t id) {
  size_t size = falloff_size(rng);
  block_t *b = bench_malloc(size);
  b->next = NULL;
  b->size = (uint32_t)size;
  b->id = id;
  block_stamp(b + 1, size - sizeof *b, bench_tag(id));
  w->allocated++;
  w->alloc_sum += id;
  return b;
}

static void block_free(worker_t *w, block_t *b, const char *what) {
  if (b == NULL) return;
  size_t body = b->size - sizeof *b;
  block_check(b + 1, body, body, bench_tag(b->id), what);
  w->freed++;
  w->free_sum += b->id;
  free(b);
}

static void drain_inbox(worker_t *w) {
  block_t *b = atomic_exchange_explicit(&w->inbox, NULL, memory_order_acquire);
  long count = 0;
  for (; b != NULL; count++) {
    block_t *next = b->next;
    block_free(w, b, "handed over");
    b = next;
  }
  if (count > 0) atomic_fetch_sub_explicit(&w->pending, count, memory_order_relaxed);
}

/* Waits while the receiver holds INBOX_LIMIT blocks it has not freed yet. */
static void hand_over(worker_t *to, block_t *first, block_t *last) {
  while (atomic_load_explicit(&to->pending, memory_order_relaxed) >= INBOX_LIMIT) sched_yield();
  atomic_fetch_add_explicit(&to->pending, OPS, memory_order_relaxed);
  block_t *head = atomic_load_explicit(&to->inbox, memory_order_relaxed);
  do last->next = head;
  while (!atomic_compare_exchange_weak_explicit(&to->inbox, &head, first, memory_order_release,
                                                memory_order_relaxed));
}

static void *worker_run(void *arg) {
  worker_t *w = arg;
  worker_t *next_thread = &workers[(w->index + 1) % thread_count];
  rng_t rng = rng_make(3000 + (uint64_t)w->index);
  uint32_t id = (uint32_t)w->index << 24;
  block_t *slots[BLOCKS] = {0};
  pthread_barrier_wait(&start_line);
  for (long loop = 0; loop < w->loops; loop++) {
    drain_inbox(w);
    for (int k = 0; k < OPS; k++) {
      size_t i = (size_t)rng_below(&rng, BLOCKS);
      block_free(w, slots[i], "freed");
      slots[i] = NULL;
    }
    for (int k = 0; k < OPS; k++) {
      size_t i = (size_t)rng_below(&rng, BLOCKS);
      block_free(w, slots[i], "replaced");
      slots[i] = block_new(w, &rng, id++);
    }
    if (loop % CROSS_EVERY == CROSS_EVERY - 1) {
      block_t *first = block_new(w, &rng, id++), *last = first;
      for (int k = 1; k < OPS; k++) {
        block_t *b = block_new(w, &rng, id++);
        b->next = first;
        first = b;
      }
      hand_over(next_thread, first, last);
    }
  }
  /* Others may still wait to hand this one blocks: keep taking them until
   * every thread is done, then take the last. */
  atomic_fetch_add(&finished, 1);
  while (atomic_load(&finished) < thread_count) {
    drain_inbox(w);
    sched_yield();
  }
  drain_inbox(w);
  for (size_t i = 0; i < BLOCKS; i++) block_free(w, slots[i], "left at the end");
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t args = bench_init(argc, argv, "rptest", SIZES, 2);
  thread_count = args.threads;
  workers = aligned_alloc(64, sizeof(worker_t) * (size_t)thread_count);
  if (workers == NULL) bench_fail("cannot allocate the workers");
  long per_thread = args.size / thread_count > 0 ? args.size / thread_count : 1;
  for (int i = 0; i < thread_count; i++) {
    memset(&workers[i], 0, sizeof workers[i]);
    atomic_init(&workers[i].inbox, NULL);
    atomic_init(&workers[i].pending, 0);
    workers[i].index = i;
    workers[i].loops = per_thread;
  }
  double seconds =
      bench_run_timed(&start_line, thread_count, worker_run, workers, sizeof(worker_t));

  uint64_t allocated = 0, freed = 0, alloc_sum = 0, free_sum = 0;
  for (int i = 0; i < thread_count; i++) {
    allocated += workers[i].allocated;
    freed += workers[i].freed;
    alloc_sum += workers[i].alloc_sum;
    free_sum += workers[i].free_sum;
  }
  if (allocated != freed || alloc_sum != free_sum)
    bench_fail("blocks lost: %lu allocated, %lu freed", (unsigned long)allocated,
               (unsigned long)freed);
  bench_report("threads=%d time_s=%.4f loops=%ld mops=%.3f", thread_count, seconds,
               per_thread * thread_count, (double)(allocated + freed) / seconds * 1e-6);
  free(workers);
  return 0;
}
