/* Thread churn: many short-lived threads must not make memory grow.
 *
 * THREAD_TOTAL threads (10,000 scaled by SHOAL_TEST_SCALE, at least 500) are
 * created and joined in waves of WAVE_SIZE, so a few are alive at once. Each
 * allocates a working set of mixed sizes, frees most of it, leaves
 * BLOCKS_LEFT blocks in a shared queue and frees blocks earlier threads
 * left there (whose heaps are gone: frees into abandoned heaps). The main
 * thread drains the queue too, so every block is freed by a thread other
 * than the one that made it.
 *
 * Memory must stay flat: once the first 10 % of threads have run (heaps,
 * caches and the queue at their working size), resident memory at the end
 * may exceed that level by at most RSS_GROWTH_LIMIT. The queue holds at most
 * QUEUE_HIGH blocks of at most 4 KiB (8 MiB) and four live threads use well
 * under 1 MiB each, so 32 MiB leaves room for noise while a leak of one 4 KiB page
 * per thread (36 MiB over 9,000 threads) or of any abandoned heap's pages
 * fails. Under TSan or ASan the same bound applies to shoal's committed
 * bytes instead of RSS (their runtimes keep memory per thread of their own).
 *
 * The shoal_ names are used so TSan runs check shoal, not TSan's allocator. */
#include <pthread.h>

#include "shoal.h"
#include "testhelper.h"

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

enum {
  WAVE_SIZE = 4,
  WORKING_SET = 64,
  BLOCKS_LEFT = 6,
  QUEUE_CAPACITY = 4096,
  QUEUE_HIGH = 2048, /* above this, threads and main free from the queue */
};
#define RSS_GROWTH_LIMIT (32 * MIB)

typedef struct queued_block_s {
  void *pointer;
  size_t size;
  uint64_t seed;
} queued_block_t;

/* A ring of blocks left behind, shared by all threads under queue_lock. */
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static queued_block_t queue[QUEUE_CAPACITY];
static size_t queue_head, queue_count;

static void queue_push(queued_block_t block) {
  pthread_mutex_lock(&queue_lock);
  CHECK(queue_count < QUEUE_CAPACITY);
  queue[(queue_head + queue_count) % QUEUE_CAPACITY] = block;
  queue_count++;
  pthread_mutex_unlock(&queue_lock);
}

/* Frees up to `count` of the oldest queued blocks while more than `keep`
 * are queued, checking each still holds its pattern. */
static void queue_free_oldest(size_t count, size_t keep) {
  for (size_t i = 0; i < count; i++) {
    pthread_mutex_lock(&queue_lock);
    if (queue_count <= keep) {
      pthread_mutex_unlock(&queue_lock);
      return;
    }
    queued_block_t block = queue[queue_head];
    queue_head = (queue_head + 1) % QUEUE_CAPACITY;
    queue_count--;
    pthread_mutex_unlock(&queue_lock);
    CHECK_CTX(pattern_check(block.pointer, block.size, block.seed),
              "queued block %p of %zu bytes was corrupted", block.pointer, block.size);
    shoal_free(block.pointer);
  }
}

/* The pattern in the first 256 bytes and one byte of every page: enough to
 * catch a block handed out twice and to make every page resident (a leak
 * of untouched pages would not show in RSS), at a fraction of a full fill. */
static void block_mark(unsigned char *block, size_t size, uint64_t seed) {
  pattern_fill(block, size < 256 ? size : 256, seed);
  for (size_t offset = 4096; offset < size; offset += 4096) block[offset] = (unsigned char)seed;
}

static int block_marked(const unsigned char *block, size_t size, uint64_t seed) {
  if (!pattern_check(block, size < 256 ? size : 256, seed)) return 0;
  for (size_t offset = 4096; offset < size; offset += 4096)
    if (block[offset] != (unsigned char)seed) return 0;
  return 1;
}

static void *churn_thread_run(void *argument) {
  uint64_t thread_number = (uint64_t)(uintptr_t)argument;
  test_rng_t rng = {thread_number * 0x10001};
  unsigned char *blocks[WORKING_SET];
  size_t sizes[WORKING_SET];
  for (int i = 0; i < WORKING_SET; i++) {
    uint64_t kind = rng_next(&rng) % 1000;
    sizes[i] = kind < 900   ? rng_range(&rng, 1, 512)
               : kind < 995 ? rng_range(&rng, 513, 16 * KIB)
                            : rng_range(&rng, 64 * KIB, 256 * KIB);
    blocks[i] = shoal_malloc(sizes[i]);
    CHECK(blocks[i] != NULL);
    block_mark(blocks[i], sizes[i], thread_number + (uint64_t)i);
  }
  for (int i = 0; i < WORKING_SET; i++) {
    CHECK(block_marked(blocks[i], sizes[i], thread_number + (uint64_t)i));
    if (i < BLOCKS_LEFT) {
      /* Left for others: small ones, so the queue's footprint is bounded. */
      size_t size = rng_range(&rng, 8, 4 * KIB);
      void *left = shoal_realloc(blocks[i], size);
      CHECK(left != NULL);
      pattern_fill(left, size, ~thread_number + (uint64_t)i);
      queue_push((queued_block_t){left, size, ~thread_number + (uint64_t)i});
    } else {
      shoal_free(blocks[i]);
    }
  }
  queue_free_oldest(BLOCKS_LEFT, QUEUE_HIGH / 2);
  return NULL;
}

/* Memory as this test bounds it: RSS, or shoal's committed bytes where a
 * sanitizer runtime makes RSS mostly its own. */
static size_t memory_level(void) {
  if (!TEST_SHADOW_SANITIZER) return rss_bytes();
  shoal_stats_t stats;
  shoal_stats_get(&stats);
  return stats.os_committed_bytes;
}

int main(void) {
  size_t thread_total = scaled_count(10000, 500);
  size_t early_mark = thread_total / 10;
  size_t early_level = 0;
  double start = now_seconds();
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, 256 * KIB);

  for (size_t created = 0; created < thread_total; created += WAVE_SIZE) {
    pthread_t wave[WAVE_SIZE];
    for (size_t i = 0; i < WAVE_SIZE; i++)
      CHECK(pthread_create(&wave[i], &attributes, churn_thread_run,
                           (void *)(uintptr_t)(created + i + 1)) == 0);
    for (size_t i = 0; i < WAVE_SIZE; i++) CHECK(pthread_join(wave[i], NULL) == 0);
    queue_free_oldest(QUEUE_CAPACITY, QUEUE_HIGH);
    if (created < early_mark && created + WAVE_SIZE >= early_mark) early_level = memory_level();
  }
  size_t end_level = memory_level();
  pthread_attr_destroy(&attributes);

  shoal_stats_t stats;
  shoal_stats_get(&stats);
  fprintf(stderr,
          "threads: %zu threads in %.2f s; %s after %zu threads %.1f MiB, at the end %.1f MiB; "
          "heaps %zu (abandoned %zu), remote frees %zu\n",
          thread_total, now_seconds() - start, TEST_SHADOW_SANITIZER ? "committed" : "RSS",
          early_mark, (double)early_level / MIB, (double)end_level / MIB, stats.heaps,
          stats.heaps_abandoned, stats.remote_frees);
  CHECK(early_level > 0);
  CHECK_CTX(end_level < early_level + RSS_GROWTH_LIMIT, "memory grew by %.1f MiB over the churn",
            ((double)end_level - (double)early_level) / MIB);

  queue_free_oldest(QUEUE_CAPACITY, 0);
  CHECK(queue_count == 0);
  printf("threads: all checks passed\n");
  return 0;
}
