/* Conformance of every exported allocation function, under both its standard
 * name (replaced by linking against libshoal) and its shoal_ twin.
 *
 * What is checked, for each name:
 *   - every power-of-two alignment 8..64 KiB with every size 1..2048 and
 *     geometric sizes up to 8 MiB (each +-1), plus alignments of 1..32 MiB:
 *     the pointer is aligned, usable size >= request, the usable bytes are
 *     writable (all of them up to 256 KiB, samples of bigger blocks, see
 *     block_fill) and keep their contents while neighbours are written;
 *     malloc's own alignment is checked as 16 for requests of 16 bytes or
 *     more (C17 7.22.3 asks max_align_t's 16 for every size; even C23's
 *     weaker rule asks it once a 16-byte long double fits), 8 below;
 *   - realloc keeps contents across every size boundary, growing and
 *     shrinking, to and from huge (> 960 KiB) blocks;
 *   - calloc memory is zero even when it reuses dirty blocks;
 *   - the edge cases of malloc(0), realloc(NULL, n), realloc(p, 0), free(NULL),
 *     errno across free, malloc_usable_size(NULL);
 *   - impossible sizes give NULL + ENOMEM and leave realloc's block intact;
 *     overflowing calloc/reallocarray products give NULL + ENOMEM;
 *   - bad alignments: EINVAL from posix_memalign (result untouched) and
 *     aligned_alloc, rounding up from memalign (as glibc does);
 *   - shoal_free_sized frees plain and aligned blocks given their size;
 *   - shoal_owns is true for every block and false for foreign memory;
 *   - live statistics return to where they started (nothing leaks). */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>

#include "shoal.h"
#include "testhelper.h"

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

/* One set of entry points: the standard names or the shoal_ twins. Blocks
 * are always freed through the set that allocated them. */
typedef struct api_s {
  const char *name;
  void *(*malloc_fn)(size_t);
  void *(*calloc_fn)(size_t, size_t);
  void *(*realloc_fn)(void *, size_t);
  void *(*reallocarray_fn)(void *, size_t, size_t);
  void (*free_fn)(void *);
  int (*posix_memalign_fn)(void **, size_t, size_t);
  void *(*aligned_alloc_fn)(size_t, size_t);
  void *(*memalign_fn)(size_t, size_t);
  void *(*valloc_fn)(size_t);
  void *(*pvalloc_fn)(size_t);
  size_t (*usable_size_fn)(const void *);
} api_t;

static size_t standard_usable_size(const void *block) {
  return malloc_usable_size((void *)block);
}

static const api_t standard_api = {"standard",   malloc, calloc,         realloc,
                                   reallocarray, free,   posix_memalign, aligned_alloc,
                                   memalign,     valloc, pvalloc,        standard_usable_size};

static const api_t shoal_api = {
    "shoal_",           shoal_malloc, shoal_calloc,         shoal_realloc,
    shoal_reallocarray, shoal_free,   shoal_posix_memalign, shoal_aligned_alloc,
    shoal_memalign,     shoal_valloc, shoal_pvalloc,        shoal_malloc_usable_size};

static size_t page_size;

/* The sizes every sweep walks: 1..2048 one by one (every small size class
 * and its neighbours), then 2 KiB * 1.25^k up to 8 MiB, each -1, +0, +1. */
#define MAX_SWEEP_SIZES 2400
static size_t sweep_sizes[MAX_SWEEP_SIZES];
static size_t sweep_size_count;

static void sweep_sizes_build(void) {
  for (size_t size = 1; size <= 2048; size++) sweep_sizes[sweep_size_count++] = size;
  for (double size = 2048 * 1.25; size <= 8.0 * MIB; size *= 1.25) {
    size_t base = (size_t)size;
    sweep_sizes[sweep_size_count++] = base - 1;
    sweep_sizes[sweep_size_count++] = base;
    sweep_sizes[sweep_size_count++] = base + 1;
  }
  sweep_sizes[sweep_size_count++] = 8 * MIB - 1;
  sweep_sizes[sweep_size_count++] = 8 * MIB;
  sweep_sizes[sweep_size_count++] = 8 * MIB + 1;
}

/* Blocks stay live in a small ring so each new block is written while its
 * recent neighbours still hold their patterns: overlapping blocks show up
 * as a broken pattern when the older one is checked and freed. */
#define RING_SIZE 8
typedef struct live_ring_s {
  void *blocks[RING_SIZE];
  size_t sizes[RING_SIZE];
  uint64_t seeds[RING_SIZE];
  unsigned next;
} live_ring_t;

static void ring_retire(const api_t *api, live_ring_t *ring, unsigned slot) {
  if (ring->blocks[slot] == NULL) return;
  CHECK_CTX(block_check(ring->blocks[slot], ring->sizes[slot], ring->seeds[slot]),
            "%s: block of usable size %zu was overwritten", api->name, ring->sizes[slot]);
  api->free_fn(ring->blocks[slot]);
  ring->blocks[slot] = NULL;
}

