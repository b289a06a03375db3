/* Compiled by gcc under LD_PRELOAD=libshoal.so in programs.sh, then run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int compare(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(void) {
  enum { COUNT = 5000 };
  char **names = malloc(COUNT * sizeof *names);
  if (names == NULL) return 1;
  for (int i = 0; i < COUNT; i++) {
    names[i] = malloc(32);
    if (names[i] == NULL) return 1;
    snprintf(names[i], 32, "name-%d", (i * 7919) % COUNT);
  }
  qsort(names, COUNT, sizeof *names, compare);
  printf("first %s last %s\n", names[0], names[COUNT - 1]);
  for (int i = 0; i < COUNT; i++) free(names[i]);
  free(names);
  return 0;
}
