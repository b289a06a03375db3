/* Deliberate misuse, one case per run (argv[1] names it); misuse.sh runs
 * each case and checks how shoal reacts.
 *
 * Each case prints "address 0x..." (the bad pointer, which shoal's message
 * must name) and flushes, then commits its bug. A double free's case prints
 * before the first free: the first printf allocates stdio's buffer, which
 * could otherwise take the freed block's place and make the second free a
 * good one. With SHOAL_ABORT_ON_ERROR unset shoal must print one line and
 * abort, so reaching the end of a case is a failure (exit 3). With
 * SHOAL_ABORT_ON_ERROR=0 shoal must ignore the bad call: the case then
 * checks nothing changed (its other blocks keep their contents, a
 * double-freed block is not handed out twice, a bad realloc returns NULL)
 * and exits 0. */
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

#include "shoal.h"
#include "testhelper.h"

#define MIB ((size_t)1024 * 1024)

enum { WITNESS_COUNT = 16 };

/* Blocks that must come through the misuse untouched. */
static void *witnesses[WITNESS_COUNT];

static void witnesses_make(size_t size) {
  for (int i = 0; i < WITNESS_COUNT; i++) {
    witnesses[i] = malloc(size);
    CHECK(witnesses[i] != NULL);
    pattern_fill(witnesses[i], size, (uint64_t)i);
  }
}

static void witnesses_check_and_free(size_t size) {
  for (int i = 0; i < WITNESS_COUNT; i++) {
    CHECK(pattern_check(witnesses[i], size, (uint64_t)i));
    free(witnesses[i]);
  }
}

static void announce(const void *bad_pointer) {
  printf("address 0x%" PRIxPTR "\n", (uintptr_t)bad_pointer);
  fflush(stdout);
}

/* After an ignored double free of a block of `size` bytes the block must be
 * free exactly once: two allocations of that size never return it twice. */
static void check_not_handed_out_twice(size_t size) {
  check_handed_out_once(malloc, free, size, 64);
}

static char static_array[256];

static int case_free_stack(void) {
  char on_stack[64] = {0};
  witnesses_make(48);
  void *bad = opaque_pointer(on_stack + 16);
  announce(bad);
  free(bad);
  CHECK(on_stack[0] == 0);
  witnesses_check_and_free(48);
  return 0;
}

static int case_free_static(void) {
  witnesses_make(48);
  void *bad = opaque_pointer(static_array + 32);
  announce(bad);
  free(bad);
  witnesses_check_and_free(48);
  return 0;
}

/* A pointer inside a live block (small or large): the block stays live. */
static int free_inside(size_t size, size_t offset) {
  witnesses_make(64);
  unsigned char *block = malloc(size);
  CHECK(block != NULL);
  pattern_fill(block, size, 5);
  void *bad = opaque_pointer(block + offset);
  announce(bad);
  free(bad);
  CHECK(pattern_check(block, size, 5));
  CHECK(malloc_usable_size(block) >= size);
  free(block);
  witnesses_check_and_free(64);
  return 0;
}

static int case_double_free(void) {
  witnesses_make(64);
  void *block = malloc(64);
  CHECK(block != NULL);
  announce(block);
  free(block);
  free(opaque_pointer(block));
  check_not_handed_out_twice(64);
  witnesses_check_and_free(64);
  return 0;
}

/* The same, with frees of neighbours in between, so the block is no longer
 * at the head of whatever free list it went to. */
static int case_double_free_later(void) {
  enum { NEIGHBOURS = 40 };
  void *neighbours[NEIGHBOURS];
  witnesses_make(48);
  void *block = malloc(48);
  CHECK(block != NULL);
  announce(block);
  for (int i = 0; i < NEIGHBOURS; i++) neighbours[i] = malloc(48);
  free(block);
  for (int i = 0; i < NEIGHBOURS; i++) free(neighbours[i]);
  void *other = malloc(48); /* takes one block off the free list */
  free(opaque_pointer(block));
  free(other);
  check_not_handed_out_twice(48);
  witnesses_check_and_free(48);
  return 0;
}

static int case_realloc_inside(void) {
  witnesses_make(64);
  unsigned char *block = malloc(64);
  CHECK(block != NULL);
  pattern_fill(block, 64, 6);
  void *bad = opaque_pointer(block + 8);
  announce(bad);
  void *result = realloc(bad, 100);
  CHECK(result == NULL);
  CHECK(pattern_check(block, 64, 6));
  free(block);
  witnesses_check_and_free(64);
  return 0;
}