/* Checks one fresh block of `size` bytes aligned to `alignment`, fills all of
 * its usable bytes and puts it in the ring. */
static void ring_add(const api_t *api, live_ring_t *ring, void *block, size_t size,
                     size_t alignment, const char *how) {
  CHECK_CTX(block != NULL, "%s %s(align %zu, size %zu) returned NULL", api->name, how, alignment,
            size);
  CHECK_CTX(is_aligned(block, alignment), "%s %s(align %zu, size %zu) = %p", api->name, how,
            alignment, size, block);
  size_t usable = api->usable_size_fn(block);
  CHECK_CTX(usable >= size, "%s %s(align %zu, size %zu): usable size %zu", api->name, how,
            alignment, size, usable);
  CHECK_CTX(shoal_owns(block), "%s %s(align %zu, size %zu): shoal_owns(%p) is false", api->name,
            how, alignment, size, block);
  CHECK_CTX(shoal_block_size(block) == usable, "%s %s(align %zu, size %zu): block size %zu",
            api->name, how, alignment, size, shoal_block_size(block));
  unsigned slot = ring->next++ % RING_SIZE;
  ring_retire(api, ring, slot);
  uint64_t seed = (uint64_t)(uintptr_t)block ^ size;
  block_fill(block, usable, seed);
  ring->blocks[slot] = block;
  ring->sizes[slot] = usable;
  ring->seeds[slot] = seed;
}

static void ring_drain(const api_t *api, live_ring_t *ring) {
  for (unsigned slot = 0; slot < RING_SIZE; slot++) ring_retire(api, ring, slot);
}

/* malloc's own alignment: 16 for requests of 16 bytes or more (max_align_t
 * on x86-64), 8 for smaller ones, where no 16-aligned type fits. */
static void test_malloc_sweep(const api_t *api) {
  live_ring_t ring = {0};
  for (size_t i = 0; i < sweep_size_count; i++) {
    size_t size = opaque_size(sweep_sizes[i]);
    ring_add(api, &ring, api->malloc_fn(size), size, size >= 16 ? 16 : 8, "malloc");
  }
  ring_drain(api, &ring);
}

static void aligned_sweep(const api_t *api, size_t alignment, const size_t *sizes, size_t count) {
  live_ring_t ring = {0};
  for (size_t i = 0; i < count; i++) {
    size_t size = opaque_size(sizes[i]);
    void *block = (void *)0x1;
    CHECK_CTX(api->posix_memalign_fn(&block, alignment, size) == 0,
              "%s posix_memalign(align %zu, size %zu) failed", api->name, alignment, size);
    ring_add(api, &ring, block, size, alignment, "posix_memalign");
    ring_add(api, &ring, api->aligned_alloc_fn(alignment, size), size, alignment, "aligned_alloc");
    ring_add(api, &ring, api->memalign_fn(alignment, size), size, alignment, "memalign");
  }
  ring_drain(api, &ring);
}

static void test_aligned_sweeps(const api_t *api) {
  for (size_t alignment = 8; alignment <= 64 * KIB; alignment *= 2)
    aligned_sweep(api, alignment, sweep_sizes, sweep_size_count);

  static const size_t large_alignment_sizes[] = {1,   100,     4096,    64 * KIB + 1, MIB - 1,
                                                 MIB, MIB + 1, 5 * MIB, 8 * MIB + 1,  33 * MIB};
  static const size_t large_alignments[] = {MIB, 4 * MIB, 8 * MIB, 32 * MIB};
  for (size_t i = 0; i < sizeof large_alignments / sizeof *large_alignments; i++)
    aligned_sweep(api, large_alignments[i], large_alignment_sizes,
                  sizeof large_alignment_sizes / sizeof *large_alignment_sizes);
}

/* ---- realloc --------------------------------------------------------------
 * pattern_fill is prefix-stable (the pattern of n bytes is the start of the
 * pattern of m > n bytes), so after every realloc the first min(old, new)
 * bytes must still match and the rest is refilled. */
static void *realloc_checked(const api_t *api, void *block, size_t old_size, size_t new_size,
                             uint64_t seed) {
  void *moved = api->realloc_fn(block, opaque_size(new_size));
  CHECK_CTX(moved != NULL, "%s realloc(%zu -> %zu) returned NULL", api->name, old_size, new_size);
  CHECK_CTX(api->usable_size_fn(moved) >= new_size, "%s realloc(%zu -> %zu): usable %zu", api->name,
            old_size, new_size, api->usable_size_fn(moved));
  CHECK_CTX(is_aligned(moved, new_size >= 16 ? 16 : 8), "%s realloc(%zu -> %zu) = %p", api->name,
            old_size, new_size, moved);
  size_t kept = old_size < new_size ? old_size : new_size;
  CHECK_CTX(pattern_check(moved, kept, seed), "%s realloc(%zu -> %zu) lost the contents", api->name,
            old_size, new_size);
  pattern_fill(moved, new_size, seed);
  return moved;
}

