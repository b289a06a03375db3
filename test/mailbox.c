/* Medium blocks that a thread frees for another, when it allocates their
 * classes itself, go to their owner in parcels: one of the blocks carries
 * the addresses of the others into the owner's mailbox, and the owner puts
 * them back on their pages at its next slow path (heap.c, the mailbox).
 * What must hold, whoever ends up delivering them:
 *
 *   exchange    two threads free each other's blocks (every medium class,
 *               some parcels full) and allocate again: every block keeps
 *               its contents while it lives, the second round reuses the
 *               first's memory (the peak does not double), and the counts
 *               come back to where they were.
 *   owner gone  the owner exits before its blocks are freed: the freeing
 *               thread delivers them itself, and the dead heap's pages go
 *               back (the page count returns to where it was).
 *   owner idle  the owner waits while another thread frees its blocks: the
 *               mailbox does not keep them past its bound, so the pages
 *               they empty go back while the owner still waits.
 *   freed all over  the owner waits while many threads in turn free a few
 *               of its blocks each: past its bound the mailbox's blocks go
 *               to their class's depot, and a thread that allocates the
 *               class gets them while the owner still waits. Freed by one
 *               thread (a consumer's batches), the same blocks go home:
 *               that thread gets none of them.
 *
 * The shoal_ names are used so TSan runs check shoal, not TSan's allocator. */
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>

#include "shoal.h"
#include "testhelper.h"

enum {
  MEDIUM_MIN = 1025,      /* the smallest medium block: the parcel with the least room */
  MEDIUM_MAX = 32 * 1024, /* the largest class */
  IDLE_BLOCK = 8 * 1024,  /* the idle owner's blocks: eight to a page */
  IDLE_BYTES = 8 << 20,   /* ... this many of them */
  IDLE_PAGE = 64 * 1024,  /* a page of IDLE_BLOCK blocks */
  /* What may wait for an idle owner (internal.h): MAILBOX_DELIVER_BYTES in
   * its mailbox, OUTBOX_OWNER_BYTES in the freeing thread's outbox, and
   * 2 MiB of notified pages (page.c, IDLE_OWNER_SLICES) before a freeing
   * thread serves it. */
  MAILBOX_BOUND = 256 * 1024,
  PARCEL_BOUND = 64 * 1024,
  NOTIFIED_BOUND = 2 << 20,
};

/* Blocks the thread library may keep after the join for the two threads
 * of a case (glibc caches each stack's TLS vector; see idle_owners.c). */
#define THREAD_RECORDS 2

typedef struct block_s {
  unsigned char *pointer;
  size_t size;
} block_t;

static size_t block_count;

/* Sizes over every medium class, a third of them the smallest. */
static size_t medium_size(test_rng_t *rng) {
  return rng_next(rng) % 3 == 0 ? MEDIUM_MIN : rng_range(rng, MEDIUM_MIN, MEDIUM_MAX);
}

static void block_make(block_t *block, size_t size) {
  block->size = size;
  block->pointer = shoal_malloc(size);
  CHECK(block->pointer != NULL);
  pattern_fill(block->pointer, size, (uintptr_t)block->pointer);
}

static void block_free_checked(block_t *block) {
  CHECK_CTX(pattern_check(block->pointer, block->size, (uintptr_t)block->pointer),
            "block %p of %zu bytes lost its contents", (void *)block->pointer, block->size);
  shoal_free(block->pointer);
  block->pointer = NULL;
}

/* ---- exchange ---- */

static block_t *exchange_blocks[2];
static block_t *exchange_again[2];
static size_t exchange_peak[2]; /* committed at the most, after each round */
static pthread_barrier_t exchange_line;

static void *exchange_run(void *argument) {
  size_t self = (size_t)(uintptr_t)argument, other = 1 - self;
  test_rng_t rng = {0x5eed + self};
  block_t *mine = exchange_blocks[self];
  for (size_t i = 0; i < block_count; i++) block_make(&mine[i], medium_size(&rng));
  pthread_barrier_wait(&exchange_line);
  if (self == 0) exchange_peak[0] = shoal_stats().os_peak_committed_bytes;
  for (size_t i = 0; i < block_count; i++) block_free_checked(&exchange_blocks[other][i]);
  pthread_barrier_wait(&exchange_line);
  block_t *again = exchange_again[self];
  for (size_t i = 0; i < block_count; i++) block_make(&again[i], medium_size(&rng));
  pthread_barrier_wait(&exchange_line);
  if (self == 0) exchange_peak[1] = shoal_stats().os_peak_committed_bytes;
  for (size_t i = 0; i < block_count; i++) block_free_checked(&again[i]);
  return NULL;
}

