/* Checked mode's catalogue: one small program per misuse kind, and the
 * legal programs that must run clean beside them. argv[1] names the case
 * (no argument: list them, one "name fault|legal" a line); check.sh runs
 * each under SHOAL_CHECK=1 (abort and ignore) and without it.
 *
 * A fault case prints "address 0x..." (the pointer shoal's line must name)
 * and flushes, then commits its bug. When abort on error is on, reaching
 * the end of a fault case is a failure (exit 3: without SHOAL_CHECK that is
 * how check.sh learns a kind is not caught cheaply). With
 * SHOAL_ABORT_ON_ERROR=0 the faulty call must have been ignored: the case
 * checks what the ignored call left (a kept block, a NULL from realloc, one
 * fault counted by shoal_check_heap) and exits 0.
 *
 * Every block a case misuses comes from a function of its own (alloc_small,
 * alloc_large, alloc_huge, alloc_aligned): the report must name it as the
 * place of allocation. They and the bad stores are never inlined, cloned or
 * merged, and stores go through volatile, so that the optimiser keeps every
 * deliberate bug where the case put it (free is opaque under -fno-builtin). */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "shoal.h"
#include "testhelper.h"

#if defined(__clang__)
#define SITE_FUNCTION __attribute__((noinline))
#else
#define SITE_FUNCTION __attribute__((noipa)) /* no inlining, cloning or merging */
#endif

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

/* Sizes with room after them in the core's block, so that a one-byte
 * overrun without checked mode stays in the block's own slack. */
#define SMALL_SIZE ((size_t)50)
#define LARGE_SIZE ((size_t)200000)      /* a single-block page of slices */
#define HUGE_SIZE  ((size_t)8 * MIB + 3) /* a mapping of its own */

/* ---- where blocks come from (each named in the reports) ---- */

SITE_FUNCTION unsigned char *alloc_small(size_t size) {
  unsigned char *block = malloc(size);
  CHECK(block != NULL);
  return block;
}

SITE_FUNCTION unsigned char *alloc_large(size_t size) {
  unsigned char *block = malloc(size);
  CHECK(block != NULL && size >= 64 * KIB);
  return block;
}

SITE_FUNCTION unsigned char *alloc_huge(size_t size) {
  unsigned char *block = malloc(size);
  CHECK(block != NULL && size > 2 * MIB);
  return block;
}

SITE_FUNCTION unsigned char *alloc_aligned(size_t alignment, size_t size) {
  void *block = NULL;
  CHECK(posix_memalign(&block, alignment, size) == 0);
  CHECK(is_aligned(block, alignment));
  return block;
}

SITE_FUNCTION unsigned char *alloc_zero(void) {
  unsigned char *block = malloc(opaque_size(0));
  CHECK(block != NULL);
  return block;
}

/* A store the compiler cannot drop or move: byte `offset` of block. */
SITE_FUNCTION void poke(void *block, ptrdiff_t offset) {
  volatile unsigned char *byte = (volatile unsigned char *)block + offset;
  *byte = 0x5A;
}

/* A load the compiler cannot drop or move: byte `offset` of block. */
SITE_FUNCTION unsigned char peek(const void *block, ptrdiff_t offset) {
  const volatile unsigned char *byte = (const volatile unsigned char *)block + offset;
  return *byte;
}

/* ---- helpers ---- */

/* stdout is unbuffered (main), so that printing allocates nothing between
 * a case's calls. */
static void announce(const void *pointer) {
  printf("address 0x%" PRIxPTR "\n", (uintptr_t)pointer);
}

static bool ignoring(void) {
  return shoal_option_get(SHOAL_OPTION_ABORT_ON_ERROR) == 0;
}

/* SHOAL_CHECK=1, and shoal serves malloc (a sanitizer's runtime may keep it). */
static bool checked_mode(void) {
  const char *check = getenv("SHOAL_CHECK");
  void *block = malloc(16);
  bool served = shoal_owns(block);
  free(block);
  return served && check != NULL && strcmp(check, "1") == 0;
}

enum { WITNESS_COUNT = 16 };
static void *witnesses[WITNESS_COUNT];

/* Blocks that must come through a misuse untouched. */
static void witnesses_make(void) {
  for (int i = 0; i < WITNESS_COUNT; i++) {
    witnesses[i] = malloc(48);
    CHECK(witnesses[i] != NULL);
    pattern_fill(witnesses[i], 48, (uint64_t)i);
  }
}

static void witnesses_check_and_free(void) {
  for (int i = 0; i < WITNESS_COUNT; i++) {
    CHECK(pattern_check(witnesses[i], 48, (uint64_t)i));
    free(witnesses[i]);
  }
}

/* After an ignored double free the block is free once: `count` allocations
 * of its size never return one block twice. */
static void check_not_handed_out_twice(size_t size, int count) {
  check_handed_out_once(malloc, free, size, count);
}

/* Allocate and free `bytes` of 1000-byte blocks: the oldest quarantined
 * blocks leave the quarantine, and their fill is checked as they go. */
