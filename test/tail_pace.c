/* Touched tails and purge pacing: a class page made on slices that a large
 * block wrote keeps the rest of its slice resident until it has carved
 * nothing for a purge delay; then that tail goes back to the OS (heap.c,
 * heap_purge_untouched_tails). A page that carves into its tail soon after
 * has faulted it in again: a refault, as a purged slice taken again is, and
 * the delay in force grows (arena.c, purge pacing).
 *
 * One thread, in phases (shoal_collect(false) is the slow path that looks
 * at the tails; it takes no slices, so no slice refault can raise the delay):
 *   (a) a large block written whole and freed leaves touched free slices;
 *   (b) the first block of a class makes its page on them: the page's slice
 *       past what it carved is resident (what the large block wrote);
 *   (c) a few purge delays with no carving: that tail is given back, and the
 *       delay in force is still the option's;
 *   (d) blocks of the class carved into the tail at once: at the next look
 *       the delay in force has grown; every block holds what was written.
 * The option is 20 ms, so that a slow machine (sanitizers) still carves
 * within the four delays a purged tail is watched for. */
#include "shoal.h"
#include "testhelper.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define SLICE      ((size_t)64 * 1024)
#define BLOCK_SIZE 720 /* a class no one here has used: its first block makes its page */
enum { OPTION_DELAY_MS = 20, MAX_WAIT_MS = 20000, CARVED = 40 };

/* Resident OS pages of [start, start + bytes). */
static size_t resident_pages(uintptr_t start, size_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), count = bytes / page, resident = 0;
  unsigned char vector[64];
  CHECK(count <= sizeof vector);
  CHECK(mincore((void *)start, bytes, vector) == 0);
  for (size_t i = 0; i < count; i++) resident += vector[i] & 1;
  return resident;
}

int main(void) {
  shoal_option_set(SHOAL_OPTION_PURGE_DELAY, OPTION_DELAY_MS);
  CHECK(shoal_stats().purge_delay_ms == OPTION_DELAY_MS);

  /* (a) */
  size_t large_size = 4 * SLICE - 4096;
  unsigned char *large = shoal_malloc(large_size);
  CHECK(large != NULL);
  memset(large, 0x33, large_size);
  shoal_free(large);

  /* (b) The tail: from the second half of the slice on, well past the OS
   * page or two the first carve takes. */
  unsigned char *blocks[CARVED + 1];
  blocks[0] = shoal_malloc(BLOCK_SIZE);
  CHECK(blocks[0] != NULL);
  memset(blocks[0], 0, BLOCK_SIZE);
  uintptr_t tail = ((uintptr_t)blocks[0] & ~(SLICE - 1)) + SLICE / 2;
  size_t tail_pages = resident_pages(tail, SLICE / 2);
  fprintf(stderr, "tail_pace (b): %zu of the tail's OS pages resident\n", tail_pages);
  CHECK_CTX(tail_pages > 0, "the class page was not made on the large block's slices");

  /* (c) */
  double start = now_seconds();
  while (resident_pages(tail, SLICE / 2) != 0) {
    CHECK_CTX(now_seconds() - start < MAX_WAIT_MS / 1000.0, "the idle tail stayed resident");
    shoal_collect(false);
    sleep_ms(2);
  }
  fprintf(stderr, "tail_pace (c): the idle tail went back after %.0f ms\n",
          (now_seconds() - start) * 1000);
  CHECK_CTX(shoal_stats().purge_delay_ms == OPTION_DELAY_MS,
            "delay in force %zu ms before a refault", shoal_stats().purge_delay_ms);

  /* (d) */
  for (int i = 1; i <= CARVED; i++) {
    blocks[i] = shoal_malloc(BLOCK_SIZE);
    CHECK(blocks[i] != NULL);
    memset(blocks[i], i, BLOCK_SIZE);
  }
  CHECK_CTX(resident_pages(tail, SLICE / 2) > 0, "%d blocks did not carve into the tail", CARVED);
  start = now_seconds();
  size_t delay = OPTION_DELAY_MS;
  while (delay == OPTION_DELAY_MS && now_seconds() - start < 10.0 * OPTION_DELAY_MS / 1000) {
    sleep_ms(2);
    shoal_collect(false);
    delay = shoal_stats().purge_delay_ms;
  }
  fprintf(stderr, "tail_pace (d): carved into the tail: delay in force %zu ms\n", delay);
  CHECK_CTX(delay > OPTION_DELAY_MS && delay <= 64 * OPTION_DELAY_MS,
            "delay in force %zu ms after the tail's refault (option %d ms)", delay,
            OPTION_DELAY_MS);
  for (int i = 0; i <= CARVED; i++) {
    for (size_t k = 0; k < BLOCK_SIZE; k++)
      CHECK_CTX(blocks[i][k] == (unsigned char)i, "block %d byte %zu is %u", i, k, blocks[i][k]);
    shoal_free(blocks[i]);
  }
  fprintf(stderr, "tail_pace: all checks passed\n");
  return 0;
}
