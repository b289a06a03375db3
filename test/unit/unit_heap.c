/* segment, page and heap layers seen from inside: a page serves its blocks
 * at its own addresses, parks when full, is notified by a remote free, and
 * returns to its segment when empty; another thread's frees go home a chain
 * at a time, counted (a thread's chains together no more than its share
 * of a budget among many threads), or serve the freeing thread's own mallocs of their
 * class, as a thread's own medium blocks serve its next malloc of their
 * class from its class cache (a page's last block goes to the page); a thread that frees for
 * several heaps blocks of a class it does not allocate puts them in the depot, whose chains serve
 * the class's next mallocs in any thread, and go home at shoal_collect(true) or after a purge delay
 * untaken; blocks freed into any page of a class are used before never-used ones (a page behind the
 * first found without the slow path), and a class above 128 bytes takes a neighbour class's free
 * block before a never-used one of its own (a small class, its page); a page other threads emptied
 * gives its slices back before the heap takes new ones; a dead thread's heap is serviced by a
 * remote free and adopted by the next thread, or gives a segment at a time to a live one that needs
 * memory; a heap that takes a cached segment counts its touched slices as
 * its own to purge, and the arena's trim of its cached segments waits while
 * heaps draw the cache down; a class page made on slices that were touched gives
 * back at a collect what it has not carved, and takes the slices its own
 * class gave back before others; a thread that frees only its own blocks
 * touches one page of its heap; a page that fills in a big process faults in
 * ahead of its carving; a heap whose owner only waits for a core is served
 * but not purged by the threads that free its blocks, one whose owner sleeps
 * is. */
#include "../testhelper.h"
#include "core/internal.h"

#include <pthread.h>
#include <string.h>
#ifdef __linux__
#include <fcntl.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#endif

static void *blocks[4096];
static size_t block_count;

static void *allocate_page_worth(void *arg) {
  size_t size = (size_t)(uintptr_t)arg;
  block_count = 0;
  for (size_t i = 0; i < 4096; i++) blocks[block_count++] = shoal_malloc(size);
  return thread_heap;
}

static void *free_all(void *arg) {
  (void)arg;
  for (size_t i = 0; i < block_count; i++) shoal_free(blocks[i]);
  return NULL;
}

/* `run(arg)` in a thread of its own (a heap of its own), to its end; its
 * result. */
static void *run_in_thread_with(void *(*run)(void *), void *arg) {
  pthread_t thread;
  void *result;
  CHECK(pthread_create(&thread, NULL, run, arg) == 0);
  CHECK(pthread_join(thread, &result) == 0);
  return result;
}

static void *run_in_thread(void *(*run)(void *)) {
  return run_in_thread_with(run, NULL);
}

/* Blocks of `size` until one opens a page of its own (the ones before it,
 * in pages begun earlier, go to `before`), then the rest of that page: its
 * `reserved` blocks, in order, in `in_page`. Both arrays hold 1024. */
static shoal_page_t *fill_fresh_page(size_t size, void **before, size_t *before_count,
                                     void **in_page) {
  shoal_page_t *page;
  *before_count = 0;
  for (;;) {
    in_page[0] = shoal_malloc(size);
    page = segment_page_of(segment_of(in_page[0]), in_page[0]);
    if (page->used == 1) break;
    CHECK(*before_count < 1024);
    before[(*before_count)++] = in_page[0];
  }
  for (size_t count = 1; count < page->reserved; count++) {
    CHECK(count < 1024);
    in_page[count] = shoal_malloc(size);
    CHECK(segment_page_of(segment_of(in_page[count]), in_page[count]) == page);
  }
  return page;
}

/* ---- remote frees gathered in the freeing thread's outbox ---- */

static shoal_page_t *outbox_page;
static void *outbox_blocks[1024];

static void *free_a_few_then_collect(void *arg) {
  size_t few = (size_t)(uintptr_t)arg;
  /* Every remote free goes through the outbox, a heap's first too
   * (alloc.c, free_remote, says why). */
  for (size_t i = 0; i < few; i++) shoal_free(outbox_blocks[i]);
  /* Fewer than a chain's worth: still with this thread, not at the page. */
  CHECK(atomic_load(&outbox_page->xthread_free) >> 48 == 0);
  CHECK(thread_heap->outbox_occupied != 0);
  shoal_collect(false); /* sends them */
  CHECK(thread_heap->outbox_occupied == 0);
  CHECK(atomic_load(&outbox_page->xthread_free) >> 48 == few);
  return NULL;
}

static void *free_the_rest(void *arg) {
  size_t from = (size_t)(uintptr_t)arg;
  for (size_t i = from; i < outbox_page->reserved; i++) shoal_free(outbox_blocks[i]);
  return NULL; /* the thread's exit sends what it gathered */
}

static void test_outbox(void) {
  /* The freeing threads allocate nothing, so their class caches (which
   * keep other threads' blocks of a class the freeing thread allocates)
   * take none, and every free goes to the outbox: 56 blocks a page, sent
   * home four at a time. */
  enum { SIZE = 1100, FEW = 3 };
  static void *before_it[1024];
  size_t before_count;
  outbox_page = fill_fresh_page(SIZE, before_it, &before_count, outbox_blocks);
  size_t count = outbox_page->reserved;
  CHECK(outbox_page->used == count);
  CHECK(FEW * outbox_page->block_size < OUTBOX_BYTES && count * SIZE > OUTBOX_BYTES);
  uint32_t used = outbox_page->used;
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, free_a_few_then_collect, (void *)(uintptr_t)FEW) == 0);
  pthread_join(thread, NULL);
  CHECK(pthread_create(&thread, NULL, free_the_rest, (void *)(uintptr_t)FEW) == 0);
  pthread_join(thread, NULL);
  /* Every block came home, counted in the list's word: no walk needed. */
  CHECK(atomic_load(&outbox_page->xthread_free) >> 48 == count);
  CHECK(outbox_page->free == NULL && page_collect(outbox_page) == count);
  CHECK(outbox_page->used == used - count);
  size_t on_list = 0;
  for (shoal_block_t *block = outbox_page->free; block != NULL; block = block->next) on_list++;
  CHECK(on_list == count);
  for (size_t i = 0; i < before_count; i++) shoal_free(before_it[i]);
  shoal_collect(true);
}

/* A thread that frees a few blocks of many pages holds a chain for each
 * in its outbox. With many threads, their outboxes together are bounded
 * (OUTBOX_BUDGET_BYTES split among the live heaps): past its share, a
 * thread sends its chains home, so that their owner reuses the blocks
 * (prodcons, 64 consumers: 12 MB peak, 8 with the bound). */
enum { SHARE_SIZE = 1100, SHARE_BLOCKS = 4096, SHARE_PER_PAGE = 3, SHARE_IDLE = 63 };
static void *share_blocks[SHARE_BLOCKS];
static size_t share_page_of[SHARE_BLOCKS]; /* each block's index in share_pages */
static shoal_page_t *share_pages[SHARE_BLOCKS];
static size_t share_page_count;
static pthread_barrier_t share_barrier;

static void *idle_with_heap(void *arg) {
  (void)arg;
  void *p = shoal_malloc(8);
  pthread_barrier_wait(&share_barrier); /* every idle thread has a heap */
  pthread_barrier_wait(&share_barrier); /* the freeing thread is done */
  shoal_free(p);
  return NULL;
}

/* The pages' blocks still out: handed out and not yet freed home (a block
 * on a page's list of other threads' frees is home, counted in `used`
 * until its owner, or a thread serving an owner that waits, collects it). */
static size_t share_blocks_out(void) {
  size_t out = 0;
  for (size_t i = 0; i < share_page_count; i++)
    out += share_pages[i]->used - (size_t)(atomic_load(&share_pages[i]->xthread_free) >> 48);
  return out;
}

/* Frees SHARE_PER_PAGE blocks of each page, fewer than a chain's worth,
 * checking that each is in the outbox or on its page's list. Returns the
 * most the outbox held. */
static void *free_a_few_of_each_page(void *arg) {
  (void)arg;
  static size_t freed_of_page[SHARE_BLOCKS];
  memset(freed_of_page, 0, sizeof freed_of_page);
  size_t freed = 0, most = 0, block_size = share_pages[0]->block_size;
  size_t out_before = share_blocks_out();
  for (size_t i = 0; i < SHARE_BLOCKS; i++) {
    if (freed_of_page[share_page_of[i]]++ >= SHARE_PER_PAGE) continue;
    shoal_free(share_blocks[i]);
    share_blocks[i] = NULL;
    freed++;
    if (thread_heap->outbox_bytes > most) most = thread_heap->outbox_bytes;
    CHECK(thread_heap->outbox_bytes % block_size == 0);
    CHECK(out_before - share_blocks_out() + thread_heap->outbox_bytes / block_size == freed);
  }
  CHECK(share_page_count > 64 && freed == SHARE_PER_PAGE * share_page_count);
  return (void *)most;
}

/* The most a thread's outbox holds while it frees a few blocks of each of
 * this thread's pages, with `idle_threads` more threads alive. */
static size_t outbox_most_held(size_t idle_threads) {
  pthread_t idle[SHARE_IDLE];
  CHECK(pthread_barrier_init(&share_barrier, NULL, (unsigned)idle_threads + 1) == 0);
  for (size_t i = 0; i < idle_threads; i++)
    CHECK(pthread_create(&idle[i], NULL, idle_with_heap, NULL) == 0);
  if (idle_threads > 0) pthread_barrier_wait(&share_barrier);
  share_page_count = 0;
  for (size_t i = 0; i < SHARE_BLOCKS; i++) {
    share_blocks[i] = shoal_malloc(SHARE_SIZE);
    shoal_page_t *page = segment_page_of(segment_of(share_blocks[i]), share_blocks[i]);
    size_t at = 0;
    while (at < share_page_count && share_pages[at] != page) at++;
    if (at == share_page_count) share_pages[share_page_count++] = page;
    share_page_of[i] = at;
  }
  CHECK(arena_heaps_live() >= idle_threads + 1);
  size_t most = (size_t)run_in_thread(free_a_few_of_each_page);
  if (idle_threads > 0) pthread_barrier_wait(&share_barrier);
  for (size_t i = 0; i < idle_threads; i++) CHECK(pthread_join(idle[i], NULL) == 0);
  CHECK(pthread_barrier_destroy(&share_barrier) == 0);
  for (size_t i = 0; i < SHARE_BLOCKS; i++) shoal_free(share_blocks[i]);
  shoal_collect(true);
  return most;
}

static void test_outbox_share(void) {
  size_t alone = outbox_most_held(0);
  size_t among_many = outbox_most_held(SHARE_IDLE);
  /* Alone, the outbox keeps its chains (each page's few blocks); among
   * SHARE_IDLE + 2 live heaps, at most twice its share, and a chain. */
  size_t share = OUTBOX_BUDGET_BYTES / (SHARE_IDLE + 2);
  CHECK_CTX(among_many <= 2 * share + OUTBOX_BYTES, "held %zu, share %zu", among_many, share);
  CHECK_CTX(alone > 2 * share + OUTBOX_BYTES, "alone held only %zu", alone);
}

