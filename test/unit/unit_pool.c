/* The medium pool (SHOAL_MEDIUM_POOL=1) seen from inside: plain requests of
 * 1-32 KiB are cut from pool pages to the request rounded to 16 bytes, with
 * their contents kept; freed neighbours join, so a page whose blocks are all
 * freed holds one free block again; realloc grows a block in place over a
 * free neighbour; another thread's frees come home and join at the owner's
 * next pool malloc; the counters balance per class; double frees, interior
 * pointers and a sized free larger than the block are refused and leave the
 * pool whole; checked mode's lookup finds a block from inside it; and a hole
 * that stays free through a collect gives its inner OS pages back. */
#include "../testhelper.h"
#include "core/alloc.h"
#include "core/internal.h"

#include <pthread.h>
#include <string.h>
#ifdef __linux__
#include <fcntl.h>
#include <unistd.h>
#endif

static shoal_page_t *page_of(const void *p) {
  return segment_page_of(segment_of(p), p);
}

static void fill(uint8_t *p, size_t n, uint8_t tag) {
  memset(p, tag, n);
}

static bool filled(const uint8_t *p, size_t n, uint8_t tag) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != tag) return false;
  return true;
}

/* Sizes, alignment, contents, the page's class and counts. */
static void *cut_to_size(void *arg) {
  (void)arg;
  static const size_t sizes[] = {1025, 1040, 2000, 4096, 5000, 10000, POOL_MAX};
  enum { COUNT = sizeof sizes / sizeof sizes[0] };
  uint8_t *blocks[COUNT];
  for (size_t i = 0; i < COUNT; i++) {
    blocks[i] = shoal_malloc(sizes[i]);
    CHECK(blocks[i] != NULL && (uintptr_t)blocks[i] % 16 == 0);
    shoal_page_t *page = page_of(blocks[i]);
    CHECK(page->size_class == CLASS_POOL && page->slice_count == POOL_SLICES);
    size_t rounded = (sizes[i] + 15) & ~(size_t)15;
    size_t usable = shoal_malloc_usable_size(blocks[i]);
    CHECK_CTX(usable >= rounded && usable < rounded + 64, "size %zu usable %zu", sizes[i], usable);
    fill(blocks[i], sizes[i], (uint8_t)(i + 1));
  }
  for (size_t i = 0; i < COUNT; i++) {
    CHECK(filled(blocks[i], sizes[i], (uint8_t)(i + 1)));
    shoal_free(blocks[i]);
  }
  /* Above POOL_MAX a large block, and aligned requests the classes, as
   * without the pool. */
  void *above = shoal_malloc(POOL_MAX + 1);
  CHECK(page_of(above)->size_class == CLASS_LARGE);
  void *aligned = NULL;
  CHECK(shoal_posix_memalign(&aligned, 64, 3000) == 0 && (uintptr_t)aligned % 64 == 0);
  CHECK(page_of(aligned)->size_class < CLASS_COUNT);
  shoal_free(above);
  shoal_free(aligned);
  return NULL;
}

/* Three neighbours freed in any order join into one free block, which
 * spans them all; with the block after them freed too, the page's blocks
 * are all free and the page holds what it held before them. */
static void *neighbours_join(void *arg) {
  (void)arg;
  size_t block = pool_block_bytes(3000);
  uint8_t *a = shoal_malloc(3000);
  shoal_page_t *page = page_of(a);
  size_t before = pool_free_bytes(page) + block;
  uint8_t *b = shoal_malloc(3000), *c = shoal_malloc(3000), *keep = shoal_malloc(1100);
  CHECK(page_of(b) == page && page_of(c) == page && page_of(keep) == page);
  CHECK(b == a + block && c == b + block && keep == c + block);
  fill(keep, 1100, 0x6e);
  shoal_free(b);
  shoal_free(a); /* joins b, after it */
  shoal_free(c); /* joins a and b, before it; keep stands after it */
  pool_block_t joined = pool_block_of(page, a);
  CHECK(joined.is_free && joined.usable == 3 * block - 16);
  CHECK_CTX(pool_free_bytes(page) == before - pool_block_bytes(1100), "free %zu, expected %zu",
            pool_free_bytes(page), before - pool_block_bytes(1100));
  CHECK(filled(keep, 1100, 0x6e));
  shoal_free(keep);
  CHECK(page->used == 0 && pool_free_bytes(page) == before);
  return NULL;
}

