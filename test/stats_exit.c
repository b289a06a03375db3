/* stats_exit.c — a program for stats_exit.sh: it allocates, frees across
 * threads, and deliberately keeps KEPT_SMALL blocks of 3000 bytes, one large
 * and one huge block at exit, so that the SHOAL_STATS report printed then
 * has known rows. Only the standard API, and shoal's looked up with dlsym:
 * the same source runs linked to shoal and unlinked under LD_PRELOAD.
 *
 * It says on stdout, with write(2) so that stdio's buffer does not join the
 * figures, what it keeps and what was live in the same rows before (the C
 * library or a sanitizer runtime may hold blocks of its own there):
 *   kept_small=37 kept_block_size=3072 malloc_is_shoal=1
 *   before_small=0 before_large=0 before_huge=0
 * malloc_is_shoal is 0 in a sanitizer build whose runtime keeps malloc. */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>

#include "shoal.h"
#include "testhelper.h"

#define KEPT_SMALL  37
#define SMALL_SIZE  3000
#define LARGE_SIZE  300000
#define HUGE_SIZE   (5 << 20)
#define HANDED_OVER 500

static void *handed[HANDED_OVER];
static void *kept[KEPT_SMALL + 2];
static shoal_stats_t before; /* 2.8 KB: not on the stack */

/* Looked up, not linked: the preloaded build of this program knows no shoal. */
static bool malloc_is_shoal(void *block) {
  bool (*owns)(const void *) = (bool (*)(const void *))dlsym(RTLD_DEFAULT, "shoal_owns");
  return owns != NULL && owns(block);
}

static void stats_read(shoal_stats_t *stats) {
  void (*get)(shoal_stats_t *) = (void (*)(shoal_stats_t *))dlsym(RTLD_DEFAULT, "shoal_stats_get");
  memset(stats, 0, sizeof *stats);
  if (get != NULL) get(stats);
}

static size_t live_in_class_of(const shoal_stats_t *stats, size_t block_size) {
  for (int c = 0; c < SHOAL_STATS_SIZE_CLASSES; c++)
    if (stats->classes[c].block_size == block_size) return stats->classes[c].live;
  return 0;
}

/* The block size of the class row that counts a block of `usable` bytes:
 * its own (a class block's usable size is its class's), or the smallest
 * above it (a medium block is cut to its request, rounded to 16 bytes, and
 * counts in the class of the request). */
static size_t row_block_size(const shoal_stats_t *stats, size_t usable) {
  size_t best = 0;
  for (int c = 0; c < SHOAL_STATS_SIZE_CLASSES; c++) {
    size_t size = stats->classes[c].block_size;
    if (size >= usable && (best == 0 || size < best)) best = size;
  }
  return best != 0 ? best : usable;
}

/* Frees in another thread what main allocated: remote frees. */
static void *free_handed(void *unused) {
  (void)unused;
  for (int i = 0; i < HANDED_OVER; i++) free(handed[i]);
  return NULL;
}

int main(void) {
  for (int i = 0; i < HANDED_OVER; i++) {
    handed[i] = malloc(64 + (size_t)i % 200);
    CHECK(handed[i] != NULL);
  }
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, free_handed, NULL) == 0);
  CHECK(pthread_join(thread, NULL) == 0);

  stats_read(&before);
  for (int i = 0; i < KEPT_SMALL; i++) {
    kept[i] = malloc(SMALL_SIZE);
    CHECK(kept[i] != NULL);
    memset(kept[i], i, SMALL_SIZE);
  }
  kept[KEPT_SMALL] = malloc(LARGE_SIZE);
  kept[KEPT_SMALL + 1] = malloc(HUGE_SIZE);
  CHECK(kept[KEPT_SMALL] != NULL && kept[KEPT_SMALL + 1] != NULL);

  char line[256];
  size_t block_size = row_block_size(&before, malloc_usable_size(kept[0]));
  int length = snprintf(line, sizeof line,
                        "kept_small=%d kept_block_size=%zu malloc_is_shoal=%d\n"
                        "before_small=%zu before_large=%zu before_huge=%zu\n",
                        KEPT_SMALL, block_size, malloc_is_shoal(kept[0]),
                        live_in_class_of(&before, block_size), before.large.live, before.huge.live);
  CHECK(length > 0 && (size_t)length < sizeof line);
  CHECK(write(1, line, (size_t)length) == length);
  return 0; /* kept[] is still allocated when the report runs */
}
