/* The code a program runs through shoal on its common paths lies in one
 * segment of the library, and no page of the rest of its code is resident.
 *
 * The kernel maps a file's pages 64 KiB around each fault (fault-around),
 * so a library whose common code lies spread over its text is resident
 * whole: 132 KiB, for some 48 KiB a process runs. The build gathers those
 * functions (cmake/hot-text.ld, written by tools/hot-text.py) into a
 * segment of their own, and the rest, the diagnostics, the reports of bad
 * input and the rarer paths, in another that a common process never
 * touches. This program goes along the common paths (every size range,
 * calloc, realloc across the ranges, the aligned family, threads that free
 * each other's blocks and exit, fork) and then reads, from
 * /proc/self/pagemap, which pages of libshoal's executable segments are
 * present: none may be, but in the segment that holds malloc and in
 * segments of one page (the PLT's, which every call out of the library
 * passes through). A failure names the pages: a function on a common path
 * is missing from cmake/hot-text.ld, and tools/hot-text.py refreshes it.
 *
 * The list holds what the gcc and the clang builds run (they inline and
 * split differently): the test is registered for release builds with
 * either that link with the script (test/CMakeLists.txt). */
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testhelper.h"

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

enum { HANDED_BLOCKS = 4096, ROUNDS = 3, OS_PAGE = 4096 };

static void *handed[HANDED_BLOCKS];

/* Every size range, written through and freed by this thread. */
static void own_blocks(void) {
  static const size_t sizes[] = {1,     8,     24,     64,     100,     128,    200,
                                 512,   1000,  1024,   1500,   4000,    8192,   20000,
                                 32768, 40000, 100000, 500000, 2 * MIB, 5 * MIB};
  enum { COUNT = sizeof sizes / sizeof sizes[0] };
  void *blocks[COUNT];
  for (int round = 0; round < 200; round++) {
    for (int i = 0; i < COUNT; i++) {
      blocks[i] = malloc(sizes[i]);
      CHECK(blocks[i] != NULL);
      memset(blocks[i], i + 1, sizes[i]);
    }
    for (int i = 0; i < COUNT; i++) {
      CHECK(((unsigned char *)blocks[i])[sizes[i] - 1] == (unsigned char)(i + 1));
      free(blocks[i]);
    }
  }
  char *zeroed = calloc(1000, 8);
  CHECK(zeroed != NULL && zeroed[7999] == 0);
  free(zeroed);
  /* realloc from a small block up through every range and back */
  char *grown = malloc(16);
  CHECK(grown != NULL);
  memset(grown, 'g', 16);
  size_t size = 16;
  for (; size < 8 * MIB; size *= 3) {
    grown = realloc(grown, size * 3);
    CHECK(grown != NULL && grown[size - 1] == 'g');
    memset(grown, 'g', size * 3);
  }
  grown = realloc(grown, 100);
  CHECK(grown != NULL && grown[99] == 'g');
  free(grown);
  void *aligned = NULL;
  CHECK(posix_memalign(&aligned, 256, 3000) == 0 && (uintptr_t)aligned % 256 == 0);
  CHECK(malloc_usable_size(aligned) >= 3000);
  free(aligned);
  aligned = aligned_alloc(64, 640);
  CHECK(aligned != NULL && (uintptr_t)aligned % 64 == 0);
  free(aligned);
  free(NULL);
}

static void *make_blocks(void *arg) {
  (void)arg;
  for (int i = 0; i < HANDED_BLOCKS; i++) {
    handed[i] = malloc(16 + (size_t)(i % 64) * 40);
    CHECK(handed[i] != NULL);
    memset(handed[i], 'h', 16);
  }
  return NULL;
}

static void *free_blocks(void *arg) {
  (void)arg;
  for (int i = 0; i < HANDED_BLOCKS; i++) {
    CHECK(((char *)handed[i])[15] == 'h');
    free(handed[i]);
  }
  own_blocks();
  return NULL;
}

/* A thread allocates, another frees what it made, both exit; the next
 * round's threads adopt their heaps. */
static void threads_free_each_others_blocks(void) {
  for (int round = 0; round < ROUNDS; round++) {
    pthread_t maker, freer;
    CHECK(pthread_create(&maker, NULL, make_blocks, NULL) == 0);
    CHECK(pthread_join(maker, NULL) == 0);
    CHECK(pthread_create(&freer, NULL, free_blocks, NULL) == 0);
    CHECK(pthread_join(freer, NULL) == 0);
  }
}

static void fork_once(void) {
  pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    void *p = malloc(100);
    free(p);
    _exit(p != NULL ? 0 : 1);
  }
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

typedef struct text_census {
  uintptr_t malloc_address;
  int library_found;
  int segments;
  long cold_resident; /* pages present in segments that must have none */
} text_census_t;

static int page_present(int pagemap, uintptr_t address) {
  uint64_t entry = 0;
  off_t offset = (off_t)(address / OS_PAGE * sizeof entry);
  CHECK(pread(pagemap, &entry, sizeof entry, offset) == (ssize_t)sizeof entry);
  return (int)(entry >> 63);
}

static int count_segment(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  text_census_t *census = arg;
  if (info->dlpi_name == NULL || strstr(info->dlpi_name, "libshoal") == NULL) return 0;
  census->library_found = 1;
  int pagemap = open("/proc/self/pagemap", O_RDONLY);
  CHECK(pagemap >= 0);
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *segment = &info->dlpi_phdr[i];
    if (segment->p_type != PT_LOAD || (segment->p_flags & PF_X) == 0) continue;
    uintptr_t start = (info->dlpi_addr + segment->p_vaddr) & ~(uintptr_t)(OS_PAGE - 1);
    uintptr_t end = info->dlpi_addr + segment->p_vaddr + segment->p_memsz;
    census->segments++;
    int holds_malloc = census->malloc_address >= start && census->malloc_address < end;
    if (holds_malloc || end - start <= OS_PAGE) continue;
    for (uintptr_t page = start; page < end; page += OS_PAGE) {
      if (!page_present(pagemap, page)) continue;
      census->cold_resident++;
      fprintf(stderr, "resident_text: libshoal's page at offset 0x%lx is resident\n",
              (unsigned long)(page - info->dlpi_addr));
    }
  }
  close(pagemap);
  return 0;
}

/* With the argument `exercise`, only the paths: tools/hot-text.py runs it
 * so under callgrind, where the pages present are valgrind's. */
int main(int argc, char **argv) {
  own_blocks();
  threads_free_each_others_blocks();
  fork_once();
  own_blocks();
  if (argc > 1 && strcmp(argv[1], "exercise") == 0) return 0;

  void *(*shoal_malloc)(size_t) = malloc;
  Dl_info where;
  CHECK(dladdr((void *)(uintptr_t)shoal_malloc, &where) != 0 && where.dli_fname != NULL);
  CHECK_CTX(strstr(where.dli_fname, "libshoal") != NULL, "malloc is %s's, not libshoal's",
            where.dli_fname);
  text_census_t census = {.malloc_address = (uintptr_t)shoal_malloc};
  dl_iterate_phdr(count_segment, &census);
  CHECK(census.library_found);
  /* .init and .plt, the common paths, the rest */
  CHECK_CTX(census.segments >= 3,
            "libshoal has %d executable segments: not linked with "
            "cmake/hot-text.ld",
            census.segments);
  CHECK_CTX(census.cold_resident == 0,
            "%ld pages of libshoal's rarely run code are resident: a function on a common "
            "path is missing from cmake/hot-text.ld (tools/hot-text.py writes it anew)",
            census.cold_resident);
  printf("resident_text: OK\n");
  return 0;
}
