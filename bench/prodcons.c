/* prodcons — producer and consumers: one thread allocates every block, others
 * free them. Each consumer has its own bounded single-producer queue; the
 * producer deals blocks to the queues in turn (1:1 with one consumer, 1:N
 * with N). Every free is a cross-thread free, and memory that the consumers'
 * frees leave in their caches, out of the producer's reach, shows as peak RSS.
 * At most WINDOW_BLOCKS blocks are in flight over all the queues (each queue
 * holds WINDOW_BLOCKS / N from four consumers up): unbounded but by the
 * queues, what was in flight at the peak followed the producer's speed
 * against the consumers' turns on the cores (64 consumers, full size: 3 MB
 * under glibc, 28 under shoal), and the peak measured the scheduler more
 * than the allocator.
 * This is the pattern DESIGN.md asks to measure remote-free batching on.
 *
 * SIZE counts the blocks produced; THREADS is the number of consumers.
 * Sizes: 24..1024 bytes, one in 32 up to 16 KiB. A consumer checks each
 * block's stamp and sequence number, then frees it.
 *
 * time_s: from the first allocation to the last free. peak_live_kb: the most
 * bytes produced and not yet freed, sampled by the producer every
 * LIVE_SAMPLE blocks: how far the consumers lag depends on how fast the
 * producer runs, so peak RSS less this is what the allocator itself held. */
#include "bench.h"

#include <sched.h>
#include <stdatomic.h>

#define QUEUE_SLOTS   1024 /* per consumer at most; a power of two */
#define WINDOW_BLOCKS 4096 /* in flight over all the queues, from four consumers up */
#define LIVE_SAMPLE   4096 /* blocks between two looks at the bytes in flight */

static const long SIZES[3] = {20000, 3000000, 10000000};

/* A single-producer single-consumer ring; head and tail on their own lines. */
typedef struct queue {
  _Alignas(64) atomic_size_t head; /* next slot to read; written by the consumer */
  _Alignas(64) atomic_size_t tail; /* next slot to write; written by the producer */
  size_t capacity;                 /* slots the producer may fill: QUEUE_SLOTS or fewer */
  _Alignas(64) void *slots[QUEUE_SLOTS];
  uint64_t sum; /* consumer's sum of sequence numbers, read after join */
  /* Bytes the consumer freed so far: written by it alone, read by the producer. */
  _Alignas(64) atomic_uint_least64_t freed_bytes;
} queue_t;

typedef struct block_header {
  uint64_t sequence;
  uint64_t size;
} block_header_t;

static void queue_push(queue_t *q, void *p) {
  size_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
  while (tail - atomic_load_explicit(&q->head, memory_order_acquire) == q->capacity) sched_yield();
  q->slots[tail % QUEUE_SLOTS] = p;
  atomic_store_explicit(&q->tail, tail + 1, memory_order_release);
}

static void *queue_pop(queue_t *q) {
  size_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
  while (atomic_load_explicit(&q->tail, memory_order_acquire) == head) sched_yield();
  void *p = q->slots[head % QUEUE_SLOTS];
  atomic_store_explicit(&q->head, head + 1, memory_order_release);
  return p;
}

static void *consumer_run(void *arg) {
  queue_t *q = arg;
  uint64_t freed_bytes = 0;
  for (;;) {
    block_header_t *b = queue_pop(q);
    if (b == NULL) break;
    size_t body = b->size - sizeof *b;
    block_check(b + 1, body, body, bench_tag(b->sequence), "consumer");
    q->sum += b->sequence;
    freed_bytes += b->size;
    free(b);
    atomic_store_explicit(&q->freed_bytes, freed_bytes, memory_order_relaxed);
  }
  return NULL;
}

static size_t block_size(rng_t *rng) {
  if (rng_below(rng, 32) == 0) return rng_range(rng, 1025, 16384);
  return rng_range(rng, 24, 1024);
}

int main(int argc, char **argv) {
  bench_args_t args = bench_init(argc, argv, "prodcons", SIZES, 1);
  int consumers = args.threads;
  queue_t *queues = aligned_alloc(64, sizeof(queue_t) * (size_t)consumers);
  if (queues == NULL) bench_fail("cannot allocate the queues");
  memset(queues, 0, sizeof(queue_t) * (size_t)consumers);
  for (int c = 0; c < consumers; c++)
    queues[c].capacity =
        consumers * QUEUE_SLOTS > WINDOW_BLOCKS ? WINDOW_BLOCKS / (size_t)consumers : QUEUE_SLOTS;
  pthread_t *tids = bench_calloc((size_t)consumers, sizeof *tids);
  rng_t rng = rng_make(42);
  uint64_t produced_bytes = 0, peak_live_bytes = 0;

  double start = bench_now();
  bench_spawn(tids, consumers, consumer_run, queues, sizeof(queue_t));
  for (long i = 0; i < args.size; i++) {
    size_t size = block_size(&rng);
    block_header_t *b = bench_malloc(size);
    block_stamp(b + 1, size - sizeof *b, bench_tag((uint64_t)i));
    b->sequence = (uint64_t)i;
    b->size = size;
    produced_bytes += size; /* first: its consumer may free it before the push returns */
    queue_push(&queues[i % consumers], b);
    if (i % LIVE_SAMPLE == 0) {
      uint64_t freed = 0;
      for (int c = 0; c < consumers; c++)
        freed += atomic_load_explicit(&queues[c].freed_bytes, memory_order_relaxed);
      if (produced_bytes - freed > peak_live_bytes) peak_live_bytes = produced_bytes - freed;
    }
  }
  for (int c = 0; c < consumers; c++) queue_push(&queues[c], NULL);
  bench_join(tids, consumers);
  double seconds = bench_now() - start;

  uint64_t sum = 0;
  for (int c = 0; c < consumers; c++) sum += queues[c].sum;
  uint64_t n = (uint64_t)args.size;
  if (sum != n * (n - 1) / 2) bench_fail("blocks lost: sequence sum %lu", (unsigned long)sum);
  bench_report("consumers=%d time_s=%.4f blocks=%ld peak_live_kb=%lu", consumers, seconds,
               args.size, (unsigned long)(peak_live_bytes >> 10));
  free(queues);
  free(tids);
  return 0;
}
