/* A library loaded with dlopen by early.c: its constructor allocates while
 * the loader runs, and the block is freed later by the program. */
#include <stdlib.h>
#include <string.h>

static char *constructor_block;

__attribute__((constructor)) static void early_lib_start(void) {
  constructor_block = malloc(300);
  if (constructor_block != NULL) memset(constructor_block, 'L', 300);
  /* A realloc chain and a free inside the loader's lock, too. */
  char *scratch = malloc(10);
  if (scratch != NULL) scratch = realloc(scratch, 100000);
  free(scratch);
}

__attribute__((destructor)) static void early_lib_stop(void) {
  free(constructor_block);
  free(malloc(50));
}

/* Hands over the constructor's block: the caller frees it. */
char *early_lib_take_block(void) {
  char *block = constructor_block;
  constructor_block = NULL;
  return block;
}
