/* Memory goes back to the OS once freed.
 *
 * Four threads allocate TOTAL bytes (1 GiB scaled by SHOAL_TEST_SCALE, at
 * least 128 MiB) in small blocks of 16..256 bytes and write every byte, so
 * it is all resident; the peak RSS is measured. Then:
 *   (a) each thread frees its own blocks and stays alive;
 *   (b) the threads exit and the main thread frees all their blocks
 *       (every free lands in a heap whose thread is gone);
 *   (c) the threads stay alive but wait, calling nothing, while the main
 *       thread frees all their blocks (every free lands in the heap of an
 *       idle thread: others must return it, as a producer blocked on a full
 *       queue holds nothing its consumers freed).
 * After the frees the test sleeps twice the purge delay
 * (SHOAL_OPTION_PURGE_DELAY, in ms), each live thread calls malloc/free
 * for a small and a large block (the natural moment for a delayed purge to
 * run: a dead thread's heap is purged at any thread's slow path once its
 * purge is due), and RSS must be below
 * 10 % of the peak. Nothing calls shoal_collect: return must happen through
 * ordinary use. Under TSan or ASan, whose shadow memory stays resident,
 * shoal's committed bytes are measured instead of RSS.
 *
 * Blocks are chained through their first word, so the test's bookkeeping
 * takes no memory of its own. The shoal_ names are used so that TSan runs
 * check shoal, not TSan's allocator. */
#include <pthread.h>

#include "shoal.h"
#include "testhelper.h"

#define MIB ((size_t)1024 * 1024)

enum { WORKER_COUNT = 4 };

typedef struct chained_block_s {
  struct chained_block_s *next;
} chained_block_t;

typedef struct worker_s {
  pthread_t thread;
  unsigned index;
  size_t bytes_wanted;
  chained_block_t *blocks; /* every block this worker made, newest first */
  size_t block_count;
  int mode; /* OWNERS_FREE, MAIN_FREES_AFTER_EXIT, MAIN_FREES_WHILE_IDLE */
} worker_t;

enum { OWNERS_FREE, MAIN_FREES_AFTER_EXIT, MAIN_FREES_WHILE_IDLE };

static worker_t workers[WORKER_COUNT];
static pthread_barrier_t step_barrier; /* workers and main move step by step */

/* Memory as this test measures it; see the file comment. */
static size_t memory_level(void) {
  if (!TEST_SHADOW_SANITIZER) return rss_bytes();
  shoal_stats_t stats;
  shoal_stats_get(&stats);
  return stats.os_committed_bytes;
}

static void allocate_chain(worker_t *worker) {
  test_rng_t rng = {worker->index + 1000};
  size_t allocated = 0;
  while (allocated < worker->bytes_wanted) {
    size_t size = rng_range(&rng, 16, 256);
    chained_block_t *block = shoal_malloc(size);
    CHECK_CTX(block != NULL, "malloc(%zu) failed after %zu bytes", size, allocated);
    memset(block, (int)(size & 0xff), size);
    block->next = worker->blocks;
    worker->blocks = block;
    worker->block_count++;
    allocated += size;
  }
}

static size_t free_chain(chained_block_t *block) {
  size_t count = 0;
  while (block != NULL) {
    chained_block_t *next = block->next;
    shoal_free(block);
    block = next;
    count++;
  }
  return count;
}

/* Ordinary calls that give the allocator a chance to run delayed work: a
 * small block, and a large one, whose malloc takes the slow path where the
 * purge of another (a dead) thread's heap is run once it is due. */
static void allocate_once(void) {
  static const size_t sizes[] = {64, 64 * 1024};
  for (size_t i = 0; i < 2; i++) {
    void *block = shoal_malloc(sizes[i]);
    CHECK(block != NULL);
    memset(block, 1, sizes[i]);
    shoal_free(block);
  }
}

static void *worker_run(void *argument) {
  worker_t *worker = argument;
  allocate_chain(worker);
  pthread_barrier_wait(&step_barrier); /* 1: all allocated, main measures the peak */
  if (worker->mode == MAIN_FREES_AFTER_EXIT) return NULL;
  if (worker->mode == MAIN_FREES_WHILE_IDLE) {
    pthread_barrier_wait(&step_barrier); /* 2: main has freed, waited and measured */
    return NULL;
  }
  pthread_barrier_wait(&step_barrier); /* 2: peak measured */
  CHECK(free_chain(worker->blocks) == worker->block_count);
  worker->blocks = NULL;
  pthread_barrier_wait(&step_barrier); /* 3: all freed, main sleeps */
  pthread_barrier_wait(&step_barrier); /* 4: the purges are due */
  allocate_once();
  pthread_barrier_wait(&step_barrier); /* 5: main measures, we still live */
  pthread_barrier_wait(&step_barrier); /* 6: measured */
  return NULL;
}