static void test_exchange(void) {
  shoal_collect(true);
  shoal_stats_t before;
  shoal_stats_get(&before);
  for (size_t t = 0; t < 2; t++) {
    exchange_blocks[t] = calloc(block_count, sizeof(block_t));
    exchange_again[t] = calloc(block_count, sizeof(block_t));
    CHECK(exchange_blocks[t] != NULL && exchange_again[t] != NULL);
  }
  CHECK(pthread_barrier_init(&exchange_line, NULL, 2) == 0);
  pthread_t threads[2];
  for (size_t t = 0; t < 2; t++)
    CHECK(pthread_create(&threads[t], NULL, exchange_run, (void *)(uintptr_t)t) == 0);
  for (size_t t = 0; t < 2; t++) CHECK(pthread_join(threads[t], NULL) == 0);
  pthread_barrier_destroy(&exchange_line);
  /* The second round reuses what the other thread freed of the first: a
   * round that found none of it would nearly double the peak (+80 % at
   * SHOAL_TEST_SCALE=0.2). How much arrives in time varies with the
   * scheduling: alone, +5 to +8 %; beside other suites on 2 cores, up to
   * +25 % (one run in twenty over it), so half as much again is the bound. */
  CHECK_CTX(exchange_peak[1] <= exchange_peak[0] + exchange_peak[0] / 2,
            "peak committed %zu KiB after the first round, %zu after the second",
            exchange_peak[0] >> 10, exchange_peak[1] >> 10);
  for (size_t t = 0; t < 2; t++) {
    free(exchange_blocks[t]);
    free(exchange_again[t]);
  }
  shoal_collect(true);
  shoal_stats_t after;
  shoal_stats_get(&after);
  if (after.counters_enabled) {
    CHECK_CTX(after.live_blocks - before.live_blocks <= THREAD_RECORDS,
              "%zu blocks live before, %zu after", before.live_blocks, after.live_blocks);
    CHECK(after.remote_frees - before.remote_frees >= 2 * block_count);
  }
  printf("mailbox: exchange of 2 x %zu blocks, peak committed %zu KiB, then %zu\n", block_count,
         exchange_peak[0] >> 10, exchange_peak[1] >> 10);
}

/* A thread's go-ahead for the next step of a case. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  int stage;
} step = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void step_set(int stage) {
  pthread_mutex_lock(&step.lock);
  step.stage = stage;
  pthread_cond_broadcast(&step.changed);
  pthread_mutex_unlock(&step.lock);
}

static void step_wait(int stage) {
  pthread_mutex_lock(&step.lock);
  while (step.stage < stage) pthread_cond_wait(&step.changed, &step.lock);
  pthread_mutex_unlock(&step.lock);
}

/* ---- owner gone ---- */

static block_t *orphan_blocks;

static void *orphan_owner_run(void *argument) {
  (void)argument;
  test_rng_t rng = {0x0bad};
  for (size_t i = 0; i < block_count; i++) block_make(&orphan_blocks[i], medium_size(&rng));
  return NULL;
}

enum { ORPHAN_FREER_READY = 1, ORPHAN_OWNER_GONE = 2 };

static void *orphan_freer_run(void *argument) {
  (void)argument;
  /* A heap of its own, with blocks of every medium class, before the
   * owner exits (a thread started after would adopt the dead heap), so
   * that the dead heap's blocks go by parcel. */
  block_t own[64];
  for (size_t i = 0; i < 64; i++)
    block_make(&own[i], MEDIUM_MIN + i * (MEDIUM_MAX - MEDIUM_MIN) / 63);
  step_set(ORPHAN_FREER_READY);
  step_wait(ORPHAN_OWNER_GONE);
  for (size_t i = 0; i < block_count; i++) block_free_checked(&orphan_blocks[i]);
  for (size_t i = 0; i < 64; i++) block_free_checked(&own[i]);
  return NULL;
}

