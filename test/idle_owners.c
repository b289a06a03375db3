/* Producers that block while consumers free their blocks: the heaps of
 * idle owners are served by the freeing threads (drained, purged) and lend
 * their half-free segments to other producers, while the owners may wake
 * at any moment and free blocks of their own in those very segments.
 *
 * PRODUCERS threads each make BATCHES batches of BATCH blocks (16..2048
 * bytes, one in 64 a large block of 40..200 KiB) and put them on one
 * bounded queue (QUEUE_SLOTS batches: producers block on it, so their
 * heaps go idle); CONSUMERS threads take batches, check every block's
 * pattern and free it. Every producer also keeps a few of its own blocks
 * of each batch back and frees them itself some batches later: frees of
 * its own blocks in pages that, meanwhile, a consumer may have served or
 * another producer may have borrowed. At the end every block has been
 * checked and freed once, the counts agree, and shoal's live block count
 * is back where it started (but for the thread library's records).
 *
 * The shoal_ names are used so TSan runs check shoal, not TSan's allocator. */
#include <pthread.h>
#include <stdatomic.h>

#include "shoal.h"
#include "testhelper.h"

enum {
  PRODUCERS = 6,
  CONSUMERS = 3,
  BATCH = 1024,
  QUEUE_SLOTS = 8,
  KEPT_PER_BATCH = 16, /* blocks a producer frees itself */
  KEPT_BATCHES = 4,    /* ... this many batches later */
};

typedef struct block_ref_s {
  void *pointer;
  size_t size;
  uint64_t seed;
} block_ref_t;

typedef struct batch_s {
  block_ref_t blocks[BATCH];
} batch_t;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t not_empty, not_full;
  batch_t *slots[QUEUE_SLOTS];
  size_t head, count;
} queue = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, {NULL}, 0, 0};

static size_t batches_per_producer;
static _Atomic(size_t) blocks_made, blocks_freed;

static void queue_put(batch_t *batch) {
  pthread_mutex_lock(&queue.lock);
  while (queue.count == QUEUE_SLOTS) pthread_cond_wait(&queue.not_full, &queue.lock);
  queue.slots[(queue.head + queue.count) % QUEUE_SLOTS] = batch;
  queue.count++;
  pthread_cond_signal(&queue.not_empty);
  pthread_mutex_unlock(&queue.lock);
}

static batch_t *queue_take(void) {
  pthread_mutex_lock(&queue.lock);
  while (queue.count == 0) pthread_cond_wait(&queue.not_empty, &queue.lock);
  batch_t *batch = queue.slots[queue.head];
  queue.head = (queue.head + 1) % QUEUE_SLOTS;
  queue.count--;
  pthread_cond_signal(&queue.not_full);
  pthread_mutex_unlock(&queue.lock);
  return batch;
}

static void block_free_checked(const block_ref_t *ref, const char *who) {
  CHECK_CTX(block_check(ref->pointer, ref->size, ref->seed),
            "%s: a block of %zu bytes lost its contents", who, ref->size);
  shoal_free(ref->pointer);
  atomic_fetch_add_explicit(&blocks_freed, 1, memory_order_relaxed);
}

static void *producer_run(void *argument) {
  size_t index = (size_t)(uintptr_t)argument;
  test_rng_t rng = {index * 7919 + 1};
  block_ref_t kept[KEPT_BATCHES][KEPT_PER_BATCH];
  size_t kept_count[KEPT_BATCHES] = {0};
  for (size_t n = 0; n < batches_per_producer; n++) {
    size_t ring = n % KEPT_BATCHES; /* kept KEPT_BATCHES batches ago: free them now */
    for (size_t i = 0; i < kept_count[ring]; i++) block_free_checked(&kept[ring][i], "producer");
    kept_count[ring] = 0;
    batch_t *batch = shoal_malloc(sizeof *batch);
    CHECK(batch != NULL);
    for (size_t i = 0; i < BATCH; i++) {
      size_t size = rng_range(&rng, 0, 63) == 0 ? rng_range(&rng, 40 * 1024, 200 * 1024)
                                                : rng_range(&rng, 16, 2048);
      block_ref_t ref = {shoal_malloc(size), size, rng_next(&rng)};
      CHECK_CTX(ref.pointer != NULL, "malloc(%zu) failed", size);
      block_fill(ref.pointer, size, ref.seed);
      atomic_fetch_add_explicit(&blocks_made, 1, memory_order_relaxed);
      if (i % (BATCH / KEPT_PER_BATCH) == 0 && kept_count[ring] < KEPT_PER_BATCH) {
        kept[ring][kept_count[ring]++] = ref;
        ref.pointer = NULL; /* the consumer skips it */
      }
      batch->blocks[i] = ref;
    }
    queue_put(batch);
  }
  for (size_t ring = 0; ring < KEPT_BATCHES; ring++)
    for (size_t i = 0; i < kept_count[ring]; i++) block_free_checked(&kept[ring][i], "producer");
  return NULL;
}

static void *consumer_run(void *argument) {
  (void)argument;
  for (;;) {
    batch_t *batch = queue_take();
    if (batch == NULL) return NULL;
    for (size_t i = 0; i < BATCH; i++)
      if (batch->blocks[i].pointer != NULL) block_free_checked(&batch->blocks[i], "consumer");
    shoal_free(batch);
  }
}

int main(void) {
  batches_per_producer = scaled_count(200, 20);
  printf("idle_owners: %d producers, %d consumers, %zu batches of %d blocks each\n", PRODUCERS,
         CONSUMERS, batches_per_producer, BATCH);
  fflush(stdout);
  shoal_collect(true);
  shoal_stats_t before;
  shoal_stats_get(&before);
  double start = now_seconds();

  pthread_t producers[PRODUCERS], consumers[CONSUMERS];
  for (size_t i = 0; i < CONSUMERS; i++)
    CHECK(pthread_create(&consumers[i], NULL, consumer_run, NULL) == 0);
  for (size_t i = 0; i < PRODUCERS; i++)
    CHECK(pthread_create(&producers[i], NULL, producer_run, (void *)(uintptr_t)i) == 0);
  for (size_t i = 0; i < PRODUCERS; i++) CHECK(pthread_join(producers[i], NULL) == 0);
  for (size_t i = 0; i < CONSUMERS; i++) queue_put(NULL);
  for (size_t i = 0; i < CONSUMERS; i++) CHECK(pthread_join(consumers[i], NULL) == 0);

  size_t made = atomic_load(&blocks_made), freed = atomic_load(&blocks_freed);
  CHECK_CTX(made == PRODUCERS * batches_per_producer * BATCH && freed == made,
            "%zu blocks made, %zu freed", made, freed);
  shoal_collect(true);
  shoal_stats_t after;
  shoal_stats_get(&after);
  /* The thread library may keep a record of each thread it created (glibc
   * keeps the TLS vector of every stack it caches for reuse). */
  if (after.counters_enabled)
    CHECK_CTX(after.live_blocks >= before.live_blocks &&
                  after.live_blocks - before.live_blocks <= PRODUCERS + CONSUMERS,
              "%zu blocks live before, %zu after", before.live_blocks, after.live_blocks);
  fprintf(stderr, "idle_owners: %.2f s, %zu remote frees, peak committed %.1f MiB\n",
          now_seconds() - start, after.remote_frees - before.remote_frees,
          (double)after.os_peak_committed_bytes / (1024.0 * 1024.0));
  printf("idle_owners: all checks passed\n");
  return 0;
}
