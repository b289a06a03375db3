/* Deliberate misuse, one case per run (argv[1] names it); misuse.sh runs
 * each case and checks how shoal reacts.
 *
 * Each case prints "address 0x..." (the bad pointer, which shoal's message
 * must name) and flushes, then commits its bug. With SHOAL_ABORT_ON_ERROR
 * unset shoal must print one line and abort, so reaching the end of a case
 * is a failure (exit 3). With SHOAL_ABORT_ON_ERROR=0 shoal must ignore the
 * bad call: the case then checks nothing changed (its other blocks keep
 * their contents, a double-freed block is not handed out twice, a bad
 * realloc returns NULL) and exits 0. */
#include <malloc.h>
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
  printf("address %p\n", bad_pointer);
  fflush(stdout);
}

/* After an ignored double free of a block of `size` bytes the block must be
 * free exactly once: two allocations of that size never return it twice. */
static void check_not_handed_out_twice(size_t size) {
  enum { COUNT = 64 };
  void *blocks[COUNT];
  for (int i = 0; i < COUNT; i++) {
    blocks[i] = malloc(size);
    CHECK(blocks[i] != NULL);
    for (int j = 0; j < i; j++)
      CHECK_CTX(blocks[j] != blocks[i], "block %p was handed out twice", blocks[i]);
  }
  for (int i = 0; i < COUNT; i++) free(blocks[i]);
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
  free(block);
  announce(block);
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
  for (int i = 0; i < NEIGHBOURS; i++) neighbours[i] = malloc(48);
  free(block);
  for (int i = 0; i < NEIGHBOURS; i++) free(neighbours[i]);
  void *other = malloc(48); /* takes one block off the free list */
  announce(block);
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

typedef struct misuse_case_s {
  const char *name;
  int (*run)(void);
} misuse_case_t;

static const misuse_case_t cases[] = {
    {"free-stack", case_free_stack},         {"free-static", case_free_static},
    {"free-inside", case_free_inside_small}, {"free-inside-large", case_free_inside_large},
    {"double-free", case_double_free},       {"double-free-later", case_double_free_later},
    {"realloc-inside", case_realloc_inside}, {"usable-size-inside", case_usable_size_inside},
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
