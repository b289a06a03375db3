/* stats_threads.c — the statistics add up across threads.
 *
 * Worker threads allocate blocks of six sizes (small, medium, large, huge),
 * hand them to the next worker, which frees them: every free but the huge
 * ones is a cross-thread free. While all blocks are held (workers parked at
 * a barrier, each having published its counts with shoal_collect, as a
 * running thread's latest counts wait in its pages until it takes a slow
 * path) each class's live count must have grown by exactly the blocks
 * held; after the join, allocated - freed = live in every row and in total,
 * remote frees grew by at least one per handed block, and live blocks and
 * bytes are back to the baseline.
 *
 * The blocks go through shoal_malloc/shoal_free, so that the figures are
 * shoal's even in sanitizer builds, whose runtime keeps malloc. A first
 * round before the baseline lets the C library cache its thread stacks
 * (and the TLS vectors it allocates with them), so the measured round
 * allocates nothing of its own that outlives it. */
#include <pthread.h>

#include "shoal.h"
#include "testhelper.h"

#define WORKERS 4

typedef struct size_plan_s {
  size_t size;
  size_t count; /* per worker, before scaling */
} size_plan_t;

static const size_plan_t plans[] = {
    {48, 2000}, {200, 1000}, {3000, 300}, {20000, 60}, {200000, 6}, {6 << 20, 1},
};
#define PLAN_COUNT (sizeof plans / sizeof plans[0])

static size_t plan_count(size_t plan) {
  return plans[plan].count == 1 ? 1 : scaled_count(plans[plan].count, 8);
}

typedef struct worker_s {
  pthread_t thread;
  int index;
  void **blocks[PLAN_COUNT]; /* what this worker allocated, freed by the next one */
} worker_t;

static worker_t workers[WORKERS];
static pthread_barrier_t all_allocated, snapshot_taken, all_freed;

static void *worker_run(void *argument) {
  worker_t *self = argument;
  for (size_t plan = 0; plan < PLAN_COUNT; plan++)
    for (size_t i = 0; i < plan_count(plan); i++) {
      self->blocks[plan][i] = shoal_malloc(plans[plan].size);
      CHECK(self->blocks[plan][i] != NULL);
      memset(self->blocks[plan][i], self->index, 16);
    }
  shoal_collect(false);
  pthread_barrier_wait(&all_allocated);
  pthread_barrier_wait(&snapshot_taken);
  worker_t *previous = &workers[(self->index + WORKERS - 1) % WORKERS];
  for (size_t plan = 0; plan < PLAN_COUNT; plan++)
    for (size_t i = 0; i < plan_count(plan); i++) {
      unsigned char *block = previous->blocks[plan][i];
      CHECK(block[0] == previous->index); /* still the previous worker's block */
      shoal_free(block);
    }
  pthread_barrier_wait(&all_freed); /* nobody exits before every free is done */
  return NULL;
}

/* The row that holds blocks of `size`: a size class, or large, or huge. */
static const shoal_class_stats_t *row_of(const shoal_stats_t *stats, size_t size) {
  if (size > SHOAL_LARGE_MAX) return &stats->huge;
  if (size > stats->classes[SHOAL_STATS_SIZE_CLASSES - 1].block_size) return &stats->large;
  for (int c = 0; c < SHOAL_STATS_SIZE_CLASSES; c++)
    if (stats->classes[c].block_size >= size) return &stats->classes[c];
  return NULL;
}

static void check_rows_add_up(const shoal_stats_t *stats) {
  size_t allocated = 0, freed = 0, live = 0, small_live_bytes = 0;
  for (int c = 0; c < SHOAL_STATS_SIZE_CLASSES + 2; c++) {
    const shoal_class_stats_t *row = c < SHOAL_STATS_SIZE_CLASSES    ? &stats->classes[c]
                                     : c == SHOAL_STATS_SIZE_CLASSES ? &stats->large
                                                                     : &stats->huge;
    CHECK_CTX(row->allocated - row->freed == row->live, "row %d", c);
    allocated += row->allocated;
    freed += row->freed;
    live += row->live;
    small_live_bytes += row->live * row->block_size;
  }
  CHECK(stats->allocated_blocks == allocated);
  CHECK(stats->freed_blocks == freed);
  CHECK(stats->live_blocks == live);
  CHECK(stats->allocated_blocks - stats->freed_blocks == stats->live_blocks);
  CHECK(stats->live_bytes == small_live_bytes + stats->outsized_live_bytes);
}