static void test_realloc_contents(const api_t *api) {
  static size_t steps[6000];
  size_t step_count = 0;
  for (size_t size = 1; size <= 4096; size++) steps[step_count++] = size;
  /* Finer steps while sizes are in size classes, coarser ones in huge blocks. */
  for (double size = 4096 * 1.3; size <= 24.0 * MIB; size *= size < MIB ? 1.3 : 2) {
    steps[step_count++] = (size_t)size - 1;
    steps[step_count++] = (size_t)size;
    steps[step_count++] = (size_t)size + 1;
  }
  uint64_t seed = 42;
  void *block = api->malloc_fn(opaque_size(1));
  CHECK(block != NULL);
  pattern_fill(block, 1, seed);
  size_t size = 1;
  for (size_t i = 1; i < step_count; i++) { /* growing */
    block = realloc_checked(api, block, size, steps[i], seed);
    size = steps[i];
  }
  for (size_t i = step_count - 1; i-- > 0;) { /* shrinking */
    block = realloc_checked(api, block, size, steps[i], seed);
    size = steps[i];
  }
  api->free_fn(block);

  /* Jumps between small, medium and huge (> 960 KiB) blocks, both ways. */
  static const size_t jumps[][3] = {
      {100, 6 * MIB, 100}, {5 * MIB, 12 * MIB, 5 * MIB}, {4 * MIB + 1, 64 * KIB, 9 * MIB},
      {16, 32 * MIB, 16},  {300 * KIB, 5 * MIB + 7, 3},  {8 * MIB, 8 * MIB + 1, 8 * MIB - 1}};
  for (size_t j = 0; j < sizeof jumps / sizeof *jumps; j++) {
    seed = 1000 + j;
    size = jumps[j][0];
    block = api->malloc_fn(opaque_size(size));
    CHECK(block != NULL);
    pattern_fill(block, size, seed);
    for (int k = 1; k < 3; k++) {
      block = realloc_checked(api, block, size, jumps[j][k], seed);
      size = jumps[j][k];
    }
    api->free_fn(block);
  }
}

/* ---- calloc ---------------------------------------------------------------
 * Dirty a batch of blocks with 0xAA, free them, then calloc the same size:
 * the allocator will hand the dirty memory back, and it must come zeroed. */
static void test_calloc_zeroes_reused(const api_t *api) {
  static const size_t sizes[] = {1,    8,     16,        24,  100,         1000,    4096,
                                 5000, 65536, 300 * KIB, MIB, 4 * MIB + 1, 8 * MIB, 8 * MIB + 5};
  enum { BATCH = 16, ROUNDS = 6 };
  void *blocks[BATCH];
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    size_t size = sizes[s];
    size_t batch = size > MIB ? 3 : BATCH;
    for (int round = 0; round < ROUNDS; round++) {
      for (size_t i = 0; i < batch; i++) {
        blocks[i] = api->malloc_fn(opaque_size(size));
        CHECK(blocks[i] != NULL);
        memset(blocks[i], 0xAA, api->usable_size_fn(blocks[i]));
      }
      for (size_t i = 0; i < batch; i++) api->free_fn(blocks[i]);
      for (size_t i = 0; i < batch; i++) {
        /* Alternate the factor order: calloc(n, 1), calloc(1, n), and a real product. */
        size_t count = round % 3 == 0 ? size : round % 3 == 1 ? 1 : (size % 2 ? size : size / 2);
        size_t element = size / count;
        size_t bytes = count * element;
        unsigned char *zeroed = api->calloc_fn(opaque_size(count), opaque_size(element));
        CHECK_CTX(zeroed != NULL, "%s calloc(%zu, %zu)", api->name, count, element);
        for (size_t b = 0; b < bytes; b++)
          CHECK_CTX(zeroed[b] == 0, "%s calloc(%zu, %zu): byte %zu is %#x after reuse", api->name,
                    count, element, b, zeroed[b]);
        blocks[i] = zeroed;
      }
      for (size_t i = 0; i < batch; i++) {
        memset(blocks[i], 0xAA, api->usable_size_fn(blocks[i]));
        api->free_fn(blocks[i]);
      }
    }
  }
}

/* ---- edge cases -------------------------------------------------------- */
static size_t live_blocks_now(void) {
  shoal_stats_t stats;
  shoal_stats_get(&stats);
  return stats.live_blocks;
}