/* realloc grows in place over a free neighbour; without one it moves. */
static void *grow_in_place(void *arg) {
  (void)arg;
  uint8_t *a = shoal_malloc(2000), *b = shoal_malloc(2000), *wall = shoal_malloc(2000);
  fill(a, 2000, 0x11);
  shoal_free(b);
  uint8_t *grown = shoal_realloc(a, 3900);
  CHECK(grown == a && shoal_malloc_usable_size(grown) >= 3900);
  CHECK(filled(grown, 2000, 0x11));
  fill(grown, 3900, 0x22);
  uint8_t *moved = shoal_realloc(grown, 8000); /* the wall stands after it */
  CHECK(moved != NULL && moved != grown && filled(moved, 3900, 0x22));
  shoal_free(moved);
  shoal_free(wall);
  return NULL;
}

/* ---- another thread's frees ---- */

enum { REMOTE_COUNT = 64, REMOTE_SIZE = 3000 };
static void *remote_blocks[REMOTE_COUNT];

static void *free_remote_blocks(void *arg) {
  (void)arg;
  for (size_t i = 0; i < REMOTE_COUNT; i++) {
    CHECK(filled(remote_blocks[i], REMOTE_SIZE, (uint8_t)i));
    shoal_free(remote_blocks[i]);
  }
  return NULL; /* the thread's exit sends what its outbox gathered */
}

static void *remote_frees_come_home(void *arg) {
  (void)arg;
  for (size_t i = 0; i < REMOTE_COUNT; i++) {
    remote_blocks[i] = shoal_malloc(REMOTE_SIZE);
    fill(remote_blocks[i], REMOTE_SIZE, (uint8_t)i);
  }
  shoal_page_t *page = page_of(remote_blocks[0]);
  uint32_t used = page->used;
  size_t in_page = 0;
  for (size_t i = 0; i < REMOTE_COUNT; i++) in_page += page_of(remote_blocks[i]) == page;
  shoal_stats_t before;
  shoal_stats_get(&before);
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, free_remote_blocks, NULL) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  /* They wait on the page's remote list until this thread's next pool malloc. */
  CHECK(page->used == used);
  void *next = shoal_malloc(REMOTE_SIZE);
  CHECK(page->used <= used - in_page + 1);
  shoal_stats_t after;
  shoal_stats_get(&after);
  CHECK(after.remote_frees >= before.remote_frees + REMOTE_COUNT);
  shoal_free(next);
  return NULL;
}

/* ---- counters ---- */

static void *counters_balance(void *arg) {
  (void)arg;
  shoal_stats_t before, during, after;
  shoal_stats_get(&before);
  void *blocks[10];
  for (size_t i = 0; i < 10; i++) blocks[i] = shoal_malloc(5000); /* class 5120 */
  shoal_stats_get(&during);
  uint8_t size_class = size_class_of(5000);
  CHECK(during.classes[size_class].live == before.classes[size_class].live + 10);
  for (size_t i = 0; i < 10; i++) shoal_free(blocks[i]);
  shoal_stats_get(&after);
  CHECK(after.classes[size_class].live == before.classes[size_class].live);
  CHECK(after.live_blocks == before.live_blocks);
  return NULL;
}

/* ---- bad frees: refused, the pool whole ---- */