SITE_FUNCTION void churn(size_t bytes) {
  for (size_t done = 0; done < bytes; done += 1000) {
    void *block = malloc(1000);
    CHECK(block != NULL);
    pattern_fill(block, 1000, done);
    free(block);
  }
}

/* With abort off, shoal_check_heap must have counted exactly one fault. */
static void expect_heap_faults(size_t faults) {
  if (ignoring()) CHECK_CTX(faults == 1, "shoal_check_heap found %zu faults, expected 1", faults);
}

/* ---- double free ---- */

static int double_free(unsigned char *block, size_t size, int recount) {
  pattern_fill(block, size, 1);
  announce(block);
  free(block);
  free(opaque_pointer(block));
  if (ignoring()) check_not_handed_out_twice(size, recount);
  return 0;
}

static int case_double_free_small(void) {
  return double_free(alloc_small(SMALL_SIZE), SMALL_SIZE, 64);
}
static int case_double_free_large(void) {
  return double_free(alloc_large(LARGE_SIZE), LARGE_SIZE, 8);
}
static int case_double_free_huge(void) {
  return double_free(alloc_huge(HUGE_SIZE), HUGE_SIZE, 2);
}

/* Other allocations and frees between the two frees (inside quarantine). */
static int case_double_free_delayed(void) {
  enum { OTHERS = 200 };
  void *others[OTHERS];
  unsigned char *block = alloc_small(SMALL_SIZE);
  free(block);
  for (int i = 0; i < OTHERS; i++) {
    others[i] = malloc(SMALL_SIZE + (size_t)(i % 7) * 24);
    CHECK(others[i] != NULL);
  }
  for (int i = 0; i < OTHERS; i += 2) free(others[i]);
  announce(block);
  free(opaque_pointer(block));
  for (int i = 1; i < OTHERS; i += 2) free(others[i]);
  if (ignoring()) check_not_handed_out_twice(SMALL_SIZE, 64);
  return 0;
}

/* a, b, a: the second free of a is not the latest free. */
static int case_double_free_interleaved(void) {
  unsigned char *block = alloc_small(SMALL_SIZE);
  unsigned char *other = malloc(SMALL_SIZE);
  CHECK(other != NULL);
  free(block);
  free(other);
  announce(block);
  free(opaque_pointer(block));
  if (ignoring()) check_not_handed_out_twice(SMALL_SIZE, 64);
  return 0;
}

/* Freed again after the block left the quarantine (check.sh sets it to
 * 64K; the churn uses another size, so the block is not handed out again):
 * its record is gone, but the core's free mark still tells. */
static int case_double_free_after_quarantine(void) {
  unsigned char *block = alloc_small(SMALL_SIZE);
  announce(block);
  free(block);
  churn(MIB);
  free(opaque_pointer(block));
  if (ignoring()) check_not_handed_out_twice(SMALL_SIZE, 64);
  return 0;
}

/* realloc(p, 0) frees p: on a freed block it is a double free. */
static int case_realloc_zero_freed(void) {
  unsigned char *block = alloc_small(SMALL_SIZE);
  announce(block);
  free(block);
  void *result = realloc(opaque_pointer(block), 0);
  if (ignoring()) CHECK(result == NULL);
  return 0;
}

/* ---- pointers shoal never handed out ---- */

static char static_array[256];

static int free_foreign(void *bad) {
  witnesses_make();
  announce(bad);
  free(bad);
  witnesses_check_and_free();
  return 0;
}

static int case_free_stack(void) {
  char on_stack[64] = {0};
  int status = free_foreign(opaque_pointer(on_stack + 16));
  CHECK(on_stack[0] == 0);
  return status;
}
static int case_free_static(void) {
  return free_foreign(opaque_pointer(static_array + 32));
}
static int case_free_mmap(void) {
  void *mapping = pages_map(4096);
  CHECK(mapping != NULL);
  int status = free_foreign(mapping);
  pages_unmap(mapping, 4096);
  return status;
}

/* ---- pointers inside a block, misaligned pointers ---- */

/* free(block + offset): the block stays live and whole. */
static int free_inside(unsigned char *block, size_t size, size_t offset) {
  block_fill(block, size, 2);
  void *bad = opaque_pointer(block + offset);
  announce(bad);
  free(bad);
  if (!ignoring()) return 0; /* not caught: what free did to the block is unknown */
  CHECK(block_check(block, size, 2));
  CHECK(malloc_usable_size(block) >= size);
  free(block);
  return 0;
}

static int case_free_inside_small(void) {
  return free_inside(alloc_small(SMALL_SIZE), SMALL_SIZE, 16);
}
static int case_free_inside_large(void) {
  return free_inside(alloc_large(LARGE_SIZE), LARGE_SIZE, 100000);
}
static int case_free_inside_huge(void) {
  return free_inside(alloc_huge(HUGE_SIZE), HUGE_SIZE, 5 * MIB);
}
static int case_free_misaligned_small(void) {
  return free_inside(alloc_small(SMALL_SIZE), SMALL_SIZE, 1);
}
static int case_free_misaligned_large(void) {
  return free_inside(alloc_large(LARGE_SIZE), LARGE_SIZE, 8);
}
/* Inside a freed large block, which checked mode keeps inaccessible: the
 * block is found without reading it. */