static void test_edge_cases(const api_t *api) {
  enum { ZERO_COUNT = 64 };
  void *zero_blocks[ZERO_COUNT];
  for (int i = 0; i < ZERO_COUNT; i++) {
    zero_blocks[i] = api->malloc_fn(opaque_size(0));
    CHECK_CTX(zero_blocks[i] != NULL, "%s malloc(0) returned NULL", api->name);
    CHECK(shoal_owns(zero_blocks[i]));
    for (int j = 0; j < i; j++)
      CHECK_CTX(zero_blocks[j] != zero_blocks[i], "%s malloc(0) twice %p", api->name,
                zero_blocks[i]);
  }
  for (int i = 0; i < ZERO_COUNT; i++) api->free_fn(zero_blocks[i]);
  void *zero_calloc = api->calloc_fn(opaque_size(0), opaque_size(0));
  CHECK(zero_calloc != NULL);
  api->free_fn(zero_calloc);

  /* realloc(NULL, n) is malloc(n). */
  unsigned char *block = api->realloc_fn(NULL, opaque_size(200));
  CHECK(block != NULL && api->usable_size_fn(block) >= 200 && shoal_owns(block));
  memset(block, 1, 200);
  /* realloc(p, 0) frees p and returns NULL, as glibc does: one block less. */
  size_t live_before = live_blocks_now();
  CHECK(api->realloc_fn(block, opaque_size(0)) == NULL);
  CHECK(live_blocks_now() == live_before - 1);
  block = api->realloc_fn(NULL, opaque_size(0));
  CHECK(block != NULL);
  api->free_fn(block);

  api->free_fn(NULL);
  CHECK(api->usable_size_fn(NULL) == 0);

  /* free must not clobber errno, whatever kind of block it returns. */
  static const size_t sizes[] = {8, 1000, 100 * KIB, 5 * MIB, 20 * MIB};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    void *freed = api->malloc_fn(opaque_size(sizes[i]));
    void *aligned = api->aligned_alloc_fn(2 * MIB, opaque_size(sizes[i]));
    CHECK(freed != NULL && aligned != NULL);
    errno = ENOENT;
    api->free_fn(freed);
    CHECK_CTX(errno == ENOENT, "%s free(%zu bytes) changed errno to %d", api->name, sizes[i],
              errno);
    errno = EDOM;
    api->free_fn(aligned);
    CHECK(errno == EDOM);
  }
  errno = EILSEQ;
  api->free_fn(NULL);
  CHECK(errno == EILSEQ);
}

/* ---- failures ----------------------------------------------------------- */
#define CHECK_ENOMEM(call)                                                                         \
  do {                                                                                             \
    errno = 0;                                                                                     \
    void *result_ = (call);                                                                        \
    CHECK_CTX(result_ == NULL && errno == ENOMEM, "%s, size %zu: got %p, errno %d", api->name,     \
              impossible, result_, errno);                                                         \
  } while (0)

static void test_impossible_sizes(const api_t *api) {
  static const size_t impossible_sizes[] = {SIZE_MAX, SIZE_MAX - 4095, SIZE_MAX / 2,
                                            (size_t)PTRDIFF_MAX + 1, (size_t)1 << 50};
  for (size_t i = 0; i < sizeof impossible_sizes / sizeof *impossible_sizes; i++) {
    size_t impossible = opaque_size(impossible_sizes[i]);
    CHECK_ENOMEM(api->malloc_fn(impossible));
    CHECK_ENOMEM(api->calloc_fn(1, impossible));
    CHECK_ENOMEM(api->calloc_fn(impossible, 1));
    CHECK_ENOMEM(api->realloc_fn(NULL, impossible));
    CHECK_ENOMEM(api->reallocarray_fn(NULL, 1, impossible));
    CHECK_ENOMEM(api->memalign_fn(64, impossible));
    CHECK_ENOMEM(api->memalign_fn(MIB, impossible));
    CHECK_ENOMEM(api->aligned_alloc_fn(64, impossible));
    CHECK_ENOMEM(api->valloc_fn(impossible));
    CHECK_ENOMEM(api->pvalloc_fn(impossible));
    void *untouched = (void *)0x1;
    CHECK_CTX(api->posix_memalign_fn(&untouched, 64, impossible) == ENOMEM,
              "%s posix_memalign(64, %zu)", api->name, impossible);

    /* A failed realloc leaves the old block as it was, still usable. */
    static const size_t old_sizes[] = {24, 5000, 6 * MIB};
    for (size_t k = 0; k < 3; k++) {
      void *old = api->malloc_fn(opaque_size(old_sizes[k]));
      CHECK(old != NULL);
      pattern_fill(old, old_sizes[k], k);
      CHECK_ENOMEM(api->realloc_fn(old, impossible));
      CHECK_ENOMEM(api->reallocarray_fn(old, 1, impossible));
      CHECK_CTX(pattern_check(old, old_sizes[k], k), "%s failed realloc damaged the block",
                api->name);
      CHECK(api->usable_size_fn(old) >= old_sizes[k]);
      api->free_fn(old);
    }
  }

  /* count * size overflows size_t: calloc and reallocarray must notice. */
  static const size_t overflowing[][2] = {{SIZE_MAX / 2 + 1, 2},
                                          {((size_t)1 << 32) + 1, (size_t)1 << 32},
                                          {SIZE_MAX, SIZE_MAX},
                                          {3, SIZE_MAX / 3 + 1}};
  size_t impossible = 0;
  for (size_t i = 0; i < sizeof overflowing / sizeof *overflowing; i++) {
    size_t count = opaque_size(overflowing[i][0]), size = opaque_size(overflowing[i][1]);
    CHECK_ENOMEM(api->calloc_fn(count, size));
    CHECK_ENOMEM(api->reallocarray_fn(NULL, count, size));
    void *old = api->malloc_fn(opaque_size(100));
    CHECK(old != NULL);
    pattern_fill(old, 100, 7);
    CHECK_ENOMEM(api->reallocarray_fn(old, count, size));
    CHECK(pattern_check(old, 100, 7));
    api->free_fn(old);
  }
  void *array = api->reallocarray_fn(NULL, opaque_size(10), opaque_size(100));
  CHECK(array != NULL && api->usable_size_fn(array) >= 1000);
  api->free_fn(array);
}