/* Free slices go two purge delays after the last page freed; empty
 * segments wait ten in the arena, and a dead thread's heap ten for an
 * adopter (README, "Memory goes back", "Threads come and go"). The delay
 * in force: the option's, longer after an earlier variant's memory, purged,
 * was taken again (purge pacing). */
static long purge_wait_ms(void) {
  long option_delay = shoal_option_get(SHOAL_OPTION_PURGE_DELAY);
  long delay = (long)shoal_stats().purge_delay_ms;
  CHECK(option_delay >= 0 && delay >= option_delay && delay <= 64 * option_delay);
  return 10 * delay + 10;
}

static void check_returned(const char *variant, size_t base_level, size_t peak_level) {
  size_t after_level = memory_level();
  shoal_stats_t stats;
  shoal_stats_get(&stats);
  fprintf(stderr,
          "purge %s: %s before %.1f MiB, peak %.1f MiB, after %.1f MiB; committed %.1f MiB, "
          "purges %zu (%.1f MiB)\n",
          variant, TEST_SHADOW_SANITIZER ? "committed" : "RSS", (double)base_level / MIB,
          (double)peak_level / MIB, (double)after_level / MIB,
          (double)stats.os_committed_bytes / MIB, stats.purges, (double)stats.purged_bytes / MIB);
  CHECK_CTX(after_level < peak_level / 10,
            "purge %s: %.1f MiB still resident, more than 10 %% of the %.1f MiB peak", variant,
            (double)after_level / MIB, (double)peak_level / MIB);
}

static void run_variant(int mode, size_t total_bytes) {
  static const char *const names[] = {"(a) owners free", "(b) main frees after exit",
                                      "(c) main frees while owners idle"};
  const char *variant = names[mode];
  size_t base_level = memory_level();
  CHECK(pthread_barrier_init(&step_barrier, NULL, WORKER_COUNT + 1) == 0);
  for (unsigned i = 0; i < WORKER_COUNT; i++) {
    workers[i] = (worker_t){.index = i, .bytes_wanted = total_bytes / WORKER_COUNT, .mode = mode};
    CHECK(pthread_create(&workers[i].thread, NULL, worker_run, &workers[i]) == 0);
  }
  pthread_barrier_wait(&step_barrier); /* 1 */
  size_t peak_level = memory_level();
  CHECK_CTX(peak_level >= base_level + total_bytes / 2,
            "peak %.1f MiB: the blocks are not resident", (double)peak_level / MIB);

  if (mode == MAIN_FREES_WHILE_IDLE) {
    for (unsigned i = 0; i < WORKER_COUNT; i++)
      CHECK(free_chain(workers[i].blocks) == workers[i].block_count);
    sleep_ms(purge_wait_ms());
    allocate_once();
    check_returned(variant, base_level, peak_level);
    pthread_barrier_wait(&step_barrier); /* 2 */
    for (unsigned i = 0; i < WORKER_COUNT; i++) CHECK(pthread_join(workers[i].thread, NULL) == 0);
  } else if (mode == OWNERS_FREE) {
    pthread_barrier_wait(&step_barrier); /* 2 */
    pthread_barrier_wait(&step_barrier); /* 3 */
    sleep_ms(purge_wait_ms());
    pthread_barrier_wait(&step_barrier); /* 4 */
    allocate_once();
    pthread_barrier_wait(&step_barrier); /* 5 */
    check_returned(variant, base_level, peak_level);
    pthread_barrier_wait(&step_barrier); /* 6 */
    for (unsigned i = 0; i < WORKER_COUNT; i++) CHECK(pthread_join(workers[i].thread, NULL) == 0);
  } else {
    for (unsigned i = 0; i < WORKER_COUNT; i++) CHECK(pthread_join(workers[i].thread, NULL) == 0);
    for (unsigned i = 0; i < WORKER_COUNT; i++)
      CHECK(free_chain(workers[i].blocks) == workers[i].block_count);
    sleep_ms(purge_wait_ms());
    allocate_once();
    check_returned(variant, base_level, peak_level);
  }
  pthread_barrier_destroy(&step_barrier);
}

int main(void) {
  size_t total_bytes = scaled_count((size_t)1024 * MIB, 128 * MIB);
  printf("purge: %zu MiB in 16..256-byte blocks, purge delay %ld ms\n", total_bytes / MIB,
         shoal_option_get(SHOAL_OPTION_PURGE_DELAY));
  fflush(stdout);
  double start = now_seconds();
  run_variant(OWNERS_FREE, total_bytes);
  run_variant(MAIN_FREES_AFTER_EXIT, total_bytes);
  run_variant(MAIN_FREES_WHILE_IDLE, total_bytes);
  fprintf(stderr, "purge: %.2f s\n", now_seconds() - start);
  printf("purge: all checks passed\n");
  return 0;
}