static void *bad_frees_refused(void *arg) {
  (void)arg;
  long abort_option = shoal_option_get(SHOAL_OPTION_ABORT_ON_ERROR);
  shoal_option_set(SHOAL_OPTION_ABORT_ON_ERROR, 0); /* a line on stderr, the call ignored */
  uint8_t *a = shoal_malloc(4000), *wall = shoal_malloc(4000);
  shoal_page_t *page = page_of(a);
  fill(a, 4000, 0x44);
  size_t free_bytes = pool_free_bytes(page);
  uint32_t used = page->used;
  shoal_free(a + 16);  /* inside the block */
  shoal_free(a + 512); /* further inside */
  CHECK(pool_free_bytes(page) == free_bytes && page->used == used && filled(a, 4000, 0x44));
  shoal_free_sized(a, 5000); /* larger than the block */
  CHECK(pool_free_bytes(page) == free_bytes && page->used == used);
  shoal_free(a);
  size_t after_free = pool_free_bytes(page);
  CHECK(after_free > free_bytes && page->used == used - 1);
  shoal_free(a); /* double free */
  CHECK(pool_free_bytes(page) == after_free && page->used == used - 1);
  void *again = shoal_malloc(4000); /* the freed block, once */
  void *other = shoal_malloc(4000);
  CHECK(again != other);
  shoal_free(again);
  shoal_free(other);
  shoal_free(wall);
  shoal_option_set(SHOAL_OPTION_ABORT_ON_ERROR, abort_option);
  return NULL;
}

/* ---- checked mode's lookup ---- */

static void *lookup_from_inside(void *arg) {
  (void)arg;
  uint8_t *a = shoal_malloc(6000), *b = shoal_malloc(1500);
  size_t usable = 0;
  CHECK(block_containing(a, &usable) == a && usable == shoal_malloc_usable_size(a));
  CHECK(block_containing(a + 40, &usable) == a);
  CHECK(block_containing(a + 5999, &usable) == a);
  CHECK(block_containing(b + 1000, &usable) == b && usable == shoal_malloc_usable_size(b));
  uint8_t *freed = shoal_malloc(2500), *after = shoal_malloc(1200);
  shoal_free(freed);
  CHECK(block_containing(freed + 64, &usable) == NULL); /* a free block holds no block */
  shoal_free(a);
  shoal_free(b);
  shoal_free(after);
  return NULL;
}

/* ---- a hole free through a collect gives its inner pages back ---- */

#ifdef __linux__
static bool page_resident(int pagemap, const void *address) {
  uint64_t entry = 0;
  off_t at = (off_t)((uintptr_t)address / 4096 * sizeof entry);
  CHECK(pread(pagemap, &entry, sizeof entry, at) == (ssize_t)sizeof entry);
  return (entry >> 63) & 1;
}
#endif

static void *hole_purged(void *arg) {
  (void)arg;
  uint8_t *before = shoal_malloc(1100), *hole = shoal_malloc(POOL_MAX), *after = shoal_malloc(1100);
  fill(hole, POOL_MAX, 0x77);
  fill(before, 1100, 0x12);
  fill(after, 1100, 0x34);
  shoal_free(hole);
  shoal_stats_t s0, s1;
  shoal_stats_get(&s0);
  shoal_collect(true);
  shoal_stats_get(&s1);
  CHECK_CTX(s1.purged_bytes >= s0.purged_bytes + POOL_MAX - 3 * 4096, "purged %zu",
            s1.purged_bytes - s0.purged_bytes);
  CHECK(filled(before, 1100, 0x12) && filled(after, 1100, 0x34));
#ifdef __linux__
  int pagemap = open("/proc/self/pagemap", O_RDONLY);
  if (pagemap >= 0) {
    uint8_t *inner = (uint8_t *)(((uintptr_t)hole + 4096 + 4095) & ~(uintptr_t)4095);
    CHECK(!page_resident(pagemap, inner));
    close(pagemap);
  }
#endif
  uint8_t *again = shoal_malloc(POOL_MAX); /* the purged hole serves again, zero where purged */
  fill(again, POOL_MAX, 0x78);
  CHECK(filled(again, POOL_MAX, 0x78));
  shoal_free(again);
  shoal_free(before);
  shoal_free(after);
  return NULL;
}

static void run_in_thread(void *(*run)(void *)) {
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, run, NULL) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
}

int main(void) {
  shoal_option_set(SHOAL_OPTION_MEDIUM_POOL, 1);
  run_in_thread(cut_to_size);
  run_in_thread(neighbours_join);
  run_in_thread(grow_in_place);
  run_in_thread(remote_frees_come_home);
  run_in_thread(counters_balance);
  run_in_thread(bad_frees_refused);
  run_in_thread(lookup_from_inside);
  run_in_thread(hole_purged);
  shoal_option_set(SHOAL_OPTION_MEDIUM_POOL, 0);
  printf("unit_pool: all checks hold\n");
  return 0;
}