static void test_bad_alignments(const api_t *api) {
  /* posix_memalign: a power of two and a multiple of sizeof(void *). */
  static const size_t not_allowed[] = {0, 1, 2, 3, 4, 12, 24, 48, 1000, 3 * 4096};
  for (size_t i = 0; i < sizeof not_allowed / sizeof *not_allowed; i++) {
    void *sentinel = (void *)&not_allowed;
    void *result = sentinel;
    int error = api->posix_memalign_fn(&result, opaque_size(not_allowed[i]), 64);
    CHECK_CTX(error == EINVAL, "%s posix_memalign(align %zu) returned %d", api->name,
              not_allowed[i], error);
    CHECK_CTX(result == sentinel, "%s posix_memalign(align %zu) wrote %p", api->name,
              not_allowed[i], result);
  }
  void *result = NULL;
  CHECK(api->posix_memalign_fn(&result, opaque_size(sizeof(void *)), 1) == 0 && result != NULL);
  api->free_fn(result);

  /* aligned_alloc: any non-power-of-two alignment is EINVAL (glibc >= 2.38). */
  static const size_t not_powers[] = {0, 3, 24, 48, 1000, 3 * 4096, MIB + 4096};
  for (size_t i = 0; i < sizeof not_powers / sizeof *not_powers; i++) {
    errno = 0;
    void *block = api->aligned_alloc_fn(opaque_size(not_powers[i]), 64);
    CHECK_CTX(block == NULL && errno == EINVAL, "%s aligned_alloc(align %zu) = %p, errno %d",
              api->name, not_powers[i], block, errno);
  }
  /* C17 lets the size be any multiple or not of the alignment. */
  void *odd_size = api->aligned_alloc_fn(64, opaque_size(100));
  CHECK(odd_size != NULL && is_aligned(odd_size, 64) && api->usable_size_fn(odd_size) >= 100);
  api->free_fn(odd_size);

  /* memalign rounds a non-power-of-two alignment up to the next power. */
  static const size_t rounded[][2] = {
      {3, 4},       {5, 8},       {24, 32},     {48, 64},       {96, 128},
      {1000, 1024}, {3000, 4096}, {5000, 8192}, {40000, 65536}, {MIB + 1, 2 * MIB}};
  for (size_t i = 0; i < sizeof rounded / sizeof *rounded; i++) {
    void *block = api->memalign_fn(opaque_size(rounded[i][0]), opaque_size(100));
    CHECK_CTX(block != NULL && is_aligned(block, rounded[i][1]), "%s memalign(%zu) = %p", api->name,
              rounded[i][0], block);
    CHECK(api->usable_size_fn(block) >= 100 && shoal_owns(block));
    api->free_fn(block);
  }
  for (size_t alignment = 0; alignment < 2; alignment++) {
    void *block = api->memalign_fn(opaque_size(alignment), opaque_size(100));
    CHECK(block != NULL && is_aligned(block, 16));
    api->free_fn(block);
  }
}

static void test_page_allocations(const api_t *api) {
  static const size_t sizes[] = {1, 100, 4095, 4096, 4097, 100000, 5 * MIB + 3};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t size = opaque_size(sizes[i]);
    size_t page_rounded = (size + page_size - 1) / page_size * page_size;
    void *by_valloc = api->valloc_fn(size);
    void *by_pvalloc = api->pvalloc_fn(size);
    CHECK_CTX(by_valloc != NULL && is_aligned(by_valloc, page_size), "%s valloc(%zu) = %p",
              api->name, size, by_valloc);
    CHECK_CTX(by_pvalloc != NULL && is_aligned(by_pvalloc, page_size), "%s pvalloc(%zu) = %p",
              api->name, size, by_pvalloc);
    CHECK(api->usable_size_fn(by_valloc) >= size);
    CHECK_CTX(api->usable_size_fn(by_pvalloc) >= page_rounded, "%s pvalloc(%zu): usable %zu",
              api->name, size, api->usable_size_fn(by_pvalloc));
    CHECK(shoal_owns(by_valloc) && shoal_owns(by_pvalloc));
    memset(by_valloc, 0x11, size);
    memset(by_pvalloc, 0x22, page_rounded);
    CHECK(((unsigned char *)by_valloc)[size - 1] == 0x11);
    api->free_fn(by_valloc);
    api->free_fn(by_pvalloc);
  }
}

