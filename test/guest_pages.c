/* A heap with no free slice borrows a page from a heap that kept resident
 * free slices (heap.c, heap_borrow_page) instead of mapping a segment: the
 * page is the borrower's, in the lender's segment. Checked here, in order:
 *   1. thread A fills ten pages of 1000-byte blocks and frees all but one:
 *      its segment keeps their slices, free and resident (the purge delay is
 *      set long);
 *   2. thread B, whose heap has no segment, allocates four pages' worth:
 *      every block lies in A's segment, and no segment was mapped for them;
 *   3. A frees half of B's blocks (A's free, in A's own segment, must see
 *      that the page is B's), B frees the other half; every block keeps its
 *      contents until its free, and a double free of one is reported;
 *   4. B gives its empty pages back (shoal_collect), A drains them, and the
 *      page count is where it was before B; A then fills its pages again
 *      without a new segment.
 * The shoal_ names are used so TSan runs check shoal, not TSan's allocator. */
#include <pthread.h>
#include <stdatomic.h>

#include "guest_test.h"

enum {
  BLOCK_BYTES = 1000,
  A_BLOCKS = 640, /* ten pages of 64 blocks */
  B_BLOCKS = 200, /* four pages */
};
#define SEGMENT_BYTES ((uintptr_t)1 << 20) /* core/internal.h's SEGMENT_SIZE */

static pthread_barrier_t step;
static void *b_blocks[B_BLOCKS];
static uintptr_t a_segment;
static size_t pages_before_b, segments_before_b;

static uintptr_t segment_of(const void *p) {
  return (uintptr_t)p & ~(SEGMENT_BYTES - 1);
}

static void fill(void *p, size_t i) {
  memset(p, (int)(i * 7 + 1) & 0xff, BLOCK_BYTES);
}

static void check_filled(const void *p, size_t i, const char *when) {
  const unsigned char *bytes = p;
  for (size_t k = 0; k < BLOCK_BYTES; k++)
    CHECK_CTX(bytes[k] == ((i * 7 + 1) & 0xff), "block %zu lost byte %zu %s", i, k, when);
}

static void *lender_run(void *argument) {
  (void)argument;
  void *blocks[A_BLOCKS];
  for (size_t i = 0; i < A_BLOCKS; i++) {
    blocks[i] = shoal_malloc(BLOCK_BYTES);
    CHECK(blocks[i] != NULL);
  }
  a_segment = segment_of(blocks[0]);
  for (size_t i = 1; i < A_BLOCKS; i++) shoal_free(blocks[i]);
  pthread_barrier_wait(&step); /* 1: B borrows */
  pthread_barrier_wait(&step); /* 2: A frees half of B's blocks */
  for (size_t i = 0; i < B_BLOCKS; i += 2) {
    check_filled(b_blocks[i], i, "before the lender freed it");
    shoal_free(b_blocks[i]);
  }
  /* Home before B gives its pages back: the outbox sends a page's blocks a
   * chain at a time, and what it still gathers would keep one from emptying. */
  shoal_collect(false);
  pthread_barrier_wait(&step); /* 3: B frees the rest and gives its pages back */
  pthread_barrier_wait(&step); /* 4: A takes them */
  check_pages_given_back(pages_before_b);
  for (size_t i = 1; i < A_BLOCKS; i++) {
    blocks[i] = shoal_malloc(BLOCK_BYTES);
    CHECK(blocks[i] != NULL);
    CHECK_CTX(segment_of(blocks[i]) == a_segment, "block %zu of the refill left A's segment", i);
  }
  CHECK(shoal_stats().segments == segments_before_b);
  for (size_t i = 0; i < A_BLOCKS; i++) shoal_free(blocks[i]);
  return NULL;
}

static void *borrower_run(void *argument) {
  (void)argument;
  pthread_barrier_wait(&step); /* 1 */
  shoal_stats_t stats = shoal_stats();
  pages_before_b = stats.pages;
  segments_before_b = stats.segments;
  for (size_t i = 0; i < B_BLOCKS; i++) {
    b_blocks[i] = shoal_malloc(BLOCK_BYTES);
    CHECK(b_blocks[i] != NULL);
    CHECK_CTX(segment_of(b_blocks[i]) == a_segment, "block %zu is not in the lender's segment", i);
    fill(b_blocks[i], i);
  }
  CHECK_CTX(shoal_stats().segments == segments_before_b, "a segment was mapped beside A's slices");
  pthread_barrier_wait(&step); /* 2 */
  pthread_barrier_wait(&step); /* 3 */
  for (size_t i = 1; i < B_BLOCKS; i += 2) {
    check_filled(b_blocks[i], i, "before the borrower freed it");
    shoal_free(b_blocks[i]);
  }
  /* Ignored, the block is not handed out twice after it. */
  double_free_on_purpose("guest_pages", b_blocks[1]);
  check_handed_out_once(shoal_malloc, shoal_free, BLOCK_BYTES, 2 * 64);
  shoal_collect(true);
  pthread_barrier_wait(&step); /* 4 */
  return NULL;
}

int main(void) {
  return run_lender_and_borrower("guest_pages", &step, lender_run, borrower_run);
}