static int case_free_inside_large_freed(void) {
  unsigned char *block = alloc_large(LARGE_SIZE);
  free(block);
  void *bad = opaque_pointer(block + 4096);
  announce(bad);
  free(bad);
  return 0;
}

/* malloc_usable_size(bad) returns 0 once ignored; the block is untouched. */
static int usable_size_of_bad(unsigned char *block, size_t offset, bool freed) {
  pattern_fill(block, SMALL_SIZE, 3);
  if (freed) free(block);
  void *bad = opaque_pointer(block + offset);
  announce(bad);
  size_t usable = malloc_usable_size(bad);
  if (ignoring()) CHECK_CTX(usable == 0, "malloc_usable_size(bad) = %zu", usable);
  if (!freed) {
    CHECK(pattern_check(block, SMALL_SIZE, 3));
    free(block);
  }
  return 0;
}

static int case_usable_size_inside(void) {
  return usable_size_of_bad(alloc_small(SMALL_SIZE), 16, false);
}
static int case_usable_size_misaligned(void) {
  return usable_size_of_bad(alloc_small(SMALL_SIZE), 1, false);
}
static int case_usable_size_freed(void) {
  return usable_size_of_bad(alloc_small(SMALL_SIZE), 0, true);
}
static int case_usable_size_stack(void) {
  char on_stack[64] = {0};
  void *bad = opaque_pointer(on_stack + 16);
  announce(bad);
  size_t usable = malloc_usable_size(bad);
  if (ignoring()) CHECK(usable == 0);
  return 0;
}

/* realloc(bad) returns NULL once ignored; the block is untouched. */
static int realloc_of_bad(unsigned char *block, size_t size, size_t offset, bool freed) {
  block_fill(block, size, 4);
  if (freed) free(block);
  void *bad = opaque_pointer(block + offset);
  announce(bad);
  void *result = realloc(bad, size + 100);
  if (!ignoring()) return 0; /* not caught: what realloc did to the block is unknown */
  CHECK(result == NULL);
  if (!freed) {
    CHECK(block_check(block, size, 4));
    free(block);
  }
  return 0;
}

static int case_realloc_inside(void) {
  return realloc_of_bad(alloc_small(SMALL_SIZE), SMALL_SIZE, 16, false);
}
static int case_realloc_inside_large(void) {
  return realloc_of_bad(alloc_large(LARGE_SIZE), LARGE_SIZE, 4096, false);
}
static int case_realloc_misaligned(void) {
  return realloc_of_bad(alloc_small(SMALL_SIZE), SMALL_SIZE, 1, false);
}
static int case_realloc_freed(void) {
  return realloc_of_bad(alloc_small(SMALL_SIZE), SMALL_SIZE, 0, true);
}
/* Without checked mode a realloc that fits stays in place: nothing to see. */
static int case_realloc_freed_fits(void) {
  unsigned char *block = alloc_small(SMALL_SIZE);
  announce(block);
  free(block);
  void *result = realloc(opaque_pointer(block), SMALL_SIZE - 10);
  if (ignoring()) CHECK(result == NULL);
  return 0;
}
static int case_realloc_stack(void) {
  char on_stack[64] = {0};
  void *bad = opaque_pointer(on_stack + 16);
  announce(bad);
  void *result = realloc(bad, 100);
  if (ignoring()) CHECK(result == NULL);
  return 0;
}

/* ---- overruns and underruns by one byte ----
 * Found when the block is freed (an ignored free keeps it), reallocated (an
 * ignored realloc returns NULL) or checked by shoal_check_heap. */

typedef enum found_by_e { AT_FREE, AT_REALLOC, BY_CHECK_HEAP } found_by_t;

static int damage(unsigned char *block, size_t size, ptrdiff_t offset, found_by_t found_by) {
  block_fill(block, size, 5);
  poke(block, offset);
  announce(block);
  if (found_by == AT_FREE) {
    free(block);
  } else if (found_by == AT_REALLOC) {
    void *result = realloc(block, size + 100);
    if (ignoring()) CHECK(result == NULL);
  } else {
    expect_heap_faults(shoal_check_heap());
  }
  return 0;
}