/* shoal_free_sized (behind C++ sized delete) with the size the caller asked
 * for, of plain and of aligned blocks: it must free exactly that block
 * (the live figures checked at the end would show a leak, a wrong block
 * would break the ring's patterns or be reported as a bad free). */
/* Large blocks (beyond the size classes, up to SHOAL_LARGE_MAX) are pages of 64 KiB
 * slices whose usable size is the request rounded to an OS page, so that a
 * copy moves only what may have been written, and realloc grows them in
 * place while the slices have room. */
static void test_large_blocks_grow_in_place(void) {
  size_t sizes[] = {32 * KIB + 1, 40000, 64 * KIB - 100, 100 * KIB, SHOAL_LARGE_MAX - 5000};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t size = sizes[i];
    uint8_t *block = shoal_malloc(opaque_size(size));
    CHECK(block != NULL);
    size_t usable = shoal_malloc_usable_size(block);
    size_t by_page = (size + page_size - 1) / page_size * page_size;
    CHECK_CTX(usable == by_page, "malloc(%zu): usable %zu, not %zu", size, usable, by_page);
    pattern_fill(block, size, 7 + i);
    size_t room = (size + 64 * KIB - 1) / (64 * KIB) * (64 * KIB); /* the slices it spans */
    uint8_t *grown = shoal_realloc(block, opaque_size(room));
    CHECK_CTX(grown == block, "realloc(%zu -> %zu) moved a block that had room", size, room);
    CHECK(shoal_malloc_usable_size(grown) == room && pattern_check(grown, size, 7 + i));
    memset(grown + size, 0x5a, room - size); /* all of it writable */
    shoal_free(grown);
  }
}

/* A large block that realloc shrinks stays where it is (a buffer that
 * shrinks tends to grow again) while it keeps more than 8 KiB: its usable
 * size becomes the slices it still spans, the slices past them go back to
 * the heap, and it grows over them again in place. Smaller, it moves to a
 * class block. An aligned large block (its page starts before it) too. */
static void test_large_blocks_shrink_in_place(void) {
  const size_t size = 600 * KIB, kept = 100 * KIB, kept_slices = 128 * KIB;
  for (size_t alignment = 16; alignment <= 128 * KIB; alignment *= 8192) {
    uint8_t *block = NULL;
    CHECK(shoal_posix_memalign((void **)&block, alignment, opaque_size(size)) == 0);
    pattern_fill(block, size, 11);
    size_t offset = (uintptr_t)block % (64 * KIB); /* from the start of its first slice */
    uint8_t *shrunk = shoal_realloc(block, opaque_size(kept));
    CHECK_CTX(shrunk == block, "realloc(%zu -> %zu) moved a large block (alignment %zu)", size,
              kept, alignment);
    CHECK_CTX(shoal_malloc_usable_size(shrunk) == kept_slices - offset,
              "realloc(%zu -> %zu): usable %zu, not the %zu its slices hold", size, kept,
              shoal_malloc_usable_size(shrunk), kept_slices - offset);
    CHECK(pattern_check(shrunk, kept, 11));
    memset(shrunk + kept, 0x5a, kept_slices - offset - kept); /* all of it writable */
    pattern_fill(shrunk, kept, 12);
    uint8_t *regrown = shoal_realloc(shrunk, opaque_size(size));
    CHECK_CTX(regrown == block, "realloc(%zu -> %zu) did not take back the slices it gave", kept,
              size);
    CHECK(pattern_check(regrown, kept, 12));
    uint8_t *small = shoal_realloc(regrown, opaque_size(8 * KIB));
    CHECK_CTX(shoal_malloc_usable_size(small) < 64 * KIB,
              "realloc(%zu -> 8 KiB) kept a slice: usable %zu", size,
              shoal_malloc_usable_size(small));
    CHECK(pattern_check(small, 8 * KIB, 12));
    shoal_free(small);
  }
  /* Within its one slice it keeps its usable size: nothing to give back. */
  uint8_t *block = shoal_malloc(opaque_size(60 * KIB));
  CHECK(block != NULL);
  pattern_fill(block, 60 * KIB, 13);
  uint8_t *shrunk = shoal_realloc(block, opaque_size(9 * KIB));
  CHECK_CTX(shrunk == block && shoal_malloc_usable_size(shrunk) == 60 * KIB,
            "realloc(60 KiB -> 9 KiB) = %p from %p, usable %zu", (void *)shrunk, (void *)block,
            shoal_malloc_usable_size(shrunk));
  CHECK(pattern_check(shrunk, 9 * KIB, 13));
  shoal_free(shrunk);
}

/* A huge block that realloc grows past its mapping moves, with its
 * contents, into a freed block of the cache that holds the new size (its
 * pages are resident: a remap would fault in the new tail), and the block
 * it leaves waits in the cache for the next. */
