/* A heap with segments but no resident free slice of its own borrows one
 * from a heap that kept some for a large block's page or a pool page
 * (heap.c, heap_borrow_slices), instead of faulting in a slice of its own.
 * Checked here, in order:
 *   1. thread B allocates one small block: its heap has a segment, with
 *      free slices never touched;
 *   2. thread A allocates large blocks and pool blocks and frees them all
 *      but a small one: its segment keeps their slices, free and resident
 *      (the purge delay is set long), and A lends them;
 *   3. B allocates large blocks: every one lies in A's segments;
 *   4. B grows its last large block with realloc: it moves (the free
 *      slices after it are A's to give), its contents intact;
 *   5. B allocates pool blocks, which lie in A's segments too, and a large
 *      block aligned to 128 KiB; no segment was mapped for any of them;
 *   6. A frees half of B's blocks (A's free, in A's own segment, must see
 *      that the page is B's), B frees the rest; a double free of a borrowed
 *      large block is reported; every block keeps its contents until its
 *      free;
 *   7. B gives its empty pages back (shoal_collect), A drains them: the page
 *      count is back where it was, and A's large blocks lie in its own
 *      segments again.
 * The shoal_ names are used so TSan runs check shoal, not TSan's allocator. */
#include <pthread.h>

#include "guest_test.h"

enum {
  LARGE_BYTES = 40 * 1024, /* one 64 KiB slice */
  POOL_BYTES = 9000,       /* above 8 KiB: a pool block (SHOAL_MEDIUM_POOL=2) */
  A_LARGE = 8,
  A_POOL = 24,
  B_LARGE = 4,
  B_POOL = 6,
  ALIGNED = 128 * 1024,
};
#define SEGMENT_BYTES ((uintptr_t)1 << 20) /* core/internal.h's SEGMENT_SIZE */

static pthread_barrier_t step;
static void *b_large[B_LARGE], *b_pool[B_POOL], *b_aligned;
static uintptr_t a_segments[A_LARGE + A_POOL + 1];
static size_t a_segment_count, pages_before_b, segments_before_b;

static uintptr_t segment_of(const void *p) {
  return (uintptr_t)p & ~(SEGMENT_BYTES - 1);
}

static bool in_a_segment(const void *p) {
  for (size_t i = 0; i < a_segment_count; i++)
    if (a_segments[i] == segment_of(p)) return true;
  return false;
}

static void note_a_segment(const void *p) {
  if (!in_a_segment(p)) a_segments[a_segment_count++] = segment_of(p);
}

static unsigned char tag_of(size_t i) {
  return (unsigned char)((i * 13 + 5) & 0xff);
}

static void fill(void *p, size_t bytes, size_t i) {
  memset(p, tag_of(i), bytes);
}

static void check_filled(const void *p, size_t bytes, size_t i, const char *when) {
  const unsigned char *at = p;
  for (size_t k = 0; k < bytes; k += 97)
    CHECK_CTX(at[k] == tag_of(i), "block %zu lost byte %zu %s", i, k, when);
  CHECK_CTX(at[bytes - 1] == tag_of(i), "block %zu lost its last byte %s", i, when);
}

/* B's large and pool blocks from `first` on, every other one, each checked. */
static void free_every_other(size_t first, const char *when) {
  for (size_t i = first; i < B_LARGE; i += 2) {
    check_filled(b_large[i], LARGE_BYTES, i, when);
    shoal_free(b_large[i]);
  }
  for (size_t i = first; i < B_POOL; i += 2) {
    check_filled(b_pool[i], POOL_BYTES, i, when);
    shoal_free(b_pool[i]);
  }
}