static void test_owner_gone(void) {
  shoal_collect(true);
  shoal_stats_t before;
  shoal_stats_get(&before);
  orphan_blocks = calloc(block_count, sizeof(block_t));
  CHECK(orphan_blocks != NULL);
  step_set(0);
  pthread_t owner, freer;
  CHECK(pthread_create(&freer, NULL, orphan_freer_run, NULL) == 0);
  step_wait(ORPHAN_FREER_READY);
  CHECK(pthread_create(&owner, NULL, orphan_owner_run, NULL) == 0);
  CHECK(pthread_join(owner, NULL) == 0);
  step_set(ORPHAN_OWNER_GONE);
  CHECK(pthread_join(freer, NULL) == 0);
  free(orphan_blocks);
  /* Before any collect: the dead heap's pages went back as they emptied. */
  shoal_stats_t after;
  shoal_stats_get(&after);
  if (after.counters_enabled)
    CHECK_CTX(after.live_blocks - before.live_blocks <= THREAD_RECORDS,
              "%zu blocks live before, %zu after", before.live_blocks, after.live_blocks);
  CHECK_CTX(after.pages <= before.pages + THREAD_RECORDS, "%zu pages before, %zu after",
            before.pages, after.pages);
  printf("mailbox: owner gone, %zu pages before and %zu after\n", before.pages, after.pages);
}

/* ---- owner idle ---- */

static block_t *idle_blocks;
static size_t idle_count;
static void *idle_owner_run(void *argument) {
  (void)argument;
  for (size_t i = 0; i < idle_count; i++) block_make(&idle_blocks[i], IDLE_BLOCK);
  step_set(1);
  step_wait(2); /* no malloc meanwhile: nothing of its own delivers */
  return NULL;
}

static void test_owner_idle(void) {
  shoal_collect(true);
  idle_count = IDLE_BYTES / IDLE_BLOCK;
  step_set(0);
  idle_blocks = calloc(idle_count, sizeof(block_t));
  CHECK(idle_blocks != NULL);
  block_t own;
  block_make(&own, IDLE_BLOCK); /* this thread allocates the class too */
  pthread_t owner;
  CHECK(pthread_create(&owner, NULL, idle_owner_run, NULL) == 0);
  step_wait(1);
  shoal_stats_t made;
  shoal_stats_get(&made);
  for (size_t i = 0; i < idle_count; i++) block_free_checked(&idle_blocks[i]);
  shoal_stats_t freed;
  shoal_stats_get(&freed);
  /* The owner's blocks are freed in the order it made them, so what may
   * still wait fills whole pages; and the pages of this thread's own block. */
  size_t owner_pages = IDLE_BYTES / IDLE_PAGE;
  size_t kept_pages = (MAILBOX_BOUND + PARCEL_BOUND + NOTIFIED_BOUND) / IDLE_PAGE + 2;
  CHECK_CTX(made.pages >= owner_pages, "%zu pages with the owner's blocks", made.pages);
  CHECK_CTX(freed.pages + owner_pages <= made.pages + kept_pages,
            "%zu pages with the owner's %zu blocks, %zu after they were freed", made.pages,
            idle_count, freed.pages);
  step_set(2);
  CHECK(pthread_join(owner, NULL) == 0);
  block_free_checked(&own);
  free(idle_blocks);
  printf("mailbox: owner idle, %zu pages with its blocks, %zu once freed\n", made.pages,
         freed.pages);
}

/* ---- freed all over ---- */

enum {
  SCATTER_BLOCK = 4096,
  SCATTER_BLOCKS = 256, /* 1 MiB: the mailbox's bound four times */
  SCATTER_SENDERS = 24, /* past MAILBOX_MANY_SENDERS (internal.h) */
  SCATTER_TURN = 2,     /* blocks a sender frees, then posts, in its turn */
};

static void *scatter_blocks[SCATTER_BLOCKS];

static void *scatter_owner_run(void *argument) {
  (void)argument;
  for (size_t i = 0; i < SCATTER_BLOCKS; i++) {
    scatter_blocks[i] = shoal_malloc(SCATTER_BLOCK);
    CHECK(scatter_blocks[i] != NULL);
  }
  step_set(1);
  step_wait(2); /* no malloc meanwhile: nothing of its own delivers */
  return NULL;
}

