/* Start-up and shut-down safety.
 *
 * Constructors of this program allocate, reallocate and free before main
 * (one with the earliest user priority, 101), a library loaded with dlopen
 * allocates in its constructor under the loader's lock, dlsym/dlerror use
 * the allocator internally, and destructors and atexit handlers allocate
 * after main returns. Every block made before main must be shoal's
 * (shoal_owns) and keep its contents.
 *
 * The same source is built twice: linked against libshoal (test early) and
 * without it, run with LD_PRELOAD=libshoal.so (test early_preload). Hence
 * shoal_owns is looked up with dlsym rather than called by name.
 *
 * usage: early <path to the early_lib module> */
#include <dlfcn.h>
#include <stdbool.h>

#include "testhelper.h"

#define KIB ((size_t)1024)

enum { EARLY_COUNT = 32 };

static void *early_blocks[EARLY_COUNT];
static size_t early_sizes[EARLY_COUNT];
static char *early_grown;
static char *early_zeroed;
static int constructors_run;

static size_t early_size(int i) {
  return (size_t)1 << (i % 20);
} /* 1 B .. 512 KiB */

__attribute__((constructor(101))) static void allocate_before_everything(void) {
  for (int i = 0; i < EARLY_COUNT; i++) {
    early_sizes[i] = early_size(i);
    early_blocks[i] = malloc(early_sizes[i]);
    if (early_blocks[i] != NULL) pattern_fill(early_blocks[i], early_sizes[i], (uint64_t)i);
  }
  /* Free every other one at once: frees before main work too. */
  for (int i = 1; i < EARLY_COUNT; i += 2) {
    free(early_blocks[i]);
    early_blocks[i] = NULL;
  }
  constructors_run++;
}

__attribute__((constructor)) static void allocate_in_constructor(void) {
  early_grown = malloc(16);
  if (early_grown != NULL) {
    memset(early_grown, 'g', 16);
    early_grown = realloc(early_grown, 64 * KIB);
  }
  early_zeroed = calloc(100, 10);
  void *aligned = NULL;
  if (posix_memalign(&aligned, 4096, 5000) == 0) free(aligned);
  constructors_run++;
}

static void allocate_at_exit(void) {
  char *late = malloc(1000);
  if (late == NULL) _exit(5);
  memset(late, 'x', 1000);
  late = realloc(late, 200000);
  free(late);
}

__attribute__((destructor)) static void allocate_in_destructor(void) {
  void *late = calloc(10, 10);
  if (late == NULL) _exit(6);
  free(late);
}

int main(int argc, char **argv) {
  CHECK(argc == 2);
  bool (*owns)(const void *) = (bool (*)(const void *))dlsym(RTLD_DEFAULT, "shoal_owns");
  CHECK_CTX(owns != NULL, "shoal_owns is not in the process: shoal is not loaded");
  CHECK(constructors_run == 2);

  for (int i = 0; i < EARLY_COUNT; i += 2) {
    CHECK_CTX(early_blocks[i] != NULL, "malloc(%zu) before main failed", early_sizes[i]);
    CHECK_CTX(owns(early_blocks[i]), "block %d made before main is not shoal's", i);
    CHECK_CTX(pattern_check(early_blocks[i], early_sizes[i], (uint64_t)i),
              "block %d made before main lost its contents", i);
    free(early_blocks[i]);
  }
  CHECK(early_grown != NULL && owns(early_grown));
  for (int i = 0; i < 16; i++) CHECK(early_grown[i] == 'g');
  free(early_grown);
  CHECK(early_zeroed != NULL && owns(early_zeroed));
  for (int i = 0; i < 1000; i++) CHECK(early_zeroed[i] == 0);
  free(early_zeroed);

  /* dlopen twice: the constructor runs each time, and its block is freed
   * here, in another object than the one that allocated it. */
  for (int round = 0; round < 2; round++) {
    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    CHECK_CTX(library != NULL, "dlopen(%s): %s", argv[1], dlerror());
    char *(*take_block)(void) = (char *(*)(void))dlsym(library, "early_lib_take_block");
    CHECK(take_block != NULL);
    char *block = take_block();
    CHECK_CTX(block != NULL, "the library's constructor could not allocate");
    CHECK(owns(block));
    for (int i = 0; i < 300; i++) CHECK(block[i] == 'L');
    free(block);
    /* A failing lookup makes the loader allocate its error message. */
    CHECK(dlsym(library, "no_such_symbol_anywhere") == NULL);
    const char *error = dlerror();
    CHECK(error != NULL && strstr(error, "no_such_symbol_anywhere") != NULL);
    CHECK(dlclose(library) == 0);
  }
  CHECK(dlsym(RTLD_DEFAULT, "malloc") != NULL);
  CHECK(atexit(allocate_at_exit) == 0);
  printf("early: all checks passed\n");
  return 0;
}