/* ---- blocks a thread frees for several heaps: the depot ---- */

/* A size no other test here allocates, so that the freeing thread has no
 * page of it (nor an adopted heap of a thread that had). */
enum { DEPOT_SIZE = 720, DEPOT_BLOCKS = 512, DEPOT_ROUND_CHAINS = 8 };
static void *depot_blocks[2][DEPOT_BLOCKS]; /* [0]: this thread's, [1]: the other's */
static size_t depot_chain, depot_freed;     /* chains' worth freed of each heap's */
static pthread_barrier_t depot_barrier;

/* Another heap that stays alive while its blocks are freed. */
static void *allocate_for_depot(void *arg) {
  (void)arg;
  for (size_t i = 0; i < DEPOT_BLOCKS; i++) depot_blocks[1][i] = shoal_malloc(DEPOT_SIZE);
  for (int step = 1; step <= 5; step++) pthread_barrier_wait(&depot_barrier); /* 1: allocated */
  return NULL;
}

/* A chain's worth of each heap's blocks in turn, `chains` in all. */
static void free_chains_of_two_heaps(size_t chains) {
  uint8_t size_class = size_class_of(DEPOT_SIZE);
  for (size_t chain = 0; chain < chains; chain++) {
    void **from = depot_blocks[chain % 2];
    for (size_t i = 0; i < depot_chain; i++) shoal_free(from[depot_freed * depot_chain + i]);
    if (chain % 2 == 1) depot_freed++;
    CHECK(thread_heap->queues[size_class].first == NULL); /* it allocates none of the class */
  }
}

/* One of the other heap's blocks this thread freed: this thread can get
 * one back only through the depot. */
static bool freed_of_other_heap(const void *p) {
  for (size_t i = 0; i < depot_freed * depot_chain; i++)
    if (depot_blocks[1][i] == p) return true;
  return false;
}

static void *free_for_two_heaps(void *arg) {
  (void)arg;
  uint8_t size_class = size_class_of(DEPOT_SIZE);
  pthread_barrier_wait(&depot_barrier); /* 1: both heaps' blocks allocated */
  /* The first window of chains goes home: then it frees for several heaps. */
  while (!thread_heap->frees_for_many_heaps) {
    CHECK(depot_freed * depot_chain < DEPOT_BLOCKS / 2); /* a window's chains and more */
    CHECK(!depot_may_hold(size_class));
    free_chains_of_two_heaps(2);
  }
  free_chains_of_two_heaps(DEPOT_ROUND_CHAINS);
  CHECK(depot_may_hold(size_class));
  shoal_collect(true); /* every depot home */
  CHECK(!depot_may_hold(size_class));
  free_chains_of_two_heaps(DEPOT_ROUND_CHAINS);
  CHECK(depot_may_hold(size_class));
  pthread_barrier_wait(&depot_barrier); /* 2: the depot holds chains */
  pthread_barrier_wait(&depot_barrier); /* 3: taken */
  free_chains_of_two_heaps(DEPOT_ROUND_CHAINS);
  CHECK(depot_may_hold(size_class));
  pthread_barrier_wait(&depot_barrier); /* 4: the depot holds chains again */
  pthread_barrier_wait(&depot_barrier); /* 5: everything checked */
  return NULL;
}

/* A thread that frees only one heap's blocks sends them home: their owner
 * reuses them, and its pages can empty (prodcons, one producer). */
static void *free_for_one_heap(void *arg) {
  void **one_heaps = arg;
  for (size_t i = 0; i < (DEPOT_OWNER_WINDOW + DEPOT_ROUND_CHAINS) * depot_chain; i++)
    shoal_free(one_heaps[i]);
  CHECK(!thread_heap->frees_for_many_heaps);
  CHECK(!depot_may_hold(size_class_of(DEPOT_SIZE)));
  return NULL;
}

static void test_depot(void) {
  uint8_t size_class = size_class_of(DEPOT_SIZE);
  /* A depot takes chains only while a thread looked for blocks of the
   * class within a purge delay: long enough here that this thread's own
   * slow paths, before the freeing thread runs, count. */
  long purge_delay_option = shoal_option_get(SHOAL_OPTION_PURGE_DELAY);
  shoal_option_set(SHOAL_OPTION_PURGE_DELAY, 250);
  depot_chain = (OUTBOX_BYTES + class_block_size[size_class] - 1) / class_block_size[size_class];
  CHECK((DEPOT_OWNER_WINDOW + 2 * DEPOT_ROUND_CHAINS) * depot_chain <= DEPOT_BLOCKS);
  CHECK(!depot_may_hold(size_class));
  for (size_t i = 0; i < DEPOT_BLOCKS; i++) {
    depot_blocks[0][i] = shoal_malloc(DEPOT_SIZE);
    memset(depot_blocks[0][i], 0x77, DEPOT_SIZE);
  }
  static void *one_heaps[DEPOT_BLOCKS];
  for (size_t i = 0; i < (DEPOT_OWNER_WINDOW + DEPOT_ROUND_CHAINS) * depot_chain; i++)
    one_heaps[i] = shoal_malloc(DEPOT_SIZE);
  pthread_t other, freeing;
  CHECK(pthread_create(&freeing, NULL, free_for_one_heap, one_heaps) == 0);
  CHECK(pthread_join(freeing, NULL) == 0);

  CHECK(pthread_barrier_init(&depot_barrier, NULL, 3) == 0);
  CHECK(pthread_create(&other, NULL, allocate_for_depot, NULL) == 0);
  CHECK(pthread_create(&freeing, NULL, free_for_two_heaps, NULL) == 0);
  pthread_barrier_wait(&depot_barrier); /* 1 */
  pthread_barrier_wait(&depot_barrier); /* 2 */

  /* This thread's mallocs of the class take the depot's chains, blocks of
   * both heaps' pages, before its own pages' free blocks: no new page. */
  size_t pages_before = atomic_load(&thread_heap->pages_taken), of_other = 0, total = 0;
  static void *again[DEPOT_BLOCKS];
  while (depot_may_hold(size_class)) {
    CHECK(total < DEPOT_BLOCKS);
    again[total] = shoal_malloc(DEPOT_SIZE);
    CHECK(again[total] != NULL);
    if (freed_of_other_heap(again[total])) of_other++;
    total++;
  }
  CHECK_CTX(of_other >= depot_chain, "%zu of %zu blocks were the other heap's", of_other, total);
  CHECK(atomic_load(&thread_heap->pages_taken) == pages_before);
  pthread_barrier_wait(&depot_barrier); /* 3 */
  pthread_barrier_wait(&depot_barrier); /* 4 */

  /* Chains nobody takes for a purge delay go home at any thread's next
   * malloc slow path. */
  int64_t deadline = os_now_ms() + 5000;
  while (os_now_ms() < depot_stale_at(size_class)) {
    CHECK(os_now_ms() < deadline);
    sleep_ms(1);
  }
  void *large = shoal_malloc(100000); /* a slow path that takes no chain of the class */
  CHECK(large != NULL && !depot_may_hold(size_class));
  shoal_free(large);
  pthread_barrier_wait(&depot_barrier); /* 5 */
  CHECK(pthread_join(freeing, NULL) == 0 && pthread_join(other, NULL) == 0);
  pthread_barrier_destroy(&depot_barrier);
  for (size_t i = 0; i < total; i++) shoal_free(again[i]);
  for (size_t heap = 0; heap < 2; heap++)
    for (size_t i = depot_freed * depot_chain; i < DEPOT_BLOCKS; i++)
      shoal_free(depot_blocks[heap][i]);
  shoal_collect(true);
  shoal_option_set(SHOAL_OPTION_PURGE_DELAY, purge_delay_option);
}

/* ---- a thread that allocates a class and frees others' blocks of it ---- */

/* A small class's chains go to the depot even from a thread that allocates
 * the class itself (an owner that does not run would keep them from
 * everyone); a medium class's go home. Two heaps' blocks (this thread's and
 * a helper's) are freed a chain of each in turn by a third thread that
 * holds a block of the class: past its remote cache and a window of
 * chains, the depot holds some, or not. */
enum { ALLOCATING_BLOCKS = 1024 };
static void *allocating_blocks[2][ALLOCATING_BLOCKS];
static size_t allocating_size;
static pthread_barrier_t allocating_barrier;

static void *allocate_and_wait(void *arg) {
  (void)arg;
  for (size_t i = 0; i < ALLOCATING_BLOCKS; i++)
    allocating_blocks[1][i] = shoal_malloc(allocating_size);
  pthread_barrier_wait(&allocating_barrier); /* 1: allocated */
  pthread_barrier_wait(&allocating_barrier); /* 2: freed */
  return NULL;
}

static void *free_while_allocating(void *arg) {
  bool *depot_held = arg;
  uint8_t size_class = size_class_of(allocating_size);
  size_t chain = (OUTBOX_BYTES + class_block_size[size_class] - 1) / class_block_size[size_class];
  pthread_barrier_wait(&allocating_barrier); /* 1 */
  void *own = shoal_malloc(allocating_size); /* this thread allocates the class */
  CHECK(own != NULL && thread_heap->queues[size_class].first != NULL);
  for (size_t done = 0; done + chain <= ALLOCATING_BLOCKS && !*depot_held; done += chain)
    for (size_t heap = 0; heap < 2; heap++) {
      for (size_t i = done; i < done + chain; i++) {
        shoal_free(allocating_blocks[heap][i]);
        allocating_blocks[heap][i] = NULL;
      }
      *depot_held |= depot_may_hold(size_class);
    }
  shoal_free(own);
  pthread_barrier_wait(&allocating_barrier); /* 2 */
  return NULL;
}

static bool depot_takes_from_allocating_thread(size_t size) {
  shoal_collect(true); /* every depot home */
  allocating_size = size;
  bool depot_held = false;
  for (size_t i = 0; i < ALLOCATING_BLOCKS; i++) allocating_blocks[0][i] = shoal_malloc(size);
  pthread_t helper, freeing;
  CHECK(pthread_barrier_init(&allocating_barrier, NULL, 2) == 0);
  CHECK(pthread_create(&helper, NULL, allocate_and_wait, NULL) == 0);
  CHECK(pthread_create(&freeing, NULL, free_while_allocating, &depot_held) == 0);
  CHECK(pthread_join(freeing, NULL) == 0 && pthread_join(helper, NULL) == 0);
  pthread_barrier_destroy(&allocating_barrier);
  for (size_t heap = 0; heap < 2; heap++)
    for (size_t i = 0; i < ALLOCATING_BLOCKS; i++) shoal_free(allocating_blocks[heap][i]);
  shoal_collect(true);
  return depot_held;
}

