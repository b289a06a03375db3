/* Purge pacing: memory given back and wanted again soon after lengthens the
 * purge delay in force (shoal_stats().purge_delay_ms), and purges that
 * come long after the last such refault shorten it again, down to
 * SHOAL_PURGE_DELAY (arena.c, "purge pacing").
 *
 * One thread, in phases:
 *   (a) the delay in force starts at the option's;
 *   (b) 16 MiB of blocks is written and freed, and the test waits (calling
 *       malloc and free, the moments shoal runs due purges) until it has
 *       been purged, then writes 16 MiB again at once: a refault, and the
 *       delay in force grows, by doublings, to at most 64 times the option;
 *       the blocks hold what was written;
 *   (c) the same memory is freed and refilled at intervals longer than the
 *       refault window: no refault, purges go on, and the delay in force
 *       comes back down to the option's.
 * The option is set to 20 ms so that a slow machine (sanitizers) still
 * refills within the window of four delays. */
#include "shoal.h"
#include "testhelper.h"

#define MIB        ((size_t)1024 * 1024)
#define BLOCK_SIZE 4096 /* a class block: heap pages, which the heap purges itself */
enum { OPTION_DELAY_MS = 20, MAX_WAIT_MS = 20000 };

typedef struct chained_block_s {
  struct chained_block_s *next;
  size_t stamp;
} chained_block_t;

static chained_block_t *fill(size_t bytes, size_t stamp) {
  chained_block_t *blocks = NULL;
  for (size_t done = 0; done < bytes; done += BLOCK_SIZE) {
    chained_block_t *block = shoal_malloc(BLOCK_SIZE);
    CHECK(block != NULL);
    memset(block, 0x5a, BLOCK_SIZE);
    block->stamp = stamp++;
    block->next = blocks;
    blocks = block;
  }
  return blocks;
}

static void empty(chained_block_t *blocks, size_t stamp, size_t count) {
  size_t expected = stamp + count;
  while (blocks != NULL) {
    chained_block_t *next = blocks->next;
    CHECK_CTX(blocks->stamp == --expected, "block stamp %zu, expected %zu", blocks->stamp,
              expected);
    CHECK(((unsigned char *)blocks)[BLOCK_SIZE - 1] == 0x5a);
    shoal_free(blocks);
    blocks = next;
  }
  CHECK(expected == stamp);
}

/* Calls shoal gets its chance in (a large block takes the slow path) until
 * more bytes than `before` have been purged; false after MAX_WAIT_MS. */
static bool wait_for_purge(size_t before) {
  for (long waited = 0; waited < MAX_WAIT_MS; waited += 2) {
    shoal_free(shoal_malloc(64 * 1024));
    if (shoal_stats().purged_bytes > before) return true;
    sleep_ms(2);
  }
  return false;
}

/* The same calls until nothing more has been purged for twelve delays in
 * force; false after MAX_WAIT_MS. */
static bool wait_for_quiet(void) {
  size_t purged = shoal_stats().purged_bytes;
  double quiet_since = now_seconds(), start = quiet_since;
  while (now_seconds() - start < MAX_WAIT_MS / 1000.0) {
    shoal_free(shoal_malloc(64 * 1024));
    shoal_stats_t stats = shoal_stats();
    if (stats.purged_bytes != purged) {
      purged = stats.purged_bytes;
      quiet_since = now_seconds();
    } else if (now_seconds() - quiet_since > 12 * stats.purge_delay_ms / 1000.0) {
      return true;
    }
    sleep_ms(2);
  }
  return false;
}

int main(void) {
  shoal_option_set(SHOAL_OPTION_PURGE_DELAY, OPTION_DELAY_MS);
  const size_t bytes = 16 * MIB, count = bytes / BLOCK_SIZE;

  /* (a) */
  shoal_stats_t stats = shoal_stats();
  CHECK_CTX(stats.purge_delay_ms == OPTION_DELAY_MS, "delay in force %zu ms at the start",
            stats.purge_delay_ms);

  /* (b) */
  empty(fill(bytes, 0), 0, count);
  CHECK_CTX(wait_for_purge(stats.purged_bytes), "nothing purged in %d ms", MAX_WAIT_MS);
  chained_block_t *blocks = fill(bytes, 1000);
  size_t raised = shoal_stats().purge_delay_ms;
  fprintf(stderr, "purge_pace (b): refilled at once after a purge: delay in force %zu ms\n",
          raised);
  CHECK_CTX(raised > OPTION_DELAY_MS && raised <= 64 * OPTION_DELAY_MS,
            "delay in force %zu ms after a refault (option %d ms)", raised, OPTION_DELAY_MS);
  empty(blocks, 1000, count);

  /* (c) Refill only once purging has been quiet longer than the window
   * (four delays in force) and the arena's trims (ten). Each round waits
   * twelve delays in force, and the delay comes down by half once a
   * round: about 24 times what (b) raised it to in all, which under a
   * sanitizer beside other tests (b) can raise to the 64-fold limit. */
  double start = now_seconds(), limit_s = (MAX_WAIT_MS + 48.0 * (double)raised) / 1000.0;
  size_t delay = raised;
  for (int round = 0; delay > OPTION_DELAY_MS; round++) {
    CHECK_CTX(now_seconds() - start < limit_s, "delay in force still %zu ms after %d rounds", delay,
              round);
    CHECK_CTX(wait_for_quiet(), "round %d: purges went on for %d ms", round, MAX_WAIT_MS);
    empty(fill(bytes, 2000), 2000, count);
    size_t now_delay = shoal_stats().purge_delay_ms;
    CHECK_CTX(now_delay <= delay, "round %d: the delay grew from %zu to %zu ms without a refault",
              round, delay, now_delay);
    delay = now_delay;
  }
  fprintf(stderr, "purge_pace (c): back to %zu ms after %.2f s of refills past the window\n", delay,
          now_seconds() - start);
  CHECK(delay == OPTION_DELAY_MS);
  fprintf(stderr, "purge_pace: all checks passed\n");
  return 0;
}
