/* Helpers shared by the black-box tests of shoal.
 *
 * CHECK(expr) stops the test at the first failure with file:line and the
 * expression, so a failing ctest run names the broken promise directly.
 * The rest are the small tools every test needs: the SHOAL_TEST_SCALE factor
 * (sanitizer runs shrink the work, not the checks), resident memory read from
 * /proc/self/statm (the working set on Windows), a fill/verify pattern that proves a block's bytes
 * belong to it alone, a deterministic random generator, and opaque values that keep the compiler
 * from folding allocator calls whose outcome a test asserts. C and C++ (cxx.cpp) both include it.
 */
#ifndef SHOAL_TESTHELPER_H
#define SHOAL_TESTHELPER_H

/* Included first, it brings the POSIX and GNU declarations (clock_gettime,
 * nanosleep, memalign, ...) to C11 builds; the CMake targets define it too. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if !defined(_WIN32)
#include <sys/mman.h>
#endif

#if defined(_WIN32)
/* Win64 builds (under Wine): the program links libshoal.a, whose standard
 * names the C runtime's headers do not all declare; resident memory is the
 * process's working set. */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <psapi.h>
#ifdef __cplusplus
extern "C" {
#endif
int posix_memalign(void **result, size_t alignment, size_t size);
void *memalign(size_t alignment, size_t size);
void *valloc(size_t size);
void *pvalloc(size_t size);
void *aligned_alloc(size_t alignment, size_t size);
void *reallocarray(void *block, size_t count, size_t size);
size_t malloc_usable_size(void *block);
#ifdef __cplusplus
}
#endif
#endif

/* True in builds under TSan or ASan. Their runtimes keep shadow memory and
 * per-thread records of their own, so resident-memory bounds that hold for
 * shoal alone do not hold there; such tests check shoal's own committed
 * figure instead. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define TEST_SHADOW_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define TEST_SHADOW_SANITIZER 1
#endif
#endif
#ifndef TEST_SHADOW_SANITIZER
#define TEST_SHADOW_SANITIZER 0
#endif

/* Blocks the thread library itself may hold through malloc for each thread
 * a test starts: none with glibc (thread records live in the thread's
 * stack mapping); winpthreads, statically linked into the Win64 tests,
 * mallocs a record per thread (in shoal's heap, as malloc is shoal's there)
 * and keeps some after the join for reuse. Live-block counts allow this. */
#if defined(_WIN32)
#define THREAD_LIBRARY_BLOCKS_PER_THREAD 1
#else
#define THREAD_LIBRARY_BLOCKS_PER_THREAD 0
#endif

/* _exit, not exit: a failing check may sit in a worker thread while others
 * still allocate, and atexit handlers in that state only add confusion. */
__attribute__((noreturn)) static inline void check_failed(const char *file, int line,
                                                          const char *expr) {
  fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, expr);
  fflush(stdout);
  _exit(1);
}