static void test_depot_from_allocating_thread(void) {
  long purge_delay_option = shoal_option_get(SHOAL_OPTION_PURGE_DELAY);
  shoal_option_set(SHOAL_OPTION_PURGE_DELAY, 250);  /* the freeing thread's own look counts */
  CHECK(depot_takes_from_allocating_thread(496));   /* a small class */
  CHECK(!depot_takes_from_allocating_thread(2800)); /* a medium class */
  shoal_option_set(SHOAL_OPTION_PURGE_DELAY, purge_delay_option);
}

/* ---- a block freed for another thread serves the freer ---- */

/* Up to REMOTE_CACHE_BYTES of the class, for a small class as for a
 * medium one; the rest goes home. */
enum { CACHED_MAX = 64 };
static void *cached_blocks[CACHED_MAX];
static size_t cached_size, cached_count;

static void *allocate_cached(void *arg) {
  (void)arg;
  for (size_t i = 0; i < cached_count; i++) {
    cached_blocks[i] = shoal_malloc(cached_size);
    memset(cached_blocks[i], (int)i + 1, cached_size);
  }
  return thread_heap;
}

static void remote_cache_keeps(size_t size, size_t count) {
  cached_size = size;
  cached_count = count;
  uint8_t size_class = size_class_of(size);
  size_t block_size = class_block_size[size_class];
  CHECK(size_class < CLASS_COUNT && count <= CACHED_MAX);
  size_t kept = (REMOTE_CACHE_BYTES + block_size - 1) / block_size;
  CHECK(kept >= 1 && kept < count);
  void *own = shoal_malloc(size); /* this thread allocates the class */
  shoal_heap_t *other = run_in_thread(allocate_cached);
  for (size_t i = 0; i < count; i++) {
    CHECK(((uint8_t *)cached_blocks[i])[size - 1] == (uint8_t)(i + 1)); /* contents survive */
    shoal_free(cached_blocks[i]);
  }
  /* The first `kept` stay here, the rest go home (outbox, then page). */
  shoal_page_t *cache = &thread_heap->class_cache[size_class];
  CHECK(cache->capacity - cache->used == kept);
  shoal_free(own);
  /* A medium class's malloc takes them first; a small class's once the
   * page in its fast path runs dry (its next slow path). */
  void *again[2 * CACHED_MAX];
  size_t taken = 0, mallocs = 0;
  while (taken < kept && mallocs < 2 * CACHED_MAX) {
    void *p = again[mallocs++] = shoal_malloc(size);
    for (size_t k = 0; k < kept; k++)
      if (p == cached_blocks[k]) {
        CHECK(segment_of(p)->heap == other);
        taken++;
      }
    memset(p, 0x5a, size);
  }
  CHECK(taken == kept && cache->free == NULL);
  if (block_size > DIRECT_MAX) CHECK(mallocs == kept);
  void *next = shoal_malloc(size); /* the cache is empty: a page of our own */
  CHECK(segment_of(next)->heap == thread_heap);
  shoal_free(next);
  for (size_t i = 0; i < mallocs; i++)
    if (segment_of(again[i])->heap == other) shoal_free(again[i]); /* kept again */
  CHECK(cache->capacity - cache->used == kept);
  for (size_t i = 0; i < mallocs; i++)
    if (segment_of(again[i])->heap != other) shoal_free(again[i]);
  shoal_collect(true); /* sends them home */
  CHECK(cache->free == NULL);
}

static void test_remote_class_cache(void) {
  remote_cache_keeps(3000, 8); /* a medium class: 3 kept */
  remote_cache_keeps(400, 40); /* a small class: 20 kept */
}

/* ---- a thread's own medium blocks serve its next malloc of the class ---- */

/* In a thread of its own, so that the class's pages and cache are this
 * test's alone: a page's last counted block goes to the page; with others
 * live, the block goes to the class cache, still counted in its page, and
 * the next malloc of the class takes it, in any page; calloc clears such a
 * block even on a page whose free blocks were zero; the cache holds at
 * most OWN_CACHE_MEDIUM bytes, the rest go to their pages; the frees count
 * as frees, not as remote ones; shoal_collect(true) sends the cache home,
 * and the pages, empty, go back. */
static void *own_medium_blocks(void *arg) {
  (void)arg;
  enum { SIZE = 3000, COUNT = 40 };
  uint8_t size_class = size_class_of(SIZE);
  size_t block_size = class_block_size[size_class];
  CHECK(block_size > DIRECT_MAX && size_class < CLASS_COUNT);
  uint8_t *lone = shoal_malloc(SIZE); /* the thread's heap is made here */
  shoal_page_t *cache = &thread_heap->class_cache[size_class];
  shoal_page_t *page = segment_page_of(segment_of(lone), lone);
  CHECK(page->used == 1);
  shoal_free(lone); /* the page's last: to the page, not the cache */
  CHECK(page->free == (shoal_block_t *)lone && cache->free == NULL);

  static uint8_t *blocks_of_class[COUNT];
  for (size_t i = 0; i < COUNT; i++) {
    blocks_of_class[i] = shoal_malloc(SIZE);
    memset(blocks_of_class[i], (int)i + 1, SIZE);
  }
  shoal_page_t *first_page = segment_page_of(segment_of(blocks_of_class[0]), blocks_of_class[0]);
  uint8_t *last = blocks_of_class[COUNT - 1];
  shoal_page_t *last_page = segment_page_of(segment_of(last), last);
  CHECK(last_page != first_page && last_page->used >= 2);
  /* The first page is full, so parked: a free goes to it (the slow path),
   * which puts it back in its class's queue. */
  shoal_free(blocks_of_class[2]);
  CHECK(first_page->free == (shoal_block_t *)blocks_of_class[2] && cache->free == NULL);
  shoal_stats_t before, after;
  shoal_stats_get(&before);
  uint32_t used = last_page->used;
  shoal_free(last);
  CHECK(cache->free == (shoal_block_t *)last && last_page->used == used);
  shoal_free(blocks_of_class[1]); /* another page: the last freed comes first */
  shoal_stats_get(&after);
  CHECK(after.remote_frees == before.remote_frees);
  CHECK(after.freed_blocks == before.freed_blocks + 2 &&
        after.live_blocks == before.live_blocks - 2);
  CHECK(shoal_malloc(SIZE) == blocks_of_class[1] && shoal_malloc(SIZE) == last);
  CHECK(shoal_malloc(SIZE) == blocks_of_class[2]); /* freed before never used */
  CHECK(cache->free == NULL);

  /* calloc: the flag of the block's page speaks for the cache's blocks too. */
  last_page->is_zero = 1; /* as on fresh memory: no block of its list is free */
  shoal_free(last);
  CHECK(cache->free == (shoal_block_t *)last && !last_page->is_zero);
  uint8_t *zeroed = shoal_calloc(1, SIZE);
  CHECK(zeroed == last);
  for (size_t k = 0; k < SIZE; k++) CHECK(zeroed[k] == 0);

  /* The bound: what does not fit goes to the page's list. */
  for (size_t i = 0; i < COUNT; i++) {
    uint8_t expected = blocks_of_class[i] == last ? 0 : (uint8_t)(i + 1);
    CHECK(blocks_of_class[i][SIZE - 1] == expected); /* contents survive */
    shoal_free(blocks_of_class[i]);
  }
  size_t cached = cache->capacity - cache->used;
  CHECK(cached >= 1 && cached * block_size >= OWN_CACHE_MEDIUM &&
        (cached - 1) * block_size < OWN_CACHE_MEDIUM);
  CHECK(first_page->used + last_page->used == cached);
  shoal_collect(true);
  CHECK(cache->free == NULL && cache->capacity == 0);
  shoal_stats_get(&after);
  CHECK(after.live_blocks == before.live_blocks - (COUNT - 1));
  return NULL;
}

static void test_own_medium_cache(void) {
  run_in_thread(own_medium_blocks);
}

/* ---- blocks freed into a page behind the first come before fresh ones ---- */

/* A malloc that must take `freed`, the one free block of the page behind
 * its class's spent first page, without the slow path (heap_queue_rotate):
 * the page that had it goes first, the spent one behind it. */
static void *malloc_rotating(size_t size, void *freed, shoal_page_t *spent, shoal_page_t *behind) {
  shoal_page_t **queue_first = &thread_heap->queues[size_class_of(size)].first;
  CHECK(*queue_first == spent && spent->next == behind);
  shoal_stats_t before, after;
  shoal_stats_get(&before);
  void *block = shoal_malloc(size);
  shoal_stats_get(&after);
  CHECK(block == freed); /* not the spent page's next never-used block */
  CHECK(!after.counters_enabled || after.slow_paths == before.slow_paths);
  CHECK(*queue_first == behind && behind->next == spent);
  return block;
}

static void test_freed_before_fresh(void) {
  enum { SIZE = 3000 };
  static void *before[1024], *in_first[1024];
  size_t before_count;
  shoal_page_t *first_page = fill_fresh_page(SIZE, before, &before_count, in_first);
  size_t in_first_count = first_page->reserved;
  CHECK(first_page->used == in_first_count);
  void *in_second = shoal_malloc(SIZE); /* a new page, carved one block at a time */
  shoal_page_t *second_page = segment_page_of(segment_of(in_second), in_second);
  CHECK(second_page != first_page && second_page->capacity < second_page->reserved);
  void *freed = in_first[3];
  shoal_free(freed);
  void *next = malloc_rotating(SIZE, freed, second_page, first_page);
  shoal_free(next);
  shoal_free(in_second);
  for (size_t i = 0; i < in_first_count; i++)
    if (in_first[i] != freed) shoal_free(in_first[i]);
  for (size_t i = 0; i < before_count; i++) shoal_free(before[i]);
  shoal_collect(true);
}

/* ---- a small class's spent first page: the next page with a block ---- */

static void *small_rotate_in_own_heap(void *arg) {
  (void)arg;
  enum { SIZE = 128 };
  static void *before[1024], *in_first[1024], *in_second[1024];
  size_t before_count;
  shoal_page_t *first_page = fill_fresh_page(SIZE, before, &before_count, in_first);
  size_t in_first_count = first_page->reserved;
  memset(in_first[4], 0x44, SIZE);
  memset(in_first[6], 0x66, SIZE);
  in_second[0] = shoal_malloc(SIZE); /* the first page is full: a new one */
  shoal_page_t *second_page = segment_page_of(segment_of(in_second[0]), in_second[0]);
  CHECK(second_page != first_page && second_page->capacity < second_page->reserved);
  void *freed = in_first[5];
  shoal_free(freed); /* the full first page comes back, behind the second */
  size_t in_second_count = 1;
  while (second_page->free != NULL) { /* what the second page carved so far */
    CHECK(in_second_count < 1024);
    in_second[in_second_count++] = shoal_malloc(SIZE);
  }
  void *next = malloc_rotating(SIZE, freed, second_page, first_page); /* small_rotate */
  CHECK(thread_heap->direct_page[SIZE / WORD_SIZE] == first_page);
  memset(next, 0x5c, SIZE); /* its neighbours keep their contents */
  CHECK(((uint8_t *)in_first[4])[SIZE - 1] == 0x44 && ((uint8_t *)in_first[6])[0] == 0x66);
  shoal_free(next);
  for (size_t i = 0; i < in_second_count; i++) shoal_free(in_second[i]);
  for (size_t i = 0; i < in_first_count; i++)
    if (in_first[i] != freed) shoal_free(in_first[i]);
  for (size_t i = 0; i < before_count; i++) shoal_free(before[i]);
  return NULL;
}