static int case_usable_size_inside(void) {
  witnesses_make(64);
  unsigned char *block = malloc(64);
  CHECK(block != NULL);
  pattern_fill(block, 64, 7);
  void *bad = opaque_pointer(block + 8);
  announce(bad);
  size_t usable = malloc_usable_size(bad);
  CHECK(usable == 0);
  CHECK(pattern_check(block, 64, 7));
  free(block);
  witnesses_check_and_free(64);
  return 0;
}

static int case_free_inside_small(void) {
  return free_inside(64, 8);
}
static int case_free_inside_large(void) {
  return free_inside(5 * MIB, 4096 + 16);
}

/* ---- pointers into shoal's memory that are no live block ----
 * Each bad free happens on this thread or, for the -remote cases, on
 * another one (a remote free takes another path). Ignored, it must leave
 * the heap whole: every later block distinct and writable. */

#define SEGMENT_BYTES ((uintptr_t)1 * MIB) /* shoal's segment: a header, then pages */

static void *free_thread(void *pointer) {
  free(pointer);
  return NULL;
}

/* Frees `pointer` on this thread or on a thread made for it. */
static void free_from(void *pointer, bool remote) {
  if (!remote) {
    free(pointer);
    return;
  }
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, free_thread, pointer) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
}

static void free_on(void *bad, bool remote) {
  announce(bad);
  free_from(bad, remote);
}

/* Many blocks of `size` after the bad free: all distinct, all keep what was
 * written, so no block was handed out twice and no count went wrong. */
static void check_heap_whole(size_t size) {
  enum { COUNT = 3000 };
  static unsigned char *blocks[COUNT];
  for (int i = 0; i < COUNT; i++) {
    blocks[i] = malloc(size);
    CHECK(blocks[i] != NULL);
    pattern_fill(blocks[i], size, (uint64_t)i + 100);
  }
  for (int i = 0; i < COUNT; i++) {
    CHECK_CTX(pattern_check(blocks[i], size, (uint64_t)i + 100), "block %d (%p) was overwritten", i,
              (void *)blocks[i]);
    free(blocks[i]);
  }
  check_not_handed_out_twice(size);
}

/* An address at a block boundary of a live block's page, past every block
 * the page has handed out (glibc: "free(): invalid pointer"). */
static int free_past_blocks(bool remote) {
  witnesses_make(16);
  unsigned char *block = malloc(16);
  CHECK(block != NULL);
  free_on(opaque_pointer(block + 16384), remote);
  free(block);
  check_heap_whole(16);
  witnesses_check_and_free(16);
  return 0;
}
static int case_free_past_blocks(void) {
  return free_past_blocks(false);
}
static int case_free_past_blocks_remote(void) {
  return free_past_blocks(true);
}

/* A block the page has carved but never handed out: already free. A size
 * no start-up code asks for, so the page is fresh and its first block ours. */
static int free_never_handed_out(bool remote) {
  enum { SIZE = 1000 };
  witnesses_make(SIZE);
  unsigned char *first = malloc(SIZE);
  CHECK(first != NULL);
  size_t usable = malloc_usable_size(first);
  free_on(opaque_pointer(first + 3 * usable), remote);
  free(first);
  check_heap_whole(SIZE);
  witnesses_check_and_free(SIZE);
  return 0;
}
static int case_free_never_handed_out(void) {
  return free_never_handed_out(false);
}
static int case_free_never_handed_out_remote(void) {
  return free_never_handed_out(true);
}

/* The header of the segment that holds a live block. */
static int free_segment_header(bool remote, uintptr_t offset) {
  witnesses_make(64);
  unsigned char *block = malloc(64);
  CHECK(block != NULL);
  free_on(opaque_pointer((void *)(((uintptr_t)block & ~(SEGMENT_BYTES - 1)) + offset)), remote);
  free(block);
  check_heap_whole(64);
  witnesses_check_and_free(64);
  return 0;
}
static int case_free_segment_start(void) {
  return free_segment_header(false, 0);
}
static int case_free_segment_header(void) {
  return free_segment_header(false, 4096);
}
static int case_free_segment_header_remote(void) {
  return free_segment_header(true, 4096);
}
/* Inside a slice of the same segment that no page has used: a segment
 * fresh from the OS leaves its descriptor zero. */