static void *lender_run(void *argument) {
  (void)argument;
  pthread_barrier_wait(&step); /* 1: B has its segment */
  void *keep = shoal_malloc(64);
  void *large[A_LARGE], *pool[A_POOL];
  CHECK(keep != NULL);
  note_a_segment(keep);
  for (size_t i = 0; i < A_LARGE; i++) {
    large[i] = shoal_malloc(LARGE_BYTES);
    CHECK(large[i] != NULL);
    fill(large[i], LARGE_BYTES, i);
    note_a_segment(large[i]);
  }
  for (size_t i = 0; i < A_POOL; i++) {
    pool[i] = shoal_malloc(POOL_BYTES);
    CHECK(pool[i] != NULL);
    fill(pool[i], POOL_BYTES, i);
    note_a_segment(pool[i]);
  }
  for (size_t i = 0; i < A_LARGE; i++) shoal_free(large[i]);
  for (size_t i = 0; i < A_POOL; i++) shoal_free(pool[i]);
  pthread_barrier_wait(&step); /* 2: B borrows */
  pthread_barrier_wait(&step); /* 3: A frees half of B's blocks */
  free_every_other(0, "before the lender freed it");
  shoal_collect(false);        /* home before B gives its pages back */
  pthread_barrier_wait(&step); /* 4: B frees the rest and gives its pages back */
  pthread_barrier_wait(&step); /* 5: A takes them */
  check_pages_given_back(pages_before_b);
  for (size_t i = 0; i < A_LARGE; i++) {
    large[i] = shoal_malloc(LARGE_BYTES);
    CHECK(large[i] != NULL);
    CHECK_CTX(in_a_segment(large[i]), "large block %zu of the refill left A's segments", i);
  }
  for (size_t i = 0; i < A_LARGE; i++) shoal_free(large[i]);
  shoal_free(keep);
  return NULL;
}

static void *borrower_run(void *argument) {
  (void)argument;
  void *own = shoal_malloc(64);
  CHECK(own != NULL);
  pthread_barrier_wait(&step); /* 1 */
  pthread_barrier_wait(&step); /* 2 */
  CHECK_CTX(!in_a_segment(own), "B's first block is in A's segment");
  shoal_stats_t stats = shoal_stats();
  pages_before_b = stats.pages;
  segments_before_b = stats.segments;
  for (size_t i = 0; i < B_LARGE; i++) {
    b_large[i] = shoal_malloc(LARGE_BYTES);
    CHECK(b_large[i] != NULL);
    CHECK_CTX(in_a_segment(b_large[i]), "large block %zu is not in the lender's segments", i);
    fill(b_large[i], LARGE_BYTES, i);
  }
  /* Grown: the slices after a borrowed page are the lender's, so it moves. */
  void *grown = shoal_realloc(b_large[B_LARGE - 1], 3 * LARGE_BYTES);
  CHECK(grown != NULL);
  CHECK_CTX(grown != b_large[B_LARGE - 1], "a borrowed large block grew over the lender's slices");
  check_filled(grown, LARGE_BYTES, B_LARGE - 1, "after realloc");
  CHECK(shoal_malloc_usable_size(grown) >= 3 * LARGE_BYTES);
  fill(grown, LARGE_BYTES, B_LARGE - 1);
  b_large[B_LARGE - 1] = grown;
  for (size_t i = 0; i < B_POOL; i++) {
    b_pool[i] = shoal_malloc(POOL_BYTES);
    CHECK(b_pool[i] != NULL);
    CHECK_CTX(in_a_segment(b_pool[i]), "pool block %zu is not in the lender's segments", i);
    fill(b_pool[i], POOL_BYTES, i);
  }
  CHECK(shoal_posix_memalign(&b_aligned, ALIGNED, LARGE_BYTES) == 0);
  CHECK(((uintptr_t)b_aligned & (ALIGNED - 1)) == 0);
  fill(b_aligned, LARGE_BYTES, 99);
  CHECK_CTX(shoal_stats().segments == segments_before_b, "a segment was mapped beside A's slices");

  pthread_barrier_wait(&step); /* 3 */
  pthread_barrier_wait(&step); /* 4 */
  free_every_other(1, "before the borrower freed it");
  check_filled(b_aligned, LARGE_BYTES, 99, "before the borrower freed it");
  CHECK(shoal_owns(b_aligned));
  shoal_free(b_aligned);
  double_free_on_purpose("guest_slices", b_large[3]);
  shoal_free(own);
  shoal_collect(true);
  pthread_barrier_wait(&step); /* 5 */
  return NULL;
}

int main(void) {
  return run_lender_and_borrower("guest_slices", &step, lender_run, borrower_run);
}