static struct {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  size_t next; /* the next block to free */
  size_t turn; /* the sender whose turn it is */
} scatter = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

/* A sender allocates the class (so its frees of the owner's blocks go by
 * parcel), then in its turns frees SCATTER_TURN of them and posts. */
static void *scatter_sender_run(void *argument) {
  size_t index = (size_t)(uintptr_t)argument;
  void *own = shoal_malloc(SCATTER_BLOCK);
  CHECK(own != NULL);
  pthread_mutex_lock(&scatter.lock);
  for (;;) {
    while (scatter.turn != index && scatter.next < SCATTER_BLOCKS)
      pthread_cond_wait(&scatter.changed, &scatter.lock);
    if (scatter.next >= SCATTER_BLOCKS) break;
    for (size_t i = 0; i < SCATTER_TURN && scatter.next < SCATTER_BLOCKS; i++)
      shoal_free(scatter_blocks[scatter.next++]);
    shoal_collect(false); /* its outbox, with its parcel for the owner, sent */
    scatter.turn = (index + 1) % SCATTER_SENDERS;
    pthread_cond_broadcast(&scatter.changed);
  }
  pthread_mutex_unlock(&scatter.lock);
  shoal_free(own);
  return NULL;
}

/* How many of this thread's next mallocs of the class are the owner's
 * blocks (freed, the owner still waiting); all freed again. */
static size_t scatter_reused(void) {
  void *taken[SCATTER_BLOCKS];
  size_t reused = 0;
  for (size_t i = 0; i < SCATTER_BLOCKS; i++) {
    taken[i] = shoal_malloc(SCATTER_BLOCK);
    CHECK(taken[i] != NULL);
    for (size_t k = 0; k < SCATTER_BLOCKS; k++) reused += taken[i] == scatter_blocks[k];
  }
  for (size_t i = 0; i < SCATTER_BLOCKS; i++) shoal_free(taken[i]);
  return reused;
}

static size_t scatter_case(bool all_over) {
  shoal_collect(true); /* this thread holds no page of the class */
  step_set(0);
  scatter.next = scatter.turn = 0;
  pthread_t owner, senders[SCATTER_SENDERS];
  CHECK(pthread_create(&owner, NULL, scatter_owner_run, NULL) == 0);
  step_wait(1);
  if (all_over) {
    for (size_t t = 0; t < SCATTER_SENDERS; t++)
      CHECK(pthread_create(&senders[t], NULL, scatter_sender_run, (void *)(uintptr_t)t) == 0);
    for (size_t t = 0; t < SCATTER_SENDERS; t++) CHECK(pthread_join(senders[t], NULL) == 0);
  } else {
    void *own = shoal_malloc(SCATTER_BLOCK); /* the class is this thread's too */
    CHECK(own != NULL);
    for (size_t i = 0; i < SCATTER_BLOCKS; i++) shoal_free(scatter_blocks[i]);
    shoal_collect(false);
    shoal_free(own);
    shoal_collect(true);
  }
  size_t reused = scatter_reused();
  step_set(2);
  CHECK(pthread_join(owner, NULL) == 0);
  return reused;
}

static void test_freed_all_over(void) {
  /* The depot takes blocks of classes some thread looked for within a
   * purge delay: long enough for a slow machine's turns. */
  long purge_delay = shoal_option_get(SHOAL_OPTION_PURGE_DELAY);
  shoal_option_set(SHOAL_OPTION_PURGE_DELAY, 60 * 1000);
  size_t all_over = scatter_case(true), one_sender = scatter_case(false);
  shoal_option_set(SHOAL_OPTION_PURGE_DELAY, purge_delay);
  CHECK_CTX(all_over > 0, "none of the %d blocks freed by %d threads came back to a third",
            SCATTER_BLOCKS, SCATTER_SENDERS);
  CHECK_CTX(one_sender == 0, "%zu of the blocks one thread freed came back to it", one_sender);
  printf("mailbox: freed all over, %zu of %d blocks reused while the owner waits\n", all_over,
         SCATTER_BLOCKS);
}

int main(void) {
  block_count = scaled_count(4000, 600);
  test_exchange();
  test_owner_gone();
  test_owner_idle();
  test_freed_all_over();
  printf("mailbox: all checks passed\n");
  return 0;
}