static int case_overrun_small_free(void) {
  return damage(alloc_small(SMALL_SIZE), SMALL_SIZE, (ptrdiff_t)SMALL_SIZE, AT_FREE);
}
static int case_overrun_large_free(void) {
  return damage(alloc_large(LARGE_SIZE), LARGE_SIZE, (ptrdiff_t)LARGE_SIZE, AT_FREE);
}
static int case_overrun_huge_free(void) {
  return damage(alloc_huge(HUGE_SIZE), HUGE_SIZE, (ptrdiff_t)HUGE_SIZE, AT_FREE);
}
static int case_overrun_small_realloc(void) {
  return damage(alloc_small(SMALL_SIZE), SMALL_SIZE, (ptrdiff_t)SMALL_SIZE, AT_REALLOC);
}
static int case_overrun_large_realloc(void) {
  return damage(alloc_large(LARGE_SIZE), LARGE_SIZE, (ptrdiff_t)LARGE_SIZE, AT_REALLOC);
}
static int case_overrun_huge_realloc(void) {
  return damage(alloc_huge(HUGE_SIZE), HUGE_SIZE, (ptrdiff_t)HUGE_SIZE, AT_REALLOC);
}
static int case_overrun_small_check_heap(void) {
  return damage(alloc_small(SMALL_SIZE), SMALL_SIZE, (ptrdiff_t)SMALL_SIZE, BY_CHECK_HEAP);
}
static int case_overrun_large_check_heap(void) {
  return damage(alloc_large(LARGE_SIZE), LARGE_SIZE, (ptrdiff_t)LARGE_SIZE, BY_CHECK_HEAP);
}
static int case_overrun_huge_check_heap(void) {
  return damage(alloc_huge(HUGE_SIZE), HUGE_SIZE, (ptrdiff_t)HUGE_SIZE, BY_CHECK_HEAP);
}
/* Underruns hit the second of two blocks, so that without checked mode the
 * byte lands in the first one rather than in the page's metadata. */
static int case_underrun_small_free(void) {
  unsigned char *first = alloc_small(SMALL_SIZE);
  int status = damage(alloc_small(SMALL_SIZE), SMALL_SIZE, -1, AT_FREE);
  free(first);
  return status;
}
static int case_underrun_large_free(void) {
  unsigned char *first = alloc_large(LARGE_SIZE);
  int status = damage(alloc_large(LARGE_SIZE), LARGE_SIZE, -1, AT_FREE);
  free(first);
  return status;
}
static int case_underrun_huge_free(void) {
  return damage(alloc_huge(HUGE_SIZE), HUGE_SIZE, -1, AT_FREE);
}
static int case_underrun_small_realloc(void) {
  unsigned char *first = alloc_small(SMALL_SIZE);
  int status = damage(alloc_small(SMALL_SIZE), SMALL_SIZE, -1, AT_REALLOC);
  free(first);
  return status;
}
static int case_underrun_small_check_heap(void) {
  unsigned char *first = alloc_small(SMALL_SIZE);
  int status = damage(alloc_small(SMALL_SIZE), SMALL_SIZE, -1, BY_CHECK_HEAP);
  free(first);
  return status;
}
static int case_overrun_aligned64_free(void) {
  return damage(alloc_aligned(64, 100), 100, 100, AT_FREE);
}
static int case_overrun_aligned4096_free(void) {
  return damage(alloc_aligned(4096, 5000), 5000, 5000, AT_FREE);
}
static int case_underrun_aligned4096_free(void) {
  unsigned char *first = alloc_aligned(4096, 5000);
  int status = damage(alloc_aligned(4096, 5000), 5000, -1, AT_FREE);
  free(first);
  return status;
}
static int case_overrun_aligned4096_check_heap(void) {
  return damage(alloc_aligned(4096, 5000), 5000, 5000, BY_CHECK_HEAP);
}

/* ---- write after free ---- */

/* Found when the block leaves the quarantine: check.sh sets
 * SHOAL_CHECK_QUARANTINE small, and the churn pushes the block out. */
static int write_after_free_churned(unsigned char *block, size_t size) {
  pattern_fill(block, size, 6);
  free(block);
  announce(block);
  poke(block, (ptrdiff_t)(size / 2)); /* clear of the core's free-list words */
  churn(4 * MIB);
  return 0;
}

static int case_write_after_free_small_quarantine(void) {
  return write_after_free_churned(alloc_small(SMALL_SIZE), SMALL_SIZE);
}
static int case_write_after_free_large_quarantine(void) {
  return write_after_free_churned(alloc_large(LARGE_SIZE), LARGE_SIZE);
}

/* Found by shoal_check_heap while the block is still quarantined. (Checked
 * mode keeps a quarantined large or huge block inaccessible: for those the
 * write itself faults, as in the cases below.) */
static int write_after_free_checked(unsigned char *block, size_t size) {
  free(block);
  announce(block);
  poke(block, (ptrdiff_t)(size / 2));
  expect_heap_faults(shoal_check_heap());
  return 0;
}

static int case_write_after_free_small_check_heap(void) {
  return write_after_free_checked(alloc_small(SMALL_SIZE), SMALL_SIZE);
}
static int case_write_after_free_large_check_heap(void) {
  return write_after_free_checked(alloc_large(LARGE_SIZE), LARGE_SIZE);
}
static int case_write_after_free_huge_check_heap(void) {
  return write_after_free_checked(alloc_huge(HUGE_SIZE), HUGE_SIZE);
}

/* ---- touching an inaccessible block ----
 * Checked mode makes a quarantined large or huge block's pages
 * inaccessible, and malloc(0) returns an address nothing may be read or
 * written through: the touch itself faults, and is reported. Abort on error
 * cannot be turned off for it (the access would only fault again). Without
 * checked mode the touch reads or writes memory shoal still holds. */

static int touch(unsigned char *block, ptrdiff_t offset, bool write) {
  announce(block);
  if (write)
    poke(block, offset);
  else
    (void)peek(block, offset);
  return 0;
}