#define CHECK(expr)                                                                                \
  do {                                                                                             \
    if (!(expr)) check_failed(__FILE__, __LINE__, #expr);                                          \
  } while (0)

/* CHECK with a printf-style line of context (the size, the alignment, ...)
 * printed before the failure, for checks inside loops. */
#define CHECK_CTX(expr, ...)                                                                       \
  do {                                                                                             \
    if (!(expr)) {                                                                                 \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      check_failed(__FILE__, __LINE__, #expr);                                                     \
    }                                                                                              \
  } while (0)

/* The work factor from SHOAL_TEST_SCALE (default 1.0): sanitizer builds run
 * the same tests with 0.2 or 0.1 to stay within the time budget. */
static inline double test_scale(void) {
  const char *text = getenv("SHOAL_TEST_SCALE");
  if (text == NULL || *text == '\0') return 1.0;
  double scale = strtod(text, NULL);
  return scale > 0.0 ? scale : 1.0;
}

/* count * scale, but never below minimum: a scaled-down test must still
 * exercise what it is about. */
static inline size_t scaled_count(size_t count, size_t minimum) {
  double value = (double)count * test_scale();
  size_t result = (size_t)value;
  return result < minimum ? minimum : result;
}

/* Bytes resident now, from /proc/self/statm (second field, in pages).
 * Read with open/read so that measuring allocates nothing. */
#if defined(_WIN32)
static inline size_t rss_bytes(void) {
  PROCESS_MEMORY_COUNTERS counters;
  if (!K32GetProcessMemoryInfo(GetCurrentProcess(), &counters, sizeof counters)) return 0;
  return (size_t)counters.WorkingSetSize;
}
#else
static inline size_t rss_bytes(void) {
  char text[128];
  int fd = open("/proc/self/statm", O_RDONLY);
  if (fd < 0) return 0;
  ssize_t length = read(fd, text, sizeof text - 1);
  close(fd);
  if (length <= 0) return 0;
  text[length] = '\0';
  unsigned long total_pages = 0, resident_pages = 0;
  if (sscanf(text, "%lu %lu", &total_pages, &resident_pages) != 2) return 0;
  return (size_t)resident_pages * (size_t)sysconf(_SC_PAGESIZE);
}
#endif

/* The OS page, and whole pages mapped and unmapped without shoal: memory
 * that is no block of shoal's. */
#if defined(_WIN32)
static inline size_t os_page_bytes(void) {
  SYSTEM_INFO info;
  GetSystemInfo(&info);
  return (size_t)info.dwPageSize;
}
static inline void *pages_map(size_t size) {
  return VirtualAlloc(NULL, size, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
}
static inline void pages_unmap(void *pages, size_t size) {
  (void)size;
  VirtualFree(pages, 0, MEM_RELEASE);
}
/* Pages at exactly `at` (a multiple of the allocation granularity), or NULL
 * where something is there already. */
static inline void *pages_map_at(void *at, size_t size) {
  return VirtualAlloc(at, size, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
}
static inline size_t pages_map_granularity(void) {
  SYSTEM_INFO info;
  GetSystemInfo(&info);
  return (size_t)info.dwAllocationGranularity;
}
#else
static inline size_t os_page_bytes(void) {
  return (size_t)sysconf(_SC_PAGESIZE);
}
static inline void *pages_map(size_t size) {
  void *pages = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return pages == MAP_FAILED ? NULL : pages;
}
static inline void pages_unmap(void *pages, size_t size) {
  munmap(pages, size);
}
static inline void *pages_map_at(void *at, size_t size) {
  void *pages = mmap(at, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (pages != MAP_FAILED && pages != at) { /* a kernel older than MAP_FIXED_NOREPLACE */
    munmap(pages, size);
    return NULL;
  }
  return pages == MAP_FAILED ? NULL : pages;
}
static inline size_t pages_map_granularity(void) {
  return os_page_bytes();
}
#endif

static inline double now_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

static inline void sleep_ms(long milliseconds) {
  struct timespec pause = {milliseconds / 1000, (milliseconds % 1000) * 1000000L};
  while (nanosleep(&pause, &pause) != 0) {
  }
}

/* splitmix64: one step both seeds and mixes, so ids 1, 2, 3 give unrelated
 * patterns and unrelated random streams. */
static inline uint64_t mix64(uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

typedef struct test_rng_s {
  uint64_t state;
} test_rng_t;

static inline uint64_t rng_next(test_rng_t *rng) {
  rng->state += 0x9E3779B97F4A7C15ull;
  return mix64(rng->state);
}

/* Uniform in [low, high]. */
static inline size_t rng_range(test_rng_t *rng, size_t low, size_t high) {
  return low + (size_t)(rng_next(rng) % (uint64_t)(high - low + 1));
}

/* The pattern of a block: word k holds mix64(seed) ^ k * golden, so two
 * blocks with different seeds differ at every word and a block shifted by a
 * word does not match itself. Words go through memcpy because blocks of odd
 * sizes need not be 8-byte aligned at their tail; __builtin_memcpy because
 * the tests build with -fno-builtin, which would make each one a call. */
static inline void pattern_fill(void *block, size_t size, uint64_t seed) {
  unsigned char *bytes = (unsigned char *)block;
  uint64_t base = mix64(seed);
  size_t words = size / 8;
  for (size_t k = 0; k < words; k++) {
    uint64_t word = base ^ (k * 0x9E3779B97F4A7C15ull);
    __builtin_memcpy(bytes + k * 8, &word, 8);
  }
  uint64_t last = base ^ (words * 0x9E3779B97F4A7C15ull);
  __builtin_memcpy(bytes + words * 8, &last, size % 8);
}

/* True when block still holds pattern_fill(block, size, seed). */
static inline int pattern_check(const void *block, size_t size, uint64_t seed) {
  const unsigned char *bytes = (const unsigned char *)block;
  uint64_t base = mix64(seed);
  size_t words = size / 8;
  for (size_t k = 0; k < words; k++) {
    uint64_t expected = base ^ (k * 0x9E3779B97F4A7C15ull), found;
    __builtin_memcpy(&found, bytes + k * 8, 8);
    if (found != expected) return 0;
  }
  uint64_t last = base ^ (words * 0x9E3779B97F4A7C15ull);
  return __builtin_memcmp(bytes + words * 8, &last, size % 8) == 0;
}

/* The pattern over a whole block, sparse for big ones: blocks over 256 KiB
 * get it in their first and last page and in 64 bytes of every 64 KiB
 * between. Every byte of a big block is known writable from the dense
 * tests of smaller ones and from its mapping being whole pages; the samples
 * catch overlap and lost memory, and thousands of multi-megabyte blocks
 * stay affordable (a write per page would fault in every page). */
#define PATTERN_FULL_LIMIT    ((size_t)256 * 1024)
#define PATTERN_SAMPLE_STRIDE ((size_t)64 * 1024)

static inline void block_fill(void *block, size_t size, uint64_t seed) {
  unsigned char *bytes = (unsigned char *)block;
  if (size <= PATTERN_FULL_LIMIT) {
    pattern_fill(bytes, size, seed);
    return;
  }
  pattern_fill(bytes, 4096, seed);
  for (size_t offset = PATTERN_SAMPLE_STRIDE; offset + 64 <= size - 4096;
       offset += PATTERN_SAMPLE_STRIDE)
    pattern_fill(bytes + offset, 64, seed + offset);
  pattern_fill(bytes + size - 4096, 4096, seed + 1);
}

static inline int block_check(const void *block, size_t size, uint64_t seed) {
  const unsigned char *bytes = (const unsigned char *)block;
  if (size <= PATTERN_FULL_LIMIT) return pattern_check(bytes, size, seed);
  if (!pattern_check(bytes, 4096, seed)) return 0;
  for (size_t offset = PATTERN_SAMPLE_STRIDE; offset + 64 <= size - 4096;
       offset += PATTERN_SAMPLE_STRIDE)
    if (!pattern_check(bytes + offset, 64, seed + offset)) return 0;
  return pattern_check(bytes + size - 4096, 4096, seed + 1);
}

/* Values the optimiser cannot see through: malloc(SIZE_MAX) with a constant
 * would draw warnings, and calls with known outcomes may be folded away. */
static inline size_t opaque_size(size_t value) {
  volatile size_t hidden = value;
  return hidden;
}

static inline void *opaque_pointer(void *pointer) {
  void *volatile hidden = pointer;
  return hidden;
}

static inline int is_aligned(const void *pointer, size_t alignment) {
  return ((uintptr_t)pointer & (alignment - 1)) == 0;
}

/* After an ignored double free the block is free once: `count` (at most
 * 128) allocations of `size` never return one block twice. */
static inline void check_handed_out_once(void *(*allocate)(size_t), void (*release)(void *),
                                         size_t size, int count) {
  void *blocks[128];
  CHECK(count <= 128);
  for (int i = 0; i < count; i++) {
    blocks[i] = allocate(size);
    CHECK(blocks[i] != NULL);
    for (int j = 0; j < i; j++)
      CHECK_CTX(blocks[j] != blocks[i], "block %p was handed out twice", blocks[i]);
  }
  for (int i = 0; i < count; i++) release(blocks[i]);
}

#endif /* SHOAL_TESTHELPER_H */