static void test_small_rotate(void) {
  run_in_thread(small_rotate_in_own_heap);
}

/* ---- a class with no free block takes a neighbour's ---- */

static void *borrow_in_own_heap(void *arg) {
  (void)arg;
  enum { SMALLER = 5000, LARGER = 5500 };
  uint8_t size_class = size_class_of(SMALLER);
  CHECK(size_class_of(LARGER) == size_class + 1 && class_block_size[size_class] == 5120);
  void *lender_kept = shoal_malloc(LARGER);
  void *spare = shoal_malloc(LARGER);
  shoal_free(spare);                   /* the larger class's page has one free block */
  void *first = shoal_malloc(SMALLER); /* opens the class's page, carved a block at a time */
  CHECK(shoal_malloc_usable_size(first) == 5120);
  void *borrowed = shoal_malloc(SMALLER); /* not a new block of its own page */
  CHECK(borrowed == spare && shoal_malloc_usable_size(borrowed) == 5632);
  memset(borrowed, 0x6b, SMALLER);
  CHECK(((uint8_t *)borrowed)[SMALLER - 1] == 0x6b && ((uint8_t *)lender_kept)[0] != 0x6b);
  shoal_free(borrowed); /* home to the larger class's page */
  /* An aligned request keeps to its class: 5632 is no multiple of 1024. */
  void *aligned = NULL;
  CHECK(shoal_posix_memalign(&aligned, 1024, SMALLER) == 0);
  CHECK(aligned != spare && (uintptr_t)aligned % 1024 == 0 &&
        shoal_malloc_usable_size(aligned) == 5120);
  CHECK(shoal_malloc(SMALLER) == spare); /* lent again: the free went to its own page */
  shoal_free(spare);
  shoal_free(aligned);
  shoal_free(first);
  shoal_free(lender_kept);
  return NULL;
}

/* A medium class borrows from as far as its reach (borrow_reach), no
 * further: with only a block one class beyond free, the class carves its
 * own page; with one at the reach free, that one. Four classes up below
 * 2304 bytes, eight from there. Each case in a thread of its own: the class
 * and its lenders start empty. */
typedef struct borrow_reach_case_s {
  size_t smaller;
  unsigned expected_reach;
} borrow_reach_case_t;

static void *borrow_reach_in_own_heap(void *arg) {
  const borrow_reach_case_t *test = arg;
  size_t smaller = test->smaller;
  uint8_t size_class = size_class_of(smaller);
  CHECK(borrow_reach(size_class) == test->expected_reach);
  uint8_t reach = (uint8_t)(size_class + test->expected_reach), beyond = (uint8_t)(reach + 1);
  CHECK(beyond < CLASS_COUNT);
  size_t reach_size = class_block_size[reach], beyond_size = class_block_size[beyond];
  void *reach_kept = shoal_malloc(reach_size), *reach_spare = shoal_malloc(reach_size);
  void *beyond_kept = shoal_malloc(beyond_size), *beyond_spare = shoal_malloc(beyond_size);
  shoal_free(beyond_spare); /* a free block one class too far up */
  void *first = shoal_malloc(smaller);
  void *second = shoal_malloc(smaller); /* carved from the class's own page */
  CHECK(second != beyond_spare && shoal_malloc_usable_size(second) == class_block_size[size_class]);
  shoal_free(reach_spare); /* now one in reach */
  void *third = shoal_malloc(smaller);
  CHECK(third == reach_spare && shoal_malloc_usable_size(third) == reach_size);
  memset(third, 0x2d, smaller);
  CHECK(((uint8_t *)third)[smaller - 1] == 0x2d);
  void *blocks[] = {third, second, first, beyond_kept, reach_kept};
  for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) shoal_free(blocks[i]);
  return NULL;
}

/* A small class is lent the neighbour's page: its fast path pops there
 * until the page leaves its queue. */
static void *lend_in_own_heap(void *arg) {
  (void)arg;
  enum { SMALLER = 300, LARGER = 340, MOST = 64 };
  uint8_t size_class = size_class_of(SMALLER);
  size_t slot = (SMALLER + WORD_SIZE - 1) / WORD_SIZE;
  CHECK(class_block_size[size_class] == 320 && size_class_of(LARGER) == size_class + 1);
  static void *larger[1024], *smaller[MOST];
  size_t larger_count = 0, smaller_count = 0;
  /* A page of 352s with more than an OS page of free blocks. */
  for (size_t i = 0; i < 24; i++) larger[i] = shoal_malloc(LARGER);
  for (size_t i = 1; i < 24; i++) shoal_free(larger[i]);
  larger_count = 1;
  shoal_page_t *lender = segment_page_of(segment_of(larger[0]), larger[0]);
  CHECK(lender->free != NULL && (lender->capacity - lender->used) * 352 >= EXTEND_BYTES);
  /* The class's own page, carved an OS page at a time, runs dry; the next
   * block comes from the lender, and so do the ones after it. */
  shoal_page_t *own = NULL;
  for (;;) {
    CHECK(smaller_count < MOST);
    void *p = shoal_malloc(SMALLER);
    smaller[smaller_count++] = p;
    shoal_page_t *page = segment_page_of(segment_of(p), p);
    if (own == NULL) own = page;
    if (page != own) {
      CHECK(page == lender && shoal_malloc_usable_size(p) == 352);
      break;
    }
    CHECK(shoal_malloc_usable_size(p) == 320);
  }
  CHECK(own->capacity < own->reserved); /* it could have carved more */
  CHECK(thread_heap->direct_page[slot] == lender);
  void *next = shoal_malloc(SMALLER);
  CHECK(segment_page_of(segment_of(next), next) == lender);
  memset(next, 0x3c, SMALLER);
  smaller[smaller_count++] = next;
  /* An aligned request takes its own class: 320 is a multiple of 64, 352
   * is not. */
  void *aligned = NULL;
  CHECK(shoal_posix_memalign(&aligned, 64, SMALLER) == 0);
  CHECK((uintptr_t)aligned % 64 == 0 && segment_page_of(segment_of(aligned), aligned) == own);
  CHECK(shoal_malloc_usable_size(aligned) == 320);
  shoal_free(aligned);
  /* That slow path gave the class its own page back, carved further: lent
   * again once that runs dry. Then the lender fills up and is parked: the
   * class's slots no longer name it. */
  for (;;) {
    CHECK(smaller_count < MOST);
    void *p = shoal_malloc(SMALLER);
    smaller[smaller_count++] = p;
    if (segment_page_of(segment_of(p), p) == lender) break;
  }
  CHECK(thread_heap->direct_page[slot] == lender);
  while (segment_page_of(segment_of(larger[larger_count - 1]), larger[larger_count - 1]) ==
         lender) {
    CHECK(larger_count < 1024);
    larger[larger_count++] = shoal_malloc(LARGER);
  }
  CHECK((lender->flags & PAGE_FULL) != 0 && thread_heap->direct_page[slot] != lender);
  void *after = shoal_malloc(SMALLER);
  CHECK(shoal_malloc_usable_size(after) >= SMALLER &&
        segment_page_of(segment_of(after), after) != lender);
  shoal_free(after);
  CHECK(((uint8_t *)next)[SMALLER - 1] == 0x3c); /* contents survive */
  for (size_t i = 0; i < smaller_count; i++) shoal_free(smaller[i]);
  for (size_t i = 0; i < larger_count; i++) shoal_free(larger[i]);
  return NULL;
}

static void test_borrow(void) {
  run_in_thread(borrow_in_own_heap);
  static borrow_reach_case_t reach_cases[] = {
      {1500, 4}, /* 1536 bytes, class 35 */
      {2200, 8}, /* 2304 bytes, class 40: the first of the wide reach */
      {5000, 8},
  };
  for (size_t i = 0; i < sizeof reach_cases / sizeof reach_cases[0]; i++)
    run_in_thread_with(borrow_reach_in_own_heap, &reach_cases[i]);
  run_in_thread(lend_in_own_heap);
}

/* ---- a page other threads emptied gives its slices back before new ones ---- */

static void *free_one(void *arg) {
  shoal_free(arg);
  return NULL;
}

static void *remote_emptied_in_own_heap(void *arg) {
  (void)arg;
  enum { SIZE = 256, OTHER_SIZE = 24000 };
  static void *before[1024], *in_first[1024];
  size_t before_count;
  shoal_page_t *first_page = fill_fresh_page(SIZE, before, &before_count, in_first);
  size_t count = first_page->reserved;
  uint8_t size_class = first_page->size_class;
  void *in_second = shoal_malloc(SIZE); /* parks the first page, opens a second */
  shoal_page_t *second_page = segment_page_of(segment_of(in_second), in_second);
  CHECK(second_page != first_page && (first_page->flags & PAGE_FULL) != 0);
  /* One remote free: the owner is notified and queues the page again,
   * behind the one serving the class. */
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, free_one, in_first[0]) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  shoal_collect(false);
  CHECK(first_page->flags == 0 && thread_heap->queues[size_class].last == first_page);
  CHECK(first_page->used == count - 1);
  /* The rest, from another thread: no notification for a queued page. */
  block_count = 0;
  for (size_t i = 1; i < count; i++) blocks[block_count++] = in_first[i];
  run_in_thread(free_all);
  CHECK(atomic_load(&first_page->xthread_free) >> 48 == count - 1);
  CHECK(first_page->size_class == size_class && first_page->used == count - 1);
  CHECK(atomic_load(&thread_heap->remote_pushed)); /* pushes onto a queued page's list */
  /* A class with no page yet takes slices: the emptied page goes first. */
  CHECK(thread_heap->queues[size_class_of(OTHER_SIZE)].first == NULL);
  void *other = shoal_malloc(OTHER_SIZE);
  CHECK(other != NULL);
  CHECK(first_page->size_class != size_class); /* given back (or its slices reused) */
  /* That round found a page emptied: the flag stays for the pushers to read. */
  CHECK(thread_heap->emptied_found && atomic_load(&thread_heap->remote_pushed));
  CHECK(thread_heap->queues[size_class].first == second_page &&
        thread_heap->queues[size_class].last == second_page);
  memset(other, 0x3c, OTHER_SIZE);
  shoal_free(other);
  shoal_free(in_second);
  for (size_t i = 0; i < before_count; i++) shoal_free(before[i]);
  return NULL;
}

static void test_remote_emptied_retired(void) {
  run_in_thread(remote_emptied_in_own_heap);
}