static int touch_freed(unsigned char *block, size_t size, bool write) {
  pattern_fill(block, size, 10);
  free(block);
  return touch(block, (ptrdiff_t)(size / 2), write);
}

static int case_read_after_free_large(void) {
  return touch_freed(alloc_large(LARGE_SIZE), LARGE_SIZE, false);
}
static int case_write_after_free_large(void) {
  return touch_freed(alloc_large(LARGE_SIZE), LARGE_SIZE, true);
}
static int case_write_after_free_huge(void) {
  return touch_freed(alloc_huge(HUGE_SIZE), HUGE_SIZE, true);
}
/* Another block of the size allocated meanwhile: without checked mode it
 * is the freed one's memory, which the stale pointer then reads. */
static int case_read_after_free_large_reused(void) {
  unsigned char *block = alloc_large(LARGE_SIZE);
  free(block);
  unsigned char *other = malloc(LARGE_SIZE);
  CHECK(other != NULL);
  memset(other, 0x66, LARGE_SIZE);
  int status = touch(block, 1000, false);
  free(other);
  return status;
}
static int case_read_malloc_zero(void) {
  return touch(alloc_zero(), 0, false);
}
static int case_write_malloc_zero(void) {
  return touch(alloc_zero(), 0, true);
}
static int case_read_after_free_malloc_zero(void) {
  unsigned char *block = alloc_zero();
  free(block);
  return touch(block, 0, false);
}
static int case_double_free_malloc_zero(void) {
  return double_free(alloc_zero(), 0, 64);
}

/* ---- legal programs: exit 0, nothing on stderr ---- */

static int case_legal_calloc_overflow(void) {
  static const size_t pairs[][2] = {
      {SIZE_MAX, 2},        {2, SIZE_MAX},
      {SIZE_MAX / 2, 3},    {(size_t)1 << 33, (size_t)1 << 33},
      {SIZE_MAX, SIZE_MAX}, {(SIZE_MAX >> 4) + 1, 16},
  };
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    errno = 0;
    void *p = calloc(opaque_size(pairs[i][0]), opaque_size(pairs[i][1]));
    CHECK_CTX(p == NULL && errno == ENOMEM, "calloc(%zu, %zu) = %p, errno %d", pairs[i][0],
              pairs[i][1], p, errno);
    errno = 0;
    void *block = malloc(16);
    CHECK(block != NULL);
    p = reallocarray(block, opaque_size(pairs[i][0]), opaque_size(pairs[i][1]));
    CHECK(p == NULL && errno == ENOMEM);
    free(block);
  }
  return 0;
}

/* calloc's memory reads zero at every size, fresh or reused. */
static int case_legal_calloc_zeroed(void) {
  static const size_t sizes[] = {1, 50, 1000, 70000, LARGE_SIZE, 3 * MIB, HUGE_SIZE};
  for (int round = 0; round < 2; round++) {
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      size_t size = opaque_size(sizes[i]);
      unsigned char *block = calloc(1, size);
      CHECK(block != NULL);
      for (size_t k = 0; k < size; k++)
        CHECK_CTX(block[k] == 0, "calloc(1, %zu): byte %zu is 0x%02x", size, k, block[k]);
      memset(block, 0x77, size);
      free(block);
    }
  }
  return 0;
}

/* A buffer grown by realloc keeps its contents, by small steps and large. */
static int case_legal_realloc_growth(void) {
  unsigned char *buffer = NULL;
  size_t size = 0;
  for (size_t next = 1; next <= 2000; next += 1 + next / 64) {
    buffer = realloc(buffer, next);
    CHECK(buffer != NULL);
    if (size > 0) CHECK_CTX(pattern_check(buffer, size, size), "realloc to %zu", next);
    size = next;
    pattern_fill(buffer, size, size);
  }
  for (size_t next = 3000; next <= 20 * MIB; next += next / 2) {
    buffer = realloc(buffer, next);
    CHECK(buffer != NULL);
    CHECK_CTX(block_check(buffer, size, size), "realloc from %zu to %zu", size, next);
    size = next;
    block_fill(buffer, size, size);
  }
  free(buffer);
  return 0;
}

static int case_legal_realloc_shrink(void) {
  size_t size = 12 * MIB;
  unsigned char *buffer = malloc(size);
  CHECK(buffer != NULL);
  pattern_fill(buffer, 64, 7);
  while (size > 8) {
    size = size / 3;
    buffer = realloc(buffer, size);
    CHECK(buffer != NULL);
    size_t kept = size < 64 ? size : 64;
    CHECK_CTX(pattern_check(buffer, kept, 7), "realloc shrinking to %zu", size);
    memset(buffer + kept, 0x11, size - kept);
  }
  free(buffer);
  return 0;
}

/* realloc(NULL, n) allocates, realloc(p, 0) frees, free(NULL) does nothing. */
static int case_legal_realloc_edges(void) {
  unsigned char *block = realloc(NULL, opaque_size(100));
  CHECK(block != NULL);
  pattern_fill(block, 100, 8);
  block = realloc(block, 100);
  CHECK(block != NULL && pattern_check(block, 100, 8));
  CHECK(realloc(block, opaque_size(0)) == NULL);
  free(NULL);
  CHECK(malloc_usable_size(NULL) == 0);
  return 0;
}

