/* large layer (huge blocks) and arena segment cache, seen from inside: a
 * freed huge block is reused from the cache (whole, cut or grown in place of a
 * fresh mapping), mremap growth keeps contents and the segment map follows
 * the block, a block appended to a page at a time grows its mapping by a
 * quarter at least, an alignment beyond the segment size gives an interior
 * pointer that still finds its segment, and an emptied segment comes back
 * from the arena cache. */
#include "../testhelper.h"
#include "core/internal.h"

#include <errno.h>
#include <string.h>

#define MIB ((size_t)1 << 20)

static void fill(uint8_t *p, size_t n, uint8_t tag) {
  for (size_t i = 0; i < n; i += 4096) p[i] = tag;
  p[n - 1] = tag;
}

static void check(const uint8_t *p, size_t n, uint8_t tag) {
  for (size_t i = 0; i < n; i += 4096) CHECK_CTX(p[i] == tag, "byte %zu of %zu", i, n);
  CHECK(p[n - 1] == tag);
}

int main(void) {
  /* A huge block: its own segment, found by masking, usable size >= asked. */
  uint8_t *a = shoal_malloc(10 * MIB);
  CHECK(a != NULL);
  shoal_segment_t *segment = segment_find(a);
  CHECK(segment != NULL && segment->kind == SEGMENT_HUGE && segment_of(a) == segment);
  CHECK(shoal_malloc_usable_size(a) >= 10 * MIB);
  CHECK(shoal_block_size(a) == shoal_malloc_usable_size(a));
  fill(a, 10 * MIB, 7);

  /* Growth by mremap keeps the contents; the map follows the block. */
  uint8_t *b = shoal_realloc(a, 40 * MIB);
  CHECK(b != NULL);
  check(b, 10 * MIB, 7);
  CHECK(segment_find(b + 39 * MIB) == segment_of(b));
  fill(b, 40 * MIB, 9);

  /* Freed, it waits in the cache: a smaller request gets the same memory
   * back (whole: less than four times what it needs), with the free key
   * cleared. */
  shoal_free(b);
  uint8_t *c = shoal_malloc(30 * MIB);
  CHECK(c == b);
  CHECK(((shoal_block_t *)c)->key == 0);
  CHECK(segment_of(c)->size < 40 * MIB + SEGMENT_SIZE);
  /* calloc of a cached (used) block must still read as zero. */
  shoal_free(c);
  uint8_t *z = shoal_calloc(1, 20 * MIB);
  CHECK(z != NULL);
  for (size_t i = 0; i < 20 * MIB; i += 4096) CHECK(z[i] == 0);
  shoal_free(z);

  /* Appended to an OS page at a time, a huge block grows its mapping by a
   * quarter at least: a handful of remaps, not one a page; every byte
   * written stays. */
  size_t length = 2 * MIB, resizes = 0;
  uint8_t *buffer = shoal_malloc(length);
  CHECK(buffer != NULL);
  memset(buffer, 0x5c, length);
  size_t usable = shoal_malloc_usable_size(buffer);
  for (int step = 0; step < 2048; step++) {
    buffer = shoal_realloc(buffer, length + 4096);
    CHECK(buffer != NULL);
    memset(buffer + length, 0x5c, 4096);
    length += 4096;
    size_t now = shoal_malloc_usable_size(buffer);
    CHECK(now >= length && now < 2 * length);
    resizes += now != usable;
    usable = now;
  }
  CHECK_CTX(resizes <= 8, "%zu resizes to grow 2 MiB to 10 MiB a page at a time", resizes);
  for (size_t i = 0; i < length; i++) CHECK(buffer[i] == 0x5c);
  shoal_free(buffer);

  /* Alignment beyond the segment size: the block starts in a later 1 MiB
   * chunk, which the map marks as interior of the same segment. */
  void *aligned = NULL;
  CHECK(shoal_posix_memalign(&aligned, 16 * MIB, 5 * MIB) == 0);
  CHECK(((uintptr_t)aligned & (16 * MIB - 1)) == 0);
  shoal_segment_t *aligned_segment = segment_find(aligned);
  CHECK(aligned_segment != NULL && aligned_segment != segment_of(aligned));
  CHECK(shoal_malloc_usable_size(aligned) >= 5 * MIB);
  fill(aligned, 5 * MIB, 3);
  shoal_free(aligned);

  /* An emptied segment goes to the arena cache and comes back. */
  shoal_collect(true);
  void *small = shoal_malloc(100);
  shoal_free(small);
  shoal_collect(true); /* the segment empties and is cached or unmapped */
  shoal_stats_t stats;
  shoal_stats_get(&stats);
  CHECK(stats.huge_blocks == 0);
  small = shoal_malloc(100);
  CHECK(segment_find(small) == segment_of(small));
  shoal_free(small);

  /* Out of memory is NULL with ENOMEM and takes nothing down. */
  errno = 0;
  CHECK(shoal_malloc((size_t)1 << 46) == NULL && errno == ENOMEM);
  CHECK(shoal_malloc(64) != NULL);
  printf("huge blocks and arena cache: all checks hold\n");
  return 0;
}