static void test_huge_grows_into_cached(void) {
  shoal_collect(true);                                  /* empties the cache of freed huge blocks */
  uint8_t *spare = shoal_malloc(opaque_size(12 * MIB)); /* a mapping of 16 MiB */
  uint8_t *block = shoal_malloc(opaque_size(3 * MIB));  /* of 4 MiB */
  CHECK(spare != NULL && block != NULL);
  memset(spare, 0x77, 12 * MIB);
  pattern_fill(block, 3 * MIB, 21);
  shoal_free(spare);
  uint8_t *grown = shoal_realloc(block, opaque_size(10 * MIB));
  CHECK_CTX(grown == spare, "realloc(3 MiB -> 10 MiB) = %p, not the cached block at %p",
            (void *)grown, (void *)spare);
  CHECK(shoal_malloc_usable_size(grown) >= 10 * MIB && pattern_check(grown, 3 * MIB, 21));
  memset(grown + 3 * MIB, 0x5a, 7 * MIB);
  uint8_t *again = shoal_malloc(opaque_size(3 * MIB)); /* the block realloc left */
  CHECK_CTX(again == block, "malloc(3 MiB) = %p, not the cached block at %p", (void *)again,
            (void *)block);
  shoal_free(again);
  shoal_free(grown);
  shoal_collect(true);
}

#if !defined(_WIN32) /* Windows has no transparent huge pages to ask for */
/* Whether the mapping holding p carries the kernel's "hg" flag (madvised
 * for transparent huge pages), from /proc/self/smaps. */
static bool mapping_asks_huge_pages(const void *p) {
  FILE *smaps = fopen("/proc/self/smaps", "r");
  CHECK(smaps != NULL);
  char line[512];
  bool inside = false, huge = false;
  while (fgets(line, sizeof line, smaps) != NULL) {
    unsigned long start, end;
    if (sscanf(line, "%lx-%lx ", &start, &end) == 2 && strchr(line, ':') != NULL &&
        line[0] != 'V') {
      inside = (uintptr_t)p >= start && (uintptr_t)p < end;
      continue;
    }
    if (inside && strncmp(line, "VmFlags:", 8) == 0) {
      huge = strstr(line, " hg") != NULL;
      break;
    }
  }
  fclose(smaps);
  return huge;
}

/* SHOAL_HUGE_PAGES (on by default): huge blocks from malloc ask for
 * transparent huge pages; calloc's do not, nor does a block that realloc
 * grows, for its whole mapping (large.c, huge_realloc, says why). */
static void test_huge_pages_advice(void) {
  CHECK(shoal_option_get(SHOAL_OPTION_HUGE_PAGES) == 1);
  shoal_collect(true); /* empties the cache of freed huge blocks: the next ones are fresh */
  void *written = shoal_malloc(opaque_size(8 * MIB));
  void *zeroed = shoal_calloc(1, opaque_size(8 * MIB + 4096));
  CHECK(written != NULL && zeroed != NULL);
  CHECK_CTX(mapping_asks_huge_pages(written), "malloc(8 MiB) did not ask for huge pages");
  CHECK_CTX(!mapping_asks_huge_pages(zeroed), "calloc(8 MiB) asked for huge pages");
  zeroed = shoal_realloc(zeroed, opaque_size(16 * MIB));
  CHECK(zeroed != NULL);
  CHECK_CTX(!mapping_asks_huge_pages(zeroed), "calloc(8 MiB) grown to 16 MiB asked for huge pages");
  /* A block that realloc moves stays at its place within a huge page (the
   * mapping starts on one), so that the kernel moves the huge pages it has
   * whole (os.h, os_remap_aligned); its mapping asks for none any more. */
  CHECK_CTX(((uintptr_t)written & (2 * MIB - 1)) == 64 * 1024,
            "an 8 MiB block at %p does not lie 64 KiB past a huge page", written);
  void *next_door = shoal_malloc(opaque_size(8 * MIB)); /* may take the room to grow in place */
  written = shoal_realloc(written, opaque_size(40 * MIB));
  CHECK(written != NULL);
  CHECK_CTX(!mapping_asks_huge_pages(written), "malloc(8 MiB) grown to 40 MiB asks for huge pages");
  CHECK_CTX(((uintptr_t)written & (2 * MIB - 1)) == 64 * 1024,
            "the block realloc grew lies at %p, not 64 KiB past a huge page", written);
  shoal_free(next_door);
  shoal_free(written);
  shoal_free(zeroed);
  shoal_collect(true); /* empties the cache of freed huge blocks: the next ones are fresh */
  shoal_option_set(SHOAL_OPTION_HUGE_PAGES, 0);
  void *plain = shoal_malloc(opaque_size(12 * MIB + 8192));
  CHECK(plain != NULL);
  CHECK_CTX(!mapping_asks_huge_pages(plain), "SHOAL_HUGE_PAGES=0 but malloc asked for huge pages");
  shoal_free(plain);
  shoal_option_set(SHOAL_OPTION_HUGE_PAGES, 1);
}
#endif