static int case_legal_malloc_zero(void) {
  void *a = malloc(opaque_size(0)), *b = malloc(opaque_size(0));
  CHECK(a != NULL && b != NULL && a != b);
  free(a);
  free(b);
  a = calloc(0, 0);
  CHECK(a != NULL);
  free(a);
  return 0;
}

/* malloc(0)'s pointers: distinct, freeable, reallocable to a real block;
 * checked mode gives them no usable byte. */
static int case_legal_malloc_zero_realloc(void) {
  enum { COUNT = 100 };
  unsigned char *blocks[COUNT];
  for (int i = 0; i < COUNT; i++) {
    blocks[i] = malloc(opaque_size(0));
    CHECK(blocks[i] != NULL);
    for (int j = 0; j < i; j++) CHECK(blocks[j] != blocks[i]);
    if (checked_mode()) CHECK(malloc_usable_size(blocks[i]) == 0);
  }
  for (int i = 0; i < COUNT; i += 2) free(blocks[i]);
  for (int i = 1; i < COUNT; i += 2) {
    blocks[i] = realloc(blocks[i], 100);
    CHECK(blocks[i] != NULL);
    memset(blocks[i], 0x55, 100);
    free(blocks[i]);
  }
  CHECK(shoal_check_heap() == 0);
  return 0;
}

/* A large and a huge block freed, the quarantine emptied (their pages
 * accessible again), then blocks of their sizes written throughout. */
static int case_legal_reuse_after_collect(void) {
  static const size_t sizes[] = {LARGE_SIZE, HUGE_SIZE};
  for (int round = 0; round < 4; round++) {
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      unsigned char *block = malloc(sizes[i]);
      CHECK(block != NULL);
      memset(block, round, sizes[i]);
      free(block);
      shoal_collect(true);
    }
  }
  CHECK(shoal_check_heap() == 0);
  return 0;
}

/* With SHOAL_CHECK_QUARANTINE=0 (check.sh sets it) a freed block goes
 * back to the core at once, a large one too: none stays live there. */
static int case_legal_no_quarantine(void) {
  static const size_t sizes[] = {0, SMALL_SIZE, LARGE_SIZE, HUGE_SIZE};
  shoal_stats_t before, after;
  shoal_stats_get(&before);
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    unsigned char *block = malloc(opaque_size(sizes[i]));
    CHECK(block != NULL);
    memset(block, 0x77, sizes[i]);
    free(block);
  }
  shoal_stats_get(&after);
  CHECK_CTX(after.live_blocks == before.live_blocks, "%zu blocks live, %zu before",
            after.live_blocks, before.live_blocks);
  return 0;
}

static int case_legal_huge_sizes(void) {
  static const size_t impossible[] = {SIZE_MAX / 2, SIZE_MAX, SIZE_MAX - 4095, PTRDIFF_MAX};
  for (size_t i = 0; i < sizeof impossible / sizeof impossible[0]; i++) {
    errno = 0;
    void *p = malloc(opaque_size(impossible[i]));
    CHECK_CTX(p == NULL && errno == ENOMEM, "malloc(%zu) = %p, errno %d", impossible[i], p, errno);
  }
  size_t size = opaque_size(64 * MIB);
  unsigned char *block = malloc(size);
  CHECK(block != NULL);
  block_fill(block, size, 9);
  errno = 0;
  CHECK(realloc(block, opaque_size(SIZE_MAX / 2)) == NULL && errno == ENOMEM);
  CHECK(block_check(block, size, 9));
  free(block);
  return 0;
}

static int case_legal_aligned(void) {
  static const size_t sizes[] = {1, 100, 5000, LARGE_SIZE, 3 * MIB};
  for (size_t alignment = 16; alignment <= 64 * KIB; alignment *= 4) {
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      size_t size = sizes[i];
      void *p = NULL;
      CHECK(posix_memalign(&p, alignment, size) == 0 && is_aligned(p, alignment));
      void *q = aligned_alloc(alignment, size);
      void *r = memalign(alignment, size);
      CHECK(q != NULL && is_aligned(q, alignment) && r != NULL && is_aligned(r, alignment));
      CHECK(malloc_usable_size(p) >= size && malloc_usable_size(r) >= size);
      block_fill(p, size, 1);
      block_fill(q, size, 2);
      block_fill(r, size, 3);
      CHECK(block_check(p, size, 1) && block_check(q, size, 2) && block_check(r, size, 3));
      free(p);
      free(q);
      free(r);
    }
  }
  void *p = NULL;
  CHECK(posix_memalign(&p, 24, 100) == EINVAL);
  size_t page = os_page_bytes();
  void *v = valloc(100), *w = pvalloc(100);
  CHECK(v != NULL && is_aligned(v, page) && w != NULL && is_aligned(w, page));
  memset(v, 1, 100);
  memset(w, 2, page); /* pvalloc rounds the size up to whole pages */
  free(v);
  free(w);
  return 0;
}