static int case_free_unused_slice(void) {
  return free_segment_header(false, 14 * 64 * 1024 + 4096);
}
static int case_free_unused_slice_remote(void) {
  return free_segment_header(true, 14 * 64 * 1024 + 4096);
}

/* The tail of a huge block, past its first MiBs. */
static int free_huge_tail(bool remote) {
  size_t size = 9 * MIB;
  witnesses_make(64);
  unsigned char *block = malloc(size);
  CHECK(block != NULL);
  pattern_fill(block, size, 9);
  free_on(opaque_pointer(block + 5 * MIB), remote);
  CHECK(pattern_check(block, size, 9));
  free(block);
  check_heap_whole(64);
  witnesses_check_and_free(64);
  return 0;
}
static int case_free_huge_tail(void) {
  return free_huge_tail(false);
}
static int case_free_huge_tail_remote(void) {
  return free_huge_tail(true);
}

/* A block interior, freed by another thread. */
static int case_free_inside_remote(void) {
  witnesses_make(64);
  unsigned char *block = malloc(64);
  CHECK(block != NULL);
  pattern_fill(block, 64, 5);
  free_on(opaque_pointer(block + 16), true);
  CHECK(pattern_check(block, 64, 5));
  free(block);
  check_heap_whole(64);
  witnesses_check_and_free(64);
  return 0;
}

/* The same three for a medium block: of a class page, or of a pool page
 * with SHOAL_MEDIUM_POOL=1 (whose header must check). */
enum { MEDIUM = 3000 };
static int case_free_inside_medium(void) {
  return free_inside(MEDIUM, 48);
}

static int double_free_medium(bool remote) {
  witnesses_make(MEDIUM);
  void *block = malloc(MEDIUM);
  CHECK(block != NULL);
  announce(block);
  free_from(block, remote);
  free_from(opaque_pointer(block), remote);
  check_not_handed_out_twice(MEDIUM);
  witnesses_check_and_free(MEDIUM);
  return 0;
}
static int case_double_free_medium(void) {
  return double_free_medium(false);
}
static int case_double_free_medium_remote(void) {
  return double_free_medium(true);
}

typedef struct misuse_case_s {
  const char *name;
  int (*run)(void);
} misuse_case_t;

static const misuse_case_t cases[] = {
    {"free-stack", case_free_stack},
    {"free-static", case_free_static},
    {"free-inside", case_free_inside_small},
    {"free-inside-large", case_free_inside_large},
    {"double-free", case_double_free},
    {"double-free-later", case_double_free_later},
    {"realloc-inside", case_realloc_inside},
    {"usable-size-inside", case_usable_size_inside},
    {"free-past-blocks", case_free_past_blocks},
    {"free-past-blocks-remote", case_free_past_blocks_remote},
    {"free-never-handed-out", case_free_never_handed_out},
    {"free-never-handed-out-remote", case_free_never_handed_out_remote},
    {"free-segment-start", case_free_segment_start},
    {"free-segment-header", case_free_segment_header},
    {"free-segment-header-remote", case_free_segment_header_remote},
    {"free-unused-slice", case_free_unused_slice},
    {"free-unused-slice-remote", case_free_unused_slice_remote},
    {"free-huge-tail", case_free_huge_tail},
    {"free-huge-tail-remote", case_free_huge_tail_remote},
    {"free-inside-remote", case_free_inside_remote},
    {"free-inside-medium", case_free_inside_medium},
    {"double-free-medium", case_double_free_medium},
    {"double-free-medium-remote", case_double_free_medium_remote},
};

int main(int argc, char **argv) {
  size_t count = sizeof cases / sizeof *cases;
  if (argc != 2) {
    for (size_t i = 0; i < count; i++) printf("%s\n", cases[i].name);
    return 0;
  }
  for (size_t i = 0; i < count; i++) {
    if (strcmp(argv[1], cases[i].name) != 0) continue;
    int status = cases[i].run();
    long abort_on_error = shoal_option_get(SHOAL_OPTION_ABORT_ON_ERROR);
    if (abort_on_error != 0) {
      fprintf(stdout, "misuse %s: survived although abort on error is %ld\n", argv[1],
              abort_on_error);
      return 3;
    }
    return status;
  }
  fprintf(stderr, "misuse: no case named %s\n", argv[1]);
  return 2;
}