static void test_free_sized(void) {
  live_ring_t ring = {0};
  for (size_t i = 0; i < sweep_size_count; i += 7) {
    size_t size = opaque_size(sweep_sizes[i]);
    void *plain = shoal_malloc(size);
    CHECK(plain != NULL);
    block_fill(plain, size, 1);
    shoal_free_sized(plain, size);
    for (size_t alignment = 16; alignment <= 4 * MIB; alignment *= 8) {
      void *aligned = shoal_aligned_alloc(alignment, size);
      ring_add(&shoal_api, &ring, aligned, size, alignment, "aligned_alloc then free_sized");
      void *sized = shoal_aligned_alloc(alignment, size);
      CHECK_CTX(sized != NULL && is_aligned(sized, alignment), "aligned_alloc(%zu, %zu)", alignment,
                size);
      block_fill(sized, size, 2);
      shoal_free_sized(sized, size);
    }
  }
  ring_drain(&shoal_api, &ring);
}

static int static_array[64];

static void test_owns_foreign(void) {
  int on_stack = 0;
  CHECK(!shoal_owns(&on_stack));
  CHECK(!shoal_owns(static_array));
  CHECK(!shoal_owns(&static_array[63]));
  CHECK(!shoal_owns("a string literal"));
  CHECK(shoal_block_size(&on_stack) == 0 && shoal_block_size(NULL) == 0);
  CHECK(shoal_block_size(static_array) == 0);
  CHECK(!shoal_owns(NULL));
  CHECK(!shoal_owns((void *)test_owns_foreign));
  void *mapped = pages_map(4 * MIB);
  CHECK(mapped != NULL);
  CHECK(!shoal_owns(mapped));
  CHECK(!shoal_owns((char *)mapped + 2 * MIB));
  pages_unmap(mapped, 4 * MIB);

  /* A huge block's mapping ends at a page, inside a 1 MiB chunk the segment
   * map marks as shoal's: memory mapped just past its end is still foreign.
   * (Mappings up to 32 MiB come in powers of two and end on a chunk: the
   * block is bigger.) */
  size_t granularity = pages_map_granularity();
  void *huge = shoal_malloc(33 * MIB + 100);
  CHECK(huge != NULL);
  char *end = (char *)huge + shoal_block_size(huge);
  void *neighbour = NULL;
  for (size_t step = 0; step < 8 && neighbour == NULL; step++) {
    size_t size = opaque_size(33 * MIB + 100 + step * granularity);
    CHECK(shoal_owns(end - 1));
    if ((uintptr_t)end % granularity == 0 && ((uintptr_t)end & (MIB - 1)) != 0)
      neighbour = pages_map_at(end, granularity);
    if (neighbour == NULL) {
      shoal_free(huge);
      huge = shoal_malloc(size);
      CHECK(huge != NULL);
      end = (char *)huge + shoal_block_size(huge);
    }
  }
  if (neighbour != NULL) {
    CHECK_CTX(!shoal_owns(neighbour),
              "shoal_owns(%p) is true for a foreign mapping just past a huge block", neighbour);
    CHECK(shoal_block_size(neighbour) == 0);
    pages_unmap(neighbour, granularity);
  } else {
    fprintf(stderr,
            "api: no foreign mapping could be placed past a huge block; that check is skipped\n");
  }
  shoal_free(huge);
}

int main(void) {
  page_size = os_page_bytes();
  sweep_sizes_build();
  /* Nothing this test allocates survives it: the live figures must come
   * back to where they were (stdout's buffer is made before the baseline). */
  printf("api: %zu sweep sizes\n", sweep_size_count);
  fflush(stdout);
  shoal_collect(true);
  shoal_stats_t before;
  shoal_stats_get(&before);

  const api_t *apis[] = {&standard_api, &shoal_api};
  for (int i = 0; i < 2; i++) {
    const api_t *api = apis[i];
    double start = now_seconds();
    test_malloc_sweep(api);
    test_aligned_sweeps(api);
    test_realloc_contents(api);
    test_calloc_zeroes_reused(api);
    test_edge_cases(api);
    test_impossible_sizes(api);
    test_bad_alignments(api);
    test_page_allocations(api);
    fprintf(stderr, "api: %s names checked in %.2f s\n", api->name, now_seconds() - start);
  }
  test_free_sized();
  test_owns_foreign();
  test_large_blocks_grow_in_place();
  test_large_blocks_shrink_in_place();
  test_huge_grows_into_cached();
#if !defined(_WIN32)
  test_huge_pages_advice();
#endif

  shoal_collect(true);
  shoal_stats_t after;
  shoal_stats_get(&after);
  CHECK_CTX(after.live_blocks == before.live_blocks, "live blocks %zu before, %zu after",
            before.live_blocks, after.live_blocks);
  CHECK_CTX(after.live_bytes == before.live_bytes, "live bytes %zu before, %zu after",
            before.live_bytes, after.live_bytes);
  printf("api: all checks passed\n");
  return 0;
}
