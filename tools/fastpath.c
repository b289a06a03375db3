/* fastpath — malloc+free pairs of one size, for counting the instructions of
 * an allocator's fast paths with callgrind (tools/fastpath-instructions.sh).
 *
 * usage: fastpath ITERATIONS SIZE KEEP
 * KEEP=1 keeps one other block of the size live, so the page never empties
 * (the plain fast paths); KEEP=0 lets every free empty it. */
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  long iterations = atol(argv[1]);
  size_t size = (size_t)atol(argv[2]);
  void *volatile keeper = atoi(argv[3]) ? malloc(size) : NULL;
  for (long i = 0; i < iterations; i++) {
    void *volatile p = malloc(size);
    free(p);
  }
  free(keeper);
  return 0;
}