/* A heap that no other thread frees into takes fresh pages without a look
 * for emptied ones; a push starts a round, and a round that finds none
 * emptied ends the looks until the next push. */
static void *looks_after_pushes_only(void *arg) {
  (void)arg;
  enum { SIZE = 256, SECOND_SIZE = 2000, THIRD_SIZE = 3000 };
  static void *before[1024], *in_first[1024];
  size_t before_count;
  shoal_page_t *first_page = fill_fresh_page(SIZE, before, &before_count, in_first);
  shoal_heap_t *heap = thread_heap;
  CHECK(first_page->flags == 0 && (first_page->used == first_page->reserved));
  shoal_free(in_first[0]); /* its own free: no push */
  CHECK(heap->queues[size_class_of(SECOND_SIZE)].first == NULL);
  uint64_t taken = atomic_load(&heap->pages_taken);
  void *second = shoal_malloc(SECOND_SIZE);
  CHECK(atomic_load(&heap->pages_taken) == taken + 1); /* a fresh page, and no look */
  CHECK(!atomic_load(&heap->remote_pushed) && heap->emptied_scans_owed == 0);
  /* Another thread frees a block of the first page, still queued and far
   * from empty: one push onto its list. */
  block_count = 0;
  blocks[block_count++] = in_first[1];
  run_in_thread(free_all);
  CHECK(atomic_load(&first_page->xthread_free) >> 48 == 1);
  CHECK(atomic_load(&heap->remote_pushed));
  /* The next fresh page starts a round: a few pages held, one look, which
   * finds none emptied and clears the flag. */
  CHECK(heap->queues[size_class_of(THIRD_SIZE)].first == NULL);
  void *third = shoal_malloc(THIRD_SIZE);
  CHECK(third != NULL && atomic_load(&heap->pages_taken) == taken + 2);
  CHECK(!heap->emptied_found && heap->emptied_scans_owed == 0);
  CHECK(!atomic_load(&heap->remote_pushed));
  CHECK(first_page->size_class == size_class_of(SIZE)); /* still in use, kept */
  memset(second, 0x5a, SECOND_SIZE);
  memset(third, 0xa5, THIRD_SIZE);
  shoal_free(third);
  shoal_free(second);
  for (size_t i = 2; i < first_page->reserved; i++) shoal_free(in_first[i]);
  for (size_t i = 0; i < before_count; i++) shoal_free(before[i]);
  return NULL;
}

static void test_looks_after_pushes_only(void) {
  run_in_thread(looks_after_pushes_only);
}

/* ---- a mailbox's overflow ---- */

/* A sender whose post finds the owner's mailbox past its bound, from many
 * senders, takes the parcels out (heap.c, mailbox_overflow) and sends home
 * the blocks of classes nobody wanted lately, the parcel's own block last:
 * from then on that block is the owner's, which may hand it out at once.
 * The overflow once read the parcel's count again after it, and so ran on
 * over what the block's next holder wrote there (the torture build of
 * larson: another sender's parcel, its blocks delivered twice, a page's
 * list made a cycle). An audit build overwrites what follows a block's key
 * as it goes onto a page's list (page.c, audit_poison), so such a read
 * runs on at once, in any run. Here every post overflows (the bound and
 * the senders forced, and no depot wanted: a purge delay of 0), and the
 * owner, which waits, finds every block of its sent home. */
enum { OVERFLOW_SIZE = 2048, OVERFLOW_BLOCKS = 64 };
static void *overflow_blocks[OVERFLOW_BLOCKS];
static shoal_heap_t *overflow_owner;
static pthread_barrier_t overflow_line;

static void *overflow_owner_run(void *arg) {
  (void)arg;
  for (size_t i = 0; i < OVERFLOW_BLOCKS; i++) overflow_blocks[i] = shoal_malloc(OVERFLOW_SIZE);
  overflow_owner = thread_heap;
  pthread_barrier_wait(&overflow_line);
  pthread_barrier_wait(&overflow_line); /* the sender is done */
  size_t home = 0;
  for (size_t i = 0; i < OVERFLOW_BLOCKS; i++) {
    shoal_page_t *page = segment_page_of(segment_of(overflow_blocks[i]), overflow_blocks[i]);
    page_collect(page);
  }
  for (size_t i = 0; i < OVERFLOW_BLOCKS; i++) {
    shoal_page_t *page = segment_page_of(segment_of(overflow_blocks[i]), overflow_blocks[i]);
    size_t found = 0, length = 0;
    for (shoal_block_t *block = page->free; block != NULL && length <= page->reserved;
         block = block->next, length++)
      found += block == overflow_blocks[i];
    CHECK_CTX(found <= 1 && length <= page->reserved, "block %p %zu times on its page's list",
              overflow_blocks[i], found);
    home += found;
  }
  /* All but the few the sender's class cache keeps (none where the
   * owner's pages are guests in the sender's segment: those go home). */
  size_t cached = REMOTE_CACHE_BYTES / OVERFLOW_SIZE;
  CHECK_CTX(home >= OVERFLOW_BLOCKS - cached, "%zu of %d blocks home", home, OVERFLOW_BLOCKS);
  return NULL;
}

static void *overflow_sender_run(void *arg) {
  (void)arg;
  void *own = shoal_malloc(OVERFLOW_SIZE); /* it allocates the class: its frees go by owner */
  pthread_barrier_wait(&overflow_line);
  for (size_t i = 0; i < OVERFLOW_BLOCKS; i++) {
    atomic_store(&overflow_owner->mailbox_bytes, MAILBOX_DELIVER_BYTES);
    atomic_store(&overflow_owner->mailbox_sender_changes, MAILBOX_MANY_SENDERS);
    shoal_free(overflow_blocks[i]); /* past its class cache's few: a parcel of its own */
    heap_outbox_flush(thread_heap); /* posted, the mailbox overflows */
    CHECK(atomic_load(&overflow_owner->mailbox) == NULL);
  }
  pthread_barrier_wait(&overflow_line);
  shoal_free(own);
  return NULL;
}

static void test_mailbox_overflow(void) {
  long purge_delay_option = shoal_option_get(SHOAL_OPTION_PURGE_DELAY);
  shoal_option_set(SHOAL_OPTION_PURGE_DELAY, 0);
  CHECK(pthread_barrier_init(&overflow_line, NULL, 2) == 0);
  pthread_t owner, sender;
  CHECK(pthread_create(&owner, NULL, overflow_owner_run, NULL) == 0);
  CHECK(pthread_create(&sender, NULL, overflow_sender_run, NULL) == 0);
  CHECK(pthread_join(sender, NULL) == 0);
  CHECK(pthread_join(owner, NULL) == 0);
  pthread_barrier_destroy(&overflow_line);
  shoal_option_set(SHOAL_OPTION_PURGE_DELAY, purge_delay_option);
}

/* ---- a live thread reuses a dead thread's segments ---- */

enum { DEAD_BLOCKS = 3000, DEAD_KEPT_EVERY = 500, DEAD_SIZE = 4096 };
static void *dead_blocks[DEAD_BLOCKS];
static shoal_segment_t *dead_segments[8];
static size_t dead_segment_count;
static pthread_barrier_t reuse_barrier;

/* Fills a few segments, frees all but a few blocks (every segment keeps
 * something live, so none goes back to the arena), and exits. */
static void *fill_and_die(void *arg) {
  (void)arg;
  for (size_t i = 0; i < DEAD_BLOCKS; i++) {
    dead_blocks[i] = shoal_malloc(DEAD_SIZE);
    shoal_segment_t *segment = segment_of(dead_blocks[i]);
    bool known = false;
    for (size_t k = 0; k < dead_segment_count; k++) known |= dead_segments[k] == segment;
    if (!known && dead_segment_count < 8) dead_segments[dead_segment_count++] = segment;
  }
  for (size_t i = 0; i < DEAD_BLOCKS; i++)
    if (i % DEAD_KEPT_EVERY != 0) shoal_free(dead_blocks[i]);
  return NULL;
}

static void *live_on(void *arg) {
  (void)arg;
  void *first = shoal_malloc(DEAD_SIZE); /* a heap of its own before the other thread dies */
  pthread_barrier_wait(&reuse_barrier);
  pthread_barrier_wait(&reuse_barrier); /* it has exited */
  static void *mine[DEAD_BLOCKS];
  size_t count = 0;
  bool reused = false;
  while (count < DEAD_BLOCKS && !reused) {
    mine[count] = shoal_malloc(DEAD_SIZE);
    memset(mine[count], 7, DEAD_SIZE);
    shoal_segment_t *segment = segment_of(mine[count++]);
    for (size_t k = 0; k < dead_segment_count; k++) reused |= dead_segments[k] == segment;
  }
  /* Its next segment was the dead thread's, now this heap's, with the
   * dead thread's live blocks in it. */
  CHECK(reused);
  CHECK(segment_of(mine[count - 1])->heap == thread_heap);
  for (size_t i = 0; i < count; i++) shoal_free(mine[i]);
  shoal_free(first);
  return NULL;
}

#ifdef __linux__
/* ---- an owner that only waits for a core keeps its free slices ---- */

/* Main and the owner share one core. The owner allocates AWAY_PAGES
 * pages' worth of blocks and, while main frees them, waits: either
 * runnable (sched_yield: it only waits for the core) or asleep. Main's
 * frees notify its parked pages, and past 2 MiB of them main serves its
 * heap. The owner comes back once, in the middle (a malloc's slow path
 * notes how it was away), and waits again; serves of the second half then
 * purge the heap only if it slept. */
#define AWAY_BLOCK 256
#define AWAY_PAGES 640
static _Atomic(int) away_step;
static _Atomic(int) away_blocked_for; /* the step the sleeping owner waits on, once it does */
static void **away_blocks;
static size_t away_count;

