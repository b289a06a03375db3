/* strappend — seed 003, the "Reallocation" demo of Delphi High Performance
 * (the book chapter on FastMM): growing a string or a list one element at a
 * time. FastMM makes this cheap by over-allocating on growth (small blocks to
 * 2 * size + 32, medium ones by 25 %); an allocator that copies on every
 * realloc turns it quadratic.
 *
 * SIZE is the number of appends (10 million in the book). Four phases:
 *   str_append_s   append one character at a time: realloc(s, length + 2)
 *   str_prealloc_s the book's fix: allocate SIZE + 1 once, then write
 *   list_append_s  an array of pointers grown by one element per realloc
 *                  (the book's "Append array", with pointer-sized elements)
 *   list_grow_s    a list that doubles its capacity when full (TList.Add)
 * Each phase checks every element it wrote.
 *
 * time_s: the sum of the four phases. */
#include "bench.h"

static const long SIZES[3] = {100000, 10000000, 30000000};

static double str_append(long n) {
  double start = bench_now();
  char *s = NULL;
  for (long i = 0; i < n; i++) {
    s = bench_realloc(s, (size_t)i + 2);
    s[i] = '*';
    s[i + 1] = '\0';
  }
  double seconds = bench_now() - start;
  if ((long)strlen(s) != n || memchr(s, 0, (size_t)n) != NULL) bench_fail("appended string lost");
  for (long i = 0; i < n; i++)
    if (s[i] != '*') bench_fail("appended string corrupt at %ld", i);
  free(s);
  return seconds;
}

static double str_prealloc(long n) {
  double start = bench_now();
  char *s = bench_malloc((size_t)n + 1);
  for (long i = 0; i < n; i++) s[i] = '*';
  s[n] = '\0';
  double seconds = bench_now() - start;
  for (long i = 0; i < n; i++)
    if (s[i] != '*') bench_fail("preallocated string corrupt at %ld", i);
  free(s);
  return seconds;
}

/* Element i of a list holds the value list_item(i), which checks can recompute. */
static void *list_item(long i) {
  return (void *)(uintptr_t)(i * 16 + 8);
}

static void list_check(void **list, long n, const char *what) {
  for (long i = 0; i < n; i++)
    if (list[i] != list_item(i)) bench_fail("%s: element %ld lost", what, i);
}

static double list_append(long n) {
  double start = bench_now();
  void **list = NULL;
  for (long i = 0; i < n; i++) {
    list = bench_realloc(list, ((size_t)i + 1) * sizeof *list);
    list[i] = list_item(i);
  }
  double seconds = bench_now() - start;
  list_check(list, n, "list_append");
  free(list);
  return seconds;
}

static double list_grow(long n) {
  double start = bench_now();
  void **list = NULL;
  size_t capacity = 0;
  for (long i = 0; i < n; i++) {
    if ((size_t)i == capacity) {
      capacity = capacity == 0 ? 4 : capacity * 2;
      list = bench_realloc(list, capacity * sizeof *list);
    }
    list[i] = list_item(i);
  }
  double seconds = bench_now() - start;
  list_check(list, n, "list_grow");
  free(list);
  return seconds;
}

int main(int argc, char **argv) {
  bench_args_t args = bench_init(argc, argv, "strappend", SIZES, 1);
  double append = str_append(args.size);
  double prealloc = str_prealloc(args.size);
  double list = list_append(args.size);
  double grow = list_grow(args.size);
  bench_report("time_s=%.4f str_append_s=%.4f str_prealloc_s=%.5f list_append_s=%.4f "
               "list_grow_s=%.4f appends=%ld",
               append + prealloc + list + grow, append, prealloc, list, grow, args.size);
  return 0;
}
