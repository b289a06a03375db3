/* Tells whether shoal is the allocator of this process: built without
 * linking libshoal, it finds shoal_owns only when LD_PRELOAD brought it in.
 * Prints "shoal in use: yes" and exits 0, or says why not and exits 1. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  bool (*owns)(const void *) = (bool (*)(const void *))dlsym(RTLD_DEFAULT, "shoal_owns");
  if (owns == NULL) {
    printf("shoal in use: no (shoal_owns not found)\n");
    return 1;
  }
  void *block = malloc(8);
  bool owned = owns(block);
  free(block);
  printf("shoal in use: %s\n", owned ? "yes" : "no (malloc is not shoal's)");
  return owned ? 0 : 1;
}