/* One round; with `measure`, the figures checked at the midpoint. */
static void run_round(const shoal_stats_t *baseline, int measure) {
  pthread_barrier_init(&all_allocated, NULL, WORKERS + 1);
  pthread_barrier_init(&snapshot_taken, NULL, WORKERS + 1);
  pthread_barrier_init(&all_freed, NULL, WORKERS);
  for (int w = 0; w < WORKERS; w++) {
    workers[w].index = w;
    CHECK(pthread_create(&workers[w].thread, NULL, worker_run, &workers[w]) == 0);
  }
  pthread_barrier_wait(&all_allocated);
  if (measure) {
    shoal_stats_t held = shoal_stats();
    check_rows_add_up(&held);
    size_t held_bytes = 0;
    for (size_t plan = 0; plan < PLAN_COUNT; plan++) {
      size_t expected = WORKERS * plan_count(plan);
      const shoal_class_stats_t *now = row_of(&held, plans[plan].size);
      const shoal_class_stats_t *before = row_of(baseline, plans[plan].size);
      size_t extra = now->live - before->live - expected; /* the thread library's records */
      CHECK_CTX(now->live - before->live >= expected &&
                    extra <= WORKERS * THREAD_LIBRARY_BLOCKS_PER_THREAD,
                "size %zu: %zu live more, %zu held", plans[plan].size, now->live - before->live,
                expected);
      CHECK(now->allocated - before->allocated >= expected);
      if (now->block_size != 0) CHECK(now->block_size >= plans[plan].size);
      held_bytes += expected * plans[plan].size;
    }
    CHECK(held.live_bytes - baseline->live_bytes >= held_bytes);
    CHECK(held.huge_blocks >= baseline->huge_blocks + WORKERS);
    CHECK(held.slow_paths > baseline->slow_paths);
    CHECK(held.heaps >= WORKERS);
  }
  pthread_barrier_wait(&snapshot_taken);
  for (int w = 0; w < WORKERS; w++) CHECK(pthread_join(workers[w].thread, NULL) == 0);
  pthread_barrier_destroy(&all_allocated);
  pthread_barrier_destroy(&snapshot_taken);
  pthread_barrier_destroy(&all_freed);
}

/* A build without SHOAL_STATISTICS: the counted figures stay 0. */
static int check_compiled_out(void) {
  void *block = shoal_malloc(100);
  shoal_stats_t stats = shoal_stats();
  shoal_free(block);
  CHECK(stats.live_blocks == 0 && stats.allocated_blocks == 0 && stats.remote_frees == 0);
  CHECK(stats.classes[7].block_size == 128 && stats.classes[7].allocated == 0);
  CHECK(stats.os_committed_bytes > 0);
  printf("stats_threads: counters compiled out (SHOAL_STATISTICS=OFF): figures read 0\n");
  return 0;
}

int main(void) {
  for (int w = 0; w < WORKERS; w++)
    for (size_t plan = 0; plan < PLAN_COUNT; plan++) {
      workers[w].blocks[plan] = calloc(plan_count(plan), sizeof(void *));
      CHECK(workers[w].blocks[plan] != NULL);
    }
  shoal_stats_t baseline = shoal_stats();
  if (!baseline.counters_enabled) return check_compiled_out();

  run_round(&baseline, 0); /* warm-up: thread stacks and heaps come to exist */
  baseline = shoal_stats();
  check_rows_add_up(&baseline);
  run_round(&baseline, 1);
  shoal_stats_t after = shoal_stats();
  check_rows_add_up(&after);

  size_t handed = 0;
  for (size_t plan = 0; plan < PLAN_COUNT; plan++) {
    size_t expected = WORKERS * plan_count(plan);
    const shoal_class_stats_t *now = row_of(&after, plans[plan].size);
    const shoal_class_stats_t *before = row_of(&baseline, plans[plan].size);
    CHECK_CTX(now->freed - before->freed >= expected, "size %zu", plans[plan].size);
    CHECK_CTX(now->live == before->live, "size %zu: %zu live, %zu before", plans[plan].size,
              now->live, before->live);
    if (plans[plan].size <= SHOAL_LARGE_MAX) handed += expected; /* huge frees are not remote */
  }
  CHECK_CTX(after.remote_frees - baseline.remote_frees >= handed, "%zu remote frees, %zu handed",
            after.remote_frees - baseline.remote_frees, handed);
  CHECK_CTX(after.live_blocks == baseline.live_blocks, "%zu live blocks, %zu before",
            after.live_blocks, baseline.live_blocks);
  CHECK_CTX(after.live_bytes == baseline.live_bytes, "%zu live bytes, %zu before", after.live_bytes,
            baseline.live_bytes);
  CHECK(after.huge.live == baseline.huge.live);

  /* The by-value form and the pointer form read the same counters. */
  shoal_stats_t by_pointer;
  shoal_stats_get(&by_pointer);
  CHECK(by_pointer.allocated_blocks == after.allocated_blocks);

  for (int w = 0; w < WORKERS; w++)
    for (size_t plan = 0; plan < PLAN_COUNT; plan++) free(workers[w].blocks[plan]);
  printf("stats_threads: %zu blocks handed between %d threads, %zu remote frees; live back to "
         "%zu\n",
         handed, WORKERS, after.remote_frees - baseline.remote_frees, after.live_blocks);
  return 0;
}