/* Writing the whole of malloc_usable_size is allowed. */
static int case_legal_usable_size(void) {
  static const size_t sizes[] = {0, 1, 50, 1000, LARGE_SIZE, HUGE_SIZE};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    unsigned char *block = malloc(opaque_size(sizes[i]));
    CHECK(block != NULL);
    size_t usable = malloc_usable_size(block);
    CHECK(usable >= sizes[i]);
    memset(block, 0x33, usable);
    free(block);
  }
  CHECK(shoal_check_heap() == 0);
  return 0;
}

/* Live blocks written to their last byte, freed ones left alone: clean. */
static int case_legal_check_heap(void) {
  unsigned char *blocks[] = {alloc_small(SMALL_SIZE), alloc_large(LARGE_SIZE),
                             alloc_huge(HUGE_SIZE), alloc_aligned(4096, 5000), alloc_small(1)};
  size_t sizes[] = {SMALL_SIZE, LARGE_SIZE, HUGE_SIZE, 5000, 1};
  for (int i = 0; i < 5; i++) memset(blocks[i], 0x44, sizes[i]);
  free(blocks[1]);
  free(blocks[4]);
  CHECK(shoal_check_heap() == 0);
  free(blocks[0]);
  free(blocks[2]);
  free(blocks[3]);
  CHECK(shoal_check_heap() == 0);
  return 0;
}

/* With a small quarantine (check.sh sets 64K) blocks of many sizes come and
 * go through it, and none is reported. */
static int case_legal_quarantine_churn(void) {
  enum { LIVE = 64 };
  unsigned char *live[LIVE] = {0};
  size_t sizes[LIVE] = {0};
  test_rng_t rng = {42};
  for (int i = 0; i < 20000; i++) {
    size_t slot = rng_range(&rng, 0, LIVE - 1);
    if (live[slot] != NULL) {
      CHECK(pattern_check(live[slot], sizes[slot], slot));
      free(live[slot]);
    }
    sizes[slot] = rng_range(&rng, 0, 3) == 0 ? rng_range(&rng, 1, 100000) : rng_range(&rng, 1, 300);
    live[slot] = malloc(sizes[slot]);
    CHECK(live[slot] != NULL);
    pattern_fill(live[slot], sizes[slot], slot);
  }
  for (int i = 0; i < LIVE; i++) free(live[i]);
  CHECK(shoal_check_heap() == 0);
  return 0;
}

/* Threads allocate blocks and free each other's. */
enum { THREADS = 4, ROUNDS = 20, PER_ROUND = 200 };
static unsigned char *handoff[THREADS][PER_ROUND];
static pthread_barrier_t barrier;

static void *thread_main(void *argument) {
  size_t me = (size_t)(uintptr_t)argument, next = (me + 1) % THREADS;
  test_rng_t rng = {me + 1};
  for (int round = 0; round < ROUNDS; round++) {
    for (size_t i = 0; i < PER_ROUND; i++) {
      size_t size = i % 50 == 0 ? 70000 : rng_range(&rng, 1, 500);
      handoff[me][i] = malloc(size + 8);
      CHECK(handoff[me][i] != NULL);
      memcpy(handoff[me][i], &size, sizeof size);
      pattern_fill(handoff[me][i] + 8, size, size);
    }
    pthread_barrier_wait(&barrier);
    for (size_t i = 0; i < PER_ROUND; i++) {
      size_t size;
      memcpy(&size, handoff[next][i], sizeof size);
      CHECK(pattern_check(handoff[next][i] + 8, size, size));
      free(handoff[next][i]);
    }
    pthread_barrier_wait(&barrier);
  }
  return NULL;
}

static int case_legal_threads(void) {
  pthread_t threads[THREADS];
  CHECK(pthread_barrier_init(&barrier, NULL, THREADS) == 0);
  for (size_t i = 0; i < THREADS; i++)
    CHECK(pthread_create(&threads[i], NULL, thread_main, (void *)(uintptr_t)i) == 0);
  for (size_t i = 0; i < THREADS; i++) CHECK(pthread_join(threads[i], NULL) == 0);
  pthread_barrier_destroy(&barrier);
  CHECK(shoal_check_heap() == 0);
  return 0;
}

/* ---- the catalogue ---- */

typedef struct check_case_s {
  const char *name;
  int (*run)(void);
  bool fault;
} check_case_t;

#define FAULT(name, function)                                                                      \
  { name, function, true }
#define LEGAL(name, function)                                                                      \
  { name, function, false }