static void pin_to_one_core(void) {
  cpu_set_t allowed, one;
  CHECK(sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
    if (CPU_ISSET(cpu, &allowed)) {
      CPU_SET(cpu, &one);
      break;
    }
  CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
}

static pthread_mutex_t away_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t away_moved = PTHREAD_COND_INITIALIZER;

static void away_step_set(int step) {
  pthread_mutex_lock(&away_lock);
  atomic_store(&away_step, step);
  pthread_cond_broadcast(&away_moved);
  pthread_mutex_unlock(&away_lock);
}

/* Asleep, the owner sleeps at least once, even when main has already done
 * its part (a thread away only because main ran first waited for the
 * core), then blocks until main's step: a sleep that ends while main still
 * frees leaves the owner runnable, waiting for the core, and under load
 * long enough for a serve to find it so (heap.c, heap_owner_only_away). */
static void away_until(int step, bool asleep) {
  if (!asleep) {
    do sched_yield();
    while (atomic_load(&away_step) < step);
    return;
  }
  struct timespec pause = {0, 200 * 1000};
  nanosleep(&pause, NULL);
  pthread_mutex_lock(&away_lock);
  atomic_store(&away_blocked_for, step);
  while (atomic_load(&away_step) < step) pthread_cond_wait(&away_moved, &away_lock);
  pthread_mutex_unlock(&away_lock);
}

static _Atomic(int) away_owner_id; /* the owner's os_thread_id */

/* The owner is blocked on the condition for `step` (asleep, not waiting
 * for a core): what main's frees of the second half must see, however
 * loaded the machine. Its first sleep's end leaves it runnable, under load
 * for a while, before it blocks there. */
static void wait_until_owner_blocked(int step) {
  os_thread_state_t owner;
  for (;;) {
    CHECK(os_thread_state(atomic_load(&away_owner_id), &owner));
    if (atomic_load(&away_blocked_for) == step && !owner.runnable) return;
    sched_yield();
  }
}

static void *owner_away(void *arg) {
  bool asleep = arg != NULL;
  atomic_store(&away_owner_id, os_thread_id());
  pin_to_one_core();
  for (size_t i = 0; i < away_count; i++) away_blocks[i] = shoal_malloc(AWAY_BLOCK);
  /* How it was away counts from here, as from its last return: not from
   * the thread's start, whose page faults may have waited on main's
   * mapping calls (a voluntary switch: blocked, not preempted). */
  thread_heap->usage_at_return = os_thread_usage();
  away_step_set(1); /* handed over */
  away_until(2, asleep);
  shoal_free(shoal_malloc(3000)); /* back: a class it never used, a slow path */
  CHECK(atomic_load(&thread_heap->owner_was_preempted) == !asleep);
  away_step_set(3);
  away_until(4, asleep);
  return NULL;
}

static size_t owner_away_purges(bool asleep) {
  long purge_delay_option = shoal_option_get(SHOAL_OPTION_PURGE_DELAY);
  shoal_option_set(SHOAL_OPTION_PURGE_DELAY, 2000); /* the first serve's due purge: far */
  away_step_set(0);
  atomic_store(&away_blocked_for, 0);
  pthread_t owner;
  CHECK(pthread_create(&owner, NULL, owner_away, asleep ? &away_step : NULL) == 0);
  away_until(1, false);
  size_t half = away_count / 2;
  for (size_t i = 0; i < half; i++) shoal_free(away_blocks[i]);
  heap_outbox_flush(thread_heap);
  away_step_set(2);
  away_until(3, false);
  if (asleep) wait_until_owner_blocked(4);
  size_t purges_before = shoal_stats().purges;
  for (size_t i = half; i < away_count; i++) shoal_free(away_blocks[i]);
  heap_outbox_flush(thread_heap);
  size_t purges = shoal_stats().purges - purges_before;
  away_step_set(4);
  CHECK(pthread_join(owner, NULL) == 0);
  shoal_option_set(SHOAL_OPTION_PURGE_DELAY, purge_delay_option);
  return purges;
}

static void test_owner_waiting_for_core(void) {
  cpu_set_t before;
  CHECK(sched_getaffinity(0, sizeof before, &before) == 0);
  pin_to_one_core();
  away_count = AWAY_PAGES * (SLICE_SIZE / AWAY_BLOCK);
  away_blocks = malloc(away_count * sizeof *away_blocks);
  CHECK(away_blocks != NULL);
  CHECK(owner_away_purges(false) == 0);
  CHECK(owner_away_purges(true) > 0);
  free(away_blocks);
  shoal_collect(true);
  CHECK(sched_setaffinity(0, sizeof before, &before) == 0);
}
#endif

static void test_dead_segment_reuse(void) {
  CHECK(pthread_barrier_init(&reuse_barrier, NULL, 2) == 0);
  pthread_t live, dying;
  CHECK(pthread_create(&live, NULL, live_on, NULL) == 0);
  pthread_barrier_wait(&reuse_barrier);
  CHECK(pthread_create(&dying, NULL, fill_and_die, NULL) == 0);
  pthread_join(dying, NULL);
  CHECK(dead_segment_count >= 2);
  pthread_barrier_wait(&reuse_barrier);
  pthread_join(live, NULL);
  /* The dead thread's survivors, some now in the live thread's (also dead)
   * heap's segment: freed, counted, their pages emptied. */
  shoal_stats_t before;
  shoal_stats_get(&before);
  size_t kept = 0;
  for (size_t i = 0; i < DEAD_BLOCKS; i += DEAD_KEPT_EVERY, kept++) shoal_free(dead_blocks[i]);
  shoal_collect(true);
  shoal_stats_t after;
  shoal_stats_get(&after);
  CHECK(after.live_blocks + kept == before.live_blocks);
  pthread_barrier_destroy(&reuse_barrier);
}

/* ---- a cached segment's touched slices become the next heap's to purge ---- */

static void *fill_and_free_a_segment(void *arg) {
  (void)arg;
  enum { BLOCKS = 900 }; /* of 4 KiB: most of a segment's 63 slices */
  static void *held[BLOCKS];
  for (size_t i = 0; i < BLOCKS; i++) {
    held[i] = shoal_malloc(4096);
    memset(held[i], 1, 4096);
  }
  for (size_t i = 0; i < BLOCKS; i++) shoal_free(held[i]);
  return NULL; /* exit: the emptied segment waits in the arena's cache, touched */
}

static void *take_a_cached_segment(void *arg) {
  (void)arg;
  void *p = shoal_malloc(4096);
  CHECK(p != NULL);
  /* Before, taking a page of a cached segment subtracted bytes this heap had
   * never counted, and the figure wrapped around to nearly 2^64. */
  CHECK(thread_heap->purge_pending_bytes <= SEGMENT_SIZE);
  shoal_free(p);
  return NULL;
}

static void test_cached_segment_pending(void) {
  run_in_thread(fill_and_free_a_segment);
  run_in_thread(take_a_cached_segment);
}

/* ---- the arena's trim waits while the cache is drawn down ---- */

static shoal_segment_t *touched_segment(void) {
  shoal_segment_t *segment = arena_segment_acquire();
  CHECK(segment != NULL);
  memset((uint8_t *)segment + SLICE_SIZE, 7, 4096);
  os_commit_note((ptrdiff_t)SLICE_SIZE);
  segment->dirty_slices |= (uint64_t)1 << 1;
  return segment;
}

/* Eight touched segments released to the arena. Taken back at the pace of
 * a heap that grows into them (five by the time the trim is due, the last
 * just before), they put the trim off, and the others stay touched; a
 * delay with no take, and the trim purges them. Then two taken after a
 * pause of ten delays (threads waking up in a program that freed all it
 * had) do not put off the trim of the rest. The put-offs are checked only
 * when the last take and the trim ran within a delay of each other, as a
 * program drawing the cache does (a preempted test thread does not). */
static void test_trim_put_off_while_drawn(void) {
  enum { COUNT = 8, EARLY = 4, LATE = 2 };
  const uint64_t touched = (uint64_t)1 << 1;
  shoal_collect(true); /* the cache empty */
  shoal_segment_t *segments[COUNT], *taken[COUNT];
  for (size_t i = 0; i < COUNT; i++) segments[i] = touched_segment();
  for (size_t i = 0; i < COUNT; i++) arena_segment_release(segments[i]);
  int64_t due = atomic_load(&arena_purge_at_ms);
  CHECK(due != 0);
  for (size_t i = 0; i < EARLY; i++) taken[i] = arena_segment_acquire();
  CHECK(taken[0] == segments[COUNT - 1]); /* the last released first */
  while (os_now_ms() < due) sleep_ms(1);
  int64_t taken_at = os_now_ms();
  taken[EARLY] = arena_segment_acquire();
  arena_cache_trim(false);
  if (os_now_ms() - taken_at < purge_delay()) {
    CHECK(atomic_load(&arena_purge_at_ms) > due); /* put off */
    for (size_t i = 0; i < COUNT - EARLY - 1; i++) CHECK(segments[i]->dirty_slices & touched);
  }
  due = atomic_load(&arena_purge_at_ms);
  while (due != 0 && os_now_ms() < due) {
    sleep_ms(1);
    due = atomic_load(&arena_purge_at_ms);
  }
  arena_cache_trim(false);
  CHECK(atomic_load(&arena_purge_at_ms) == 0);
  CHECK(segments[0]->dirty_slices == SLICE_HEADER_BITS); /* purged, kept mapped for reuse */
  for (size_t i = 0; i <= EARLY; i++) arena_segment_release(taken[i]);
  shoal_collect(true);

  for (size_t i = 0; i < COUNT; i++) segments[i] = touched_segment();
  for (size_t i = 0; i < COUNT; i++) arena_segment_release(segments[i]);
  int64_t released_at = os_now_ms();
  due = atomic_load(&arena_purge_at_ms);
  CHECK(due != 0);
  /* Late: past the due trim, and slower than a draw that would take the
   * rest before the put-offs run out. That pace is counted in delays, which
   * refaults earlier in this process (slices purged and soon taken again,
   * by the tests before) may have lengthened: the trim was then due after
   * fewer of them. */
  while (os_now_ms() < due || (int64_t)(COUNT - LATE) * (os_now_ms() - released_at) <=
                                  (int64_t)LATE * ARENA_TRIMS_PUT_OFF * purge_delay())
    sleep_ms(1);
  for (size_t i = 0; i < LATE; i++) taken[i] = arena_segment_acquire();
  arena_cache_trim(false);
  CHECK(atomic_load(&arena_purge_at_ms) == 0); /* not put off */
  CHECK(segments[0]->dirty_slices == SLICE_HEADER_BITS);
  for (size_t i = 0; i < LATE; i++) arena_segment_release(taken[i]);
  shoal_collect(true);
}

/* ---- segments past the cache are retained, purged, for the next ---- */

/* Segments released past the cache leave the segment map purged and are
 * handed out again before the OS maps any more; a forced collect unmaps
 * them. */
static void test_retired_segments_come_back(void) {
  enum { PAST = 4, COUNT = ARENA_CACHED_SEGMENTS + PAST };
  shoal_collect(true); /* the cache and the retained ones gone */
  static shoal_segment_t *segments[COUNT], *again[COUNT];
  for (size_t i = 0; i < COUNT; i++) segments[i] = touched_segment();
  for (size_t i = 0; i < COUNT; i++) arena_segment_release(segments[i]);
  for (size_t i = 0; i < ARENA_CACHED_SEGMENTS; i++)
    CHECK(segment_find(segments[i]) == segments[i]);
  for (size_t i = ARENA_CACHED_SEGMENTS; i < COUNT; i++) CHECK(segment_find(segments[i]) == NULL);
  size_t reserved = os_reserved_bytes(), committed = os_committed_bytes();
  for (size_t i = 0; i < COUNT; i++) again[i] = arena_segment_acquire();
  CHECK(os_reserved_bytes() == reserved);                       /* none mapped anew */
  CHECK(os_committed_bytes() == committed + PAST * SLICE_SIZE); /* their headers, written again */
  for (size_t i = ARENA_CACHED_SEGMENTS; i < COUNT; i++) {
    shoal_segment_t *retired = again[i];
    bool was_released = false;
    for (size_t j = ARENA_CACHED_SEGMENTS; j < COUNT; j++) was_released |= retired == segments[j];
    CHECK(was_released && segment_find(retired) == retired);
    CHECK(retired->dirty_slices == SLICE_HEADER_BITS);
    const uint8_t *touched = (const uint8_t *)retired + SLICE_SIZE;
    for (size_t at = 0; at < 4096; at += 64) CHECK(touched[at] == 0); /* purged */
  }
  for (size_t i = 0; i < COUNT; i++) arena_segment_release(again[i]);
  shoal_collect(true);
  CHECK(os_reserved_bytes() + COUNT * SEGMENT_SIZE <= reserved); /* all unmapped */
}

/* ---- a heap costs its thread one page ---- */

#ifdef __linux__
/* A page of our own memory (written, so not the shared zero page that a
 * read of untouched memory maps): present and mapped only here, per
 * /proc/self/pagemap (bits 63 and 56). */
static bool page_written(int pagemap, const void *address) {
  uint64_t entry = 0;
  off_t at = (off_t)((uintptr_t)address / 4096 * sizeof entry);
  CHECK(pread(pagemap, &entry, sizeof entry, at) == (ssize_t)sizeof entry);
  return (entry >> 63 & 1) && (entry >> 56 & 1);
}

/* Whether a read of untouched anonymous memory maps the shared zero page,
 * as Linux does by default; a kernel built or booted without it maps a
 * page of the process's own, so that what shoal only reads costs memory
 * there too, and the test below cannot tell reads from writes. */
static bool reads_map_zero_page(int pagemap) {
  volatile uint8_t *probe = os_map_aligned(4096, 4096);
  CHECK(probe != NULL);
  uint8_t value = probe[0];
  CHECK(value == 0);
  bool shared = !page_written(pagemap, (const void *)probe);
  os_unmap((void *)probe, 4096);
  return shared;
}
#endif

/* What a thread that frees only its own blocks writes of its heap lies in
 * the heap's first OS page (internal.h): the class caches and the outbox
 * past it stay unwritten, not resident. */
static void *own_blocks_only(void *arg) {
  (void)arg;
  for (size_t size = 16; size <= 2048; size += 48) shoal_free(shoal_malloc(size));
  shoal_heap_t *heap = thread_heap;
  CHECK((uintptr_t)heap % os_page_size() == 0);
#ifdef __linux__
  int pagemap = open("/proc/self/pagemap", O_RDONLY);
  if (pagemap < 0) { /* a sandbox may hide it: the layout's static assert still holds */
    printf("unit_heap: no /proc/self/pagemap, heap pages not checked\n");
    return NULL;
  }
  CHECK(os_page_size() == 4096);
  CHECK(page_written(pagemap, heap));
  if (!reads_map_zero_page(pagemap)) {
    printf("unit_heap: this kernel maps no zero page on reads, heap pages not checked\n");
    close(pagemap);
    return NULL;
  }
  for (size_t offset = 4096; offset < sizeof(shoal_heap_t); offset += 4096)
    CHECK(!page_written(pagemap, (uint8_t *)heap + offset));
  close(pagemap);
#endif
  return NULL;
}

static void test_heap_one_page(void) {
  run_in_thread(own_blocks_only);
}

/* ---- a filling page faults in ahead of its carving ---- */

/* Blocks of 64 bytes carve a fresh page an OS page at a time. In a small
 * process they fault in one by one; where the process holds
 * POPULATE_MIN_COMMITTED (a big block here), the carving that reaches
 * POPULATE_FROM faults in the OS pages up to twice that at once (page.c,
 * page_populate_ahead), and no further. */
static void *carved_blocks[8192];
static size_t carved_count;

static void *carve_one(void) {
  CHECK(carved_count < 8192);
  void *block = shoal_malloc(64);
  CHECK(block != NULL);
  return carved_blocks[carved_count++] = block;
}

static uint8_t *fresh_page_carved_to(size_t bytes, shoal_page_t **page_out) {
  uint8_t *block;
  shoal_page_t *page;
  do { /* until a block opens a page of its own, on fresh slices */
    block = carve_one();
    page = segment_page_of(segment_of(block), block);
  } while (page->used != 1 || !page->is_zero);
  while ((size_t)page->capacity * 64 < bytes) carve_one();
  *page_out = page;
  return page->start;
}

static void *filling_page_ahead(void *arg) {
  (void)arg;
#ifdef __linux__
  int pagemap = open("/proc/self/pagemap", O_RDONLY);
  if (pagemap < 0) {
    printf("unit_heap: no /proc/self/pagemap, faulting ahead not checked\n");
    return NULL;
  }
  uint8_t *probe = os_map_aligned(2 * 4096, 4096);
  CHECK(probe != NULL);
  os_populate(probe, 2 * 4096);
  bool populates = page_written(pagemap, probe) && page_written(pagemap, probe + 4096);
  CHECK(probe[0] == 0 && probe[2 * 4096 - 1] == 0);
  os_unmap(probe, 2 * 4096);
  if (!populates) {
    printf("unit_heap: this kernel faults nothing in ahead, not checked\n");
    close(pagemap);
    return NULL;
  }
  CHECK(POPULATE_FROM == 8192 && EXTEND_BYTES == 4096);
  shoal_page_t *page;
  CHECK_CTX(os_committed_bytes() < POPULATE_MIN_COMMITTED, "the test process holds %zu bytes",
            os_committed_bytes());
  uint8_t *start = fresh_page_carved_to(3 * 4096, &page);
  CHECK(!page_written(pagemap, start + 3 * 4096)); /* small: fault by fault */

  size_t big_size = POPULATE_MIN_COMMITTED;
  uint8_t *big = shoal_malloc(big_size);
  CHECK(big != NULL && os_committed_bytes() >= POPULATE_MIN_COMMITTED);
  start = fresh_page_carved_to(3 * 4096, &page);
  CHECK(!page_written(pagemap, start + 3 * 4096)); /* a heap of a few pages: fault by fault */
  void *page_each[POPULATE_MIN_PAGES];             /* a large block is a page of its own */
  for (size_t i = 0; i < POPULATE_MIN_PAGES; i++) CHECK((page_each[i] = shoal_malloc(100000)));
  start = fresh_page_carved_to(3 * 4096, &page);
  CHECK(page->capacity * 64 == 3 * 4096);
  CHECK_CTX(page_written(pagemap, start + 3 * 4096), "the page's fourth OS page is not resident");
  CHECK(!page_written(pagemap, start + 4 * 4096)); /* up to twice POPULATE_FROM, no further */
  uint8_t *carved = fresh_page_carved_to(4 * 4096 + 64, &page); /* past the next doubling */
  CHECK(page_written(pagemap, carved + 7 * 4096) && !page_written(pagemap, carved + 8 * 4096));

  /* A block freed into a page and taken again by calloc: zeroed, though its
   * first life wrote it (the page's flag says only that it was made on
   * fresh slices: its own frees do not clear it); every carved block live
   * again, the page fills on, faulting in ahead as before. */
  start = fresh_page_carved_to(4096, &page);
  uint8_t *reused = carve_one();
  CHECK(reused == start + 64);
  memset(reused, 0xa5, 64);
  shoal_free(carved_blocks[--carved_count]); /* the first block keeps the page in use */
  uint8_t *zeroed = shoal_calloc(1, 64);
  CHECK(zeroed == reused);
  for (size_t i = 0; i < 64; i++) CHECK(zeroed[i] == 0);
  carved_blocks[carved_count++] = zeroed;
  while ((size_t)page->capacity * 64 < 3 * 4096) carve_one();
  CHECK(page->is_zero && page_written(pagemap, start + 3 * 4096));
  shoal_free(big);
  for (size_t i = 0; i < POPULATE_MIN_PAGES; i++) shoal_free(page_each[i]);
  while (carved_count > 0) shoal_free(carved_blocks[--carved_count]);
  shoal_collect(true);
  close(pagemap);
#endif
  return NULL;
}

static void test_populate_ahead(void) {
  run_in_thread(filling_page_ahead);
}

/* ---- a page on touched slices gives back what it has not carved ---- */

enum { TOUCHED_PAGE_BLOCK = 3000 };

/* A large block written and freed, then the first block of a class page
 * made on its slices, written with 0x33; `keep` keeps the segment the
 * heap's when the large block goes. */
static shoal_page_t *page_made_on_touched_slices(void **keep, uint8_t **first) {
  size_t large = 8 * SLICE_SIZE;
  *keep = shoal_malloc(64);
  uint8_t *big = shoal_malloc(large);
  CHECK(*keep != NULL && big != NULL);
  memset(big, 0x5a, large);
  shoal_segment_t *segment = segment_of(big);
  shoal_free(big);
  *first = shoal_malloc(TOUCHED_PAGE_BLOCK);
  CHECK(*first != NULL && segment_of(*first) == segment);
  shoal_page_t *page = segment_page_of(segment, *first);
  CHECK(page->touched_tail && page->capacity == 1);
  memset(*first, 0x33, TOUCHED_PAGE_BLOCK);
  return page;
}

/* A large block writes its slices and frees them; the class page made next
 * takes touched slices first and carves one block: the rest stays resident
 * until a due purge or a collect, which gives back what the page has not
 * carved and leaves its block intact. Carving on, the page serves that
 * memory again as fresh. */
static void *page_on_touched_slices(void *arg) {
  (void)arg;
  size_t size = TOUCHED_PAGE_BLOCK;
  void *keep;
  uint8_t *first;
  shoal_page_t *page = page_made_on_touched_slices(&keep, &first);
  uint8_t *tail = (uint8_t *)(((uintptr_t)first + size + 4095) & ~(uintptr_t)4095);
  uint8_t *end = page->start + (size_t)page->slice_count * SLICE_SIZE;
  shoal_stats_t before;
  shoal_stats_get(&before);
  shoal_collect(true);
  shoal_stats_t after;
  shoal_stats_get(&after);
  CHECK_CTX(after.purged_bytes >= before.purged_bytes + (size_t)(end - tail),
            "purged %zu bytes, the page's tail is %zu", after.purged_bytes - before.purged_bytes,
            (size_t)(end - tail));
  CHECK(page->touched_tail == TAIL_PURGED); /* given back, watched for a refault */
  for (size_t i = 0; i < size; i++) CHECK(first[i] == 0x33);
#ifdef __linux__
  int pagemap = open("/proc/self/pagemap", O_RDONLY);
  if (pagemap >= 0) {
    for (uint8_t *at = tail; at < end; at += 4096) CHECK(!page_written(pagemap, at));
    close(pagemap);
  }
#endif
  void *more[16];
  for (size_t i = 0; i < 16; i++) {
    more[i] = shoal_malloc(size);
    CHECK(segment_page_of(segment_of(more[i]), more[i]) == page);
    memset(more[i], (int)i, size);
  }
  for (size_t i = 0; i < 16; i++) {
    for (size_t k = 0; k < size; k += 512) CHECK(((uint8_t *)more[i])[k] == (uint8_t)i);
    shoal_free(more[i]);
  }
  shoal_free(first);
  shoal_free(keep);
  return NULL;
}

/* A medium size whose class has nothing at hand in this thread's heap: its
 * malloc takes the slow path (heap_find_page). */
static size_t size_of_an_empty_class(void) {
  shoal_heap_t *heap = thread_heap;
  for (uint8_t size_class = CLASS_COUNT - 1; size_class >= DIRECT_CLASSES; size_class--)
    if (heap->queues[size_class].first == NULL && heap->class_cache[size_class].free == NULL)
      return class_block_size[size_class];
  CHECK(!"a medium class with no page");
  return 0;
}

/* The same page's tail goes at the owner's first slow path a purge delay
 * after it was made, with no due purge and no collect: not before, and
 * not while the page carves (a delay more from each look that finds it
 * carved since the one before). */
static void *page_tail_after_delay(void *arg) {
  (void)arg;
  long purge_delay_option = shoal_option_get(SHOAL_OPTION_PURGE_DELAY);
  shoal_option_set(SHOAL_OPTION_PURGE_DELAY, 60 * 1000); /* no delay passes on its own */
  size_t size = TOUCHED_PAGE_BLOCK;
  void *keep;
  uint8_t *first;
  shoal_page_t *page = page_made_on_touched_slices(&keep, &first);
  shoal_heap_t *heap = thread_heap;
  CHECK(heap->touched_tails && heap->tails_purge_at_ms > os_now_ms());
  void *before = shoal_malloc(size_of_an_empty_class()); /* within the delay: kept */
  CHECK(before != NULL && page->touched_tail == 1);
  uint8_t *second = shoal_malloc(size); /* the page carves again */
  CHECK(second != NULL && segment_page_of(segment_of(second), second) == page);
  CHECK(page->capacity == 2);
  memset(second, 0x44, size);
  heap->tails_purge_at_ms = os_now_ms(); /* the delay has passed */
  void *carving = shoal_malloc(size_of_an_empty_class());
  CHECK(carving != NULL && page->touched_tail == 1 && heap->tails_purge_at_ms > os_now_ms());
  heap->tails_purge_at_ms = os_now_ms(); /* another delay, nothing carved */
  void *after = shoal_malloc(size_of_an_empty_class());
  CHECK(after != NULL && page->touched_tail == TAIL_PURGED);
  for (size_t i = 0; i < size; i++) CHECK(first[i] == 0x33 && second[i] == 0x44);
#ifdef __linux__
  int pagemap = open("/proc/self/pagemap", O_RDONLY);
  if (pagemap >= 0) {
    uint8_t *tail = (uint8_t *)(((uintptr_t)second + size + 4095) & ~(uintptr_t)4095);
    uint8_t *end = page->start + (size_t)page->slice_count * SLICE_SIZE;
    for (uint8_t *at = tail; at < end; at += 4096) CHECK(!page_written(pagemap, at));
    close(pagemap);
  }
#endif
  shoal_free(after);
  shoal_free(carving);
  shoal_free(before);
  shoal_free(second);
  shoal_free(first);
  shoal_free(keep);
  shoal_option_set(SHOAL_OPTION_PURGE_DELAY, purge_delay_option);
  return NULL;
}

static void test_touched_tail_purged(void) {
  run_in_thread(page_on_touched_slices);
  run_in_thread(page_tail_after_delay);
}

/* ---- a class page takes again the slices its class gave back ---- */

/* Two pages of one segment given back, the lower by a class of 5000-byte
 * blocks, the higher by one of 3000: a page of 3000-byte blocks made next
 * takes the higher, though the lower comes first in every other order
 * (segment_page_alloc: the first resident run); a class that gave none back
 * takes what is there. */
static void *class_slices_again(void *arg) {
  (void)arg;
  void *keep = shoal_malloc(64); /* a heap, and a segment that stays its own */
  shoal_heap_t *heap = thread_heap;
  uint8_t mine = size_class_of(3000), other = size_class_of(5000), none = size_class_of(7000);
  shoal_page_t *taken[16];
  size_t count = 0;
  shoal_page_t *low = NULL, *high = NULL;
  heap_slow_enter(heap);
  while (high == NULL) {
    CHECK(count < 16);
    shoal_page_t *page = segment_page_alloc(heap, 1, CLASS_NONE);
    CHECK(page != NULL && page->slice_count == 1);
    for (size_t i = 0; i < count && high == NULL; i++)
      if (segment_of(taken[i]->start) == segment_of(page->start)) {
        low = taken[i] < page ? taken[i] : page;
        high = taken[i] < page ? page : taken[i];
      }
    taken[count++] = page;
  }
  for (size_t i = 0; i < count; i++)
    if (taken[i] != low && taken[i] != high) segment_page_free(heap, taken[i]);
  page_init(low, heap, class_block_size[other], other, low->is_zero);
  page_init(high, heap, class_block_size[mine], mine, high->is_zero);
  memset(low->start, 0x11, SLICE_SIZE);
  memset(high->start, 0x22, SLICE_SIZE);
  segment_page_free(heap, low);
  segment_page_free(heap, high);
  shoal_segment_t *segment = segment_of(high->start);
  size_t low_slice = (size_t)(low - segment->pages), high_slice = (size_t)(high - segment->pages);
  CHECK((segment->free_slices & segment->dirty_slices) >> low_slice & 1);
  CHECK((segment->free_slices & segment->dirty_slices) >> high_slice & 1);
  CHECK(low->freed_class == other && high->freed_class == mine);

  shoal_page_t *again = segment_page_alloc(heap, 1, mine);
  CHECK_CTX(again == high, "slice %zu taken, not %zu", (size_t)(again - segment_of(again)->pages),
            high_slice);
  CHECK(!again->is_zero && again->freed_class == CLASS_NONE);
  shoal_page_t *any = segment_page_alloc(heap, 1, none);
  CHECK(any != NULL && any != again && !any->is_zero);
  segment_page_free(heap, again);
  segment_page_free(heap, any);
  CHECK(again->freed_class == CLASS_NONE && any->freed_class == CLASS_NONE);
  heap_slow_exit(heap);
  shoal_free(keep);
  return NULL;
}

static void test_class_slices_again(void) {
  run_in_thread(class_slices_again);
}

int main(void) {
  /* The classes' own paths: no request of theirs goes to the medium pool
   * (unit_pool and test/medium_pool.c test that). */
  shoal_option_set(SHOAL_OPTION_MEDIUM_POOL, POOL_OFF);
  test_populate_ahead(); /* first: the process holds little yet */
  test_heap_one_page();
  test_class_slices_again();
  test_touched_tail_purged();
  test_outbox();
  test_outbox_share();
  test_depot();
  test_depot_from_allocating_thread();
  test_remote_class_cache();
  test_own_medium_cache();
  test_freed_before_fresh();
  test_small_rotate();
  test_borrow();
  test_remote_emptied_retired();
  test_looks_after_pushes_only();
  test_mailbox_overflow();
  test_cached_segment_pending();
  test_trim_put_off_while_drawn();
  test_retired_segments_come_back();
  test_dead_segment_reuse();
#ifdef __linux__
  test_owner_waiting_for_core();
#endif
  /* A page: blocks are consecutive in one page until it is full. */
  void *first = shoal_malloc(48);
  shoal_segment_t *segment = segment_of(first);
  CHECK(segment_find(first) == segment && segment->kind == SEGMENT_NORMAL);
  shoal_page_t *page = segment_page_of(segment, first);
  CHECK(page->size_class == size_class_of(48) && page->block_size == 48);
  CHECK(atomic_load(&page->owner) == (uintptr_t)thread_heap);
  CHECK(page_is_block_start(page, first));
  CHECK(!page_is_block_start(page, (uint8_t *)first + 8));
  size_t in_page = page->reserved;
  void **same = malloc(sizeof(void *) * in_page);
  same[0] = first;
  for (size_t i = 1; i < in_page; i++) {
    same[i] = shoal_malloc(48);
    CHECK(segment_page_of(segment_of(same[i]), same[i]) == page);
  }
  CHECK(page->used == in_page && page->capacity == page->reserved);
  void *next = shoal_malloc(48); /* the page is full: parked, a new page serves */
  CHECK(segment_page_of(segment_of(next), next) != page);
  CHECK((page->flags & PAGE_FULL) != 0 && atomic_load(&page->xthread_free) == 1);

  /* A remote free of a parked page notifies the owner, which unparks it. */
  block_count = 0;
  blocks[block_count++] = same[5];
  run_in_thread(free_all);
  CHECK(atomic_load(&thread_heap->notified) == page);
  shoal_collect(false); /* drains the notification: the page is back in its queue */
  CHECK((page->flags & PAGE_FULL) == 0);
  /* Behind the page serving the class, so that its one free block does not
   * make every other malloc a slow path. */
  CHECK(thread_heap->queues[page->size_class].last == page);
  CHECK(thread_heap->queues[page->size_class].first != page);
  void *again = shoal_malloc(48);
  CHECK(again != same[5] && segment_page_of(segment_of(again), again) != page);

  /* Freeing every block returns the page's slices to its segment. */
  shoal_stats_t full_pages;
  shoal_stats_get(&full_pages);
  shoal_free(again);
  for (size_t i = 0; i < in_page; i++)
    if (i != 5) shoal_free(same[i]);
  shoal_free(next);
  shoal_collect(true); /* may unmap the segment: no more looks at `page` */
  shoal_stats_t emptied;
  shoal_stats_get(&emptied);
  CHECK(emptied.pages + 2 <= full_pages.pages);

  /* A dead thread's blocks freed here: its heap is serviced and emptied. */
  shoal_heap_t *dead_heap;
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, allocate_page_worth, (void *)(uintptr_t)200) == 0);
  pthread_join(thread, (void **)&dead_heap);
  CHECK(atomic_load(&dead_heap->state) == HEAP_ABANDONED);
  shoal_stats_t before;
  shoal_stats_get(&before);
  free_all(NULL);
  shoal_stats_t after;
  shoal_stats_get(&after);
  CHECK(after.live_blocks == before.live_blocks - block_count);
  shoal_collect(true);                /* sends home what this thread's remote cache kept */
  CHECK(dead_heap->segments == NULL); /* every page went back */

  /* The next thread adopts that heap rather than making a new one. */
  CHECK(pthread_create(&thread, NULL, allocate_page_worth, (void *)(uintptr_t)64) == 0);
  shoal_heap_t *adopted;
  pthread_join(thread, (void **)&adopted);
  CHECK(adopted == dead_heap);
  free_all(NULL);
  free(same);
  printf("segment/page/heap: all checks hold (%zu blocks of 48 per page)\n", in_page);
  return 0;
}