static const check_case_t cases[] = {
    FAULT("double-free-small", case_double_free_small),
    FAULT("double-free-large", case_double_free_large),
    FAULT("double-free-huge", case_double_free_huge),
    FAULT("double-free-delayed", case_double_free_delayed),
    FAULT("double-free-interleaved", case_double_free_interleaved),
    FAULT("double-free-after-quarantine", case_double_free_after_quarantine),
    FAULT("realloc-zero-freed", case_realloc_zero_freed),
    FAULT("free-stack", case_free_stack),
    FAULT("free-static", case_free_static),
    FAULT("free-mmap", case_free_mmap),
    FAULT("free-inside-small", case_free_inside_small),
    FAULT("free-inside-large", case_free_inside_large),
    FAULT("free-inside-huge", case_free_inside_huge),
    FAULT("free-misaligned-small", case_free_misaligned_small),
    FAULT("free-misaligned-large", case_free_misaligned_large),
    FAULT("free-inside-large-freed", case_free_inside_large_freed),
    FAULT("usable-size-inside", case_usable_size_inside),
    FAULT("usable-size-misaligned", case_usable_size_misaligned),
    FAULT("usable-size-freed", case_usable_size_freed),
    FAULT("usable-size-stack", case_usable_size_stack),
    FAULT("realloc-inside", case_realloc_inside),
    FAULT("realloc-inside-large", case_realloc_inside_large),
    FAULT("realloc-misaligned", case_realloc_misaligned),
    FAULT("realloc-freed", case_realloc_freed),
    FAULT("realloc-freed-fits", case_realloc_freed_fits),
    FAULT("realloc-stack", case_realloc_stack),
    FAULT("overrun-small-free", case_overrun_small_free),
    FAULT("overrun-large-free", case_overrun_large_free),
    FAULT("overrun-huge-free", case_overrun_huge_free),
    FAULT("overrun-small-realloc", case_overrun_small_realloc),
    FAULT("overrun-large-realloc", case_overrun_large_realloc),
    FAULT("overrun-huge-realloc", case_overrun_huge_realloc),
    FAULT("overrun-small-check-heap", case_overrun_small_check_heap),
    FAULT("overrun-large-check-heap", case_overrun_large_check_heap),
    FAULT("overrun-huge-check-heap", case_overrun_huge_check_heap),
    FAULT("underrun-small-free", case_underrun_small_free),
    FAULT("underrun-large-free", case_underrun_large_free),
    FAULT("underrun-huge-free", case_underrun_huge_free),
    FAULT("underrun-small-realloc", case_underrun_small_realloc),
    FAULT("underrun-small-check-heap", case_underrun_small_check_heap),
    FAULT("overrun-aligned64-free", case_overrun_aligned64_free),
    FAULT("overrun-aligned4096-free", case_overrun_aligned4096_free),
    FAULT("underrun-aligned4096-free", case_underrun_aligned4096_free),
    FAULT("overrun-aligned4096-check-heap", case_overrun_aligned4096_check_heap),
    FAULT("write-after-free-small-quarantine", case_write_after_free_small_quarantine),
    FAULT("write-after-free-large-quarantine", case_write_after_free_large_quarantine),
    FAULT("write-after-free-small-check-heap", case_write_after_free_small_check_heap),
    FAULT("write-after-free-large-check-heap", case_write_after_free_large_check_heap),
    FAULT("write-after-free-huge-check-heap", case_write_after_free_huge_check_heap),
    FAULT("read-after-free-large", case_read_after_free_large),
    FAULT("write-after-free-large", case_write_after_free_large),
    FAULT("read-after-free-large-reused", case_read_after_free_large_reused),
    FAULT("write-after-free-huge", case_write_after_free_huge),
    FAULT("read-malloc-zero", case_read_malloc_zero),
    FAULT("write-malloc-zero", case_write_malloc_zero),
    FAULT("read-after-free-malloc-zero", case_read_after_free_malloc_zero),
    FAULT("double-free-malloc-zero", case_double_free_malloc_zero),
    LEGAL("legal-calloc-overflow", case_legal_calloc_overflow),
    LEGAL("legal-calloc-zeroed", case_legal_calloc_zeroed),
    LEGAL("legal-realloc-growth", case_legal_realloc_growth),
    LEGAL("legal-realloc-shrink", case_legal_realloc_shrink),
    LEGAL("legal-realloc-edges", case_legal_realloc_edges),
    LEGAL("legal-malloc-zero", case_legal_malloc_zero),
    LEGAL("legal-malloc-zero-realloc", case_legal_malloc_zero_realloc),
    LEGAL("legal-reuse-after-collect", case_legal_reuse_after_collect),
    LEGAL("legal-no-quarantine", case_legal_no_quarantine),
    LEGAL("legal-huge-sizes", case_legal_huge_sizes),
    LEGAL("legal-aligned", case_legal_aligned),
    LEGAL("legal-usable-size", case_legal_usable_size),
    LEGAL("legal-check-heap", case_legal_check_heap),
    LEGAL("legal-quarantine-churn", case_legal_quarantine_churn),
    LEGAL("legal-threads", case_legal_threads),
};

int main(int argc, char **argv) {
  size_t count = sizeof cases / sizeof cases[0];
  setvbuf(stdout, NULL, _IONBF, 0);
  if (argc != 2) {
    for (size_t i = 0; i < count; i++)
      printf("%s %s\n", cases[i].name, cases[i].fault ? "fault" : "legal");
    return 0;
  }
  for (size_t i = 0; i < count; i++) {
    if (strcmp(argv[1], cases[i].name) != 0) continue;
    int status = cases[i].run();
    if (cases[i].fault && !ignoring()) {
      printf("check %s: survived, abort on error is on\n", argv[1]);
      return 3;
    }
    return status;
  }
  fprintf(stderr, "check_cases: no case named %s\n", argv[1]);
  return 2;
}
