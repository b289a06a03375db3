/* api.c — the shoal_* API, the C library's rules for each call, the slow
 * exits of the fast paths, and start-up.
 *
 * Every call the program makes comes in through this layer (exports.c for
 * the standard names). A thread's first call starts the library: the
 * core's process_init, with the diagnostics' start inside it. After that a
 * call goes to the core, unless a diagnostic interposes: it then keeps the
 * thread's heap aside (thread_heap is heap_empty), so the call reaches one
 * of the places below that ask diag_takes() and hands it to diag/. Neither
 * fast path tests anything for that: the test sits where they already exit.
 *
 * Bad pointers are caught by the core where its layout makes it cheap: a
 * pointer not in any segment, a pointer that is not a block start, a block
 * whose key word says it is already free. Each gets one line on stderr
 * naming the kind and the address, then abort (SHOAL_ABORT_ON_ERROR=0: the
 * call is ignored). */
#include "api/api.h"

#include <errno.h>
#include <string.h>

#include "diag/diag.h"

/* ---- start-up and the diagnostics' way in ---- */

/* The thread holds no heap: its first call (start the library, once per
 * process), or a diagnostic keeps the heap aside. True when the
 * diagnostics take this call. */
static inline bool diag_takes(void) {
  if (likely(thread_heap != &heap_empty)) return false;
  process_init(diag_start);
  return diag_interposes();
}

/* After the library is up, outside any allocation: what must not run
 * inside one (dlopen of the unwinder) runs here. */
__attribute__((constructor)) static void api_constructor(void) {
  process_init(diag_start);
  diag_load_unwinder();
}

/* The reports at exit (SHOAL_STATS, SHOAL_LEAKS, SHOAL_CONTENTION,
 * SHOAL_TRACE) for a program that runs no C destructors: Free Pascal's,
 * where ShoalMM calls this at its finalization, the last of the program's
 * units. Each report is made once, whoever asks first. */
void api_exit_reports(void) {
  stats_report_at_exit();
  diag_at_exit();
}

/* ---- the slow exits of the fast paths ---- */

static slow_path void *alloc_first(size_t size, caller_t caller) {
  process_init(diag_start);
  if (diag_interposes()) return diag_malloc(size, 0, caller);
  return heap_malloc_slow(&heap_empty, size);
}

/* As the core's alloc_generic, with a thread's first call (and every call
 * while a diagnostic interposes) taken apart. */
out_of_line void *api_alloc_exit(size_t size, shoal_heap_t *heap, caller_t caller) {
  if (caller == OWN_CALLER) caller = CALLER();
  void *p = alloc_slow_pop(heap, size, true);
  if (likely(p != NULL)) return p;
  if (unlikely(heap == &heap_empty)) return alloc_first(size, caller);
  return heap_malloc_slow(heap, size);
}

/* A free of another heap's block (or, while a diagnostic interposes, of
 * any block): the diagnostics' when they take it, else the core's. */
void api_free_not_local(shoal_page_t *page, void *p, size_t size_hint, caller_t caller) {
  if (caller == OWN_CALLER) caller = CALLER();
  if (unlikely(thread_heap == &heap_empty) && diag_interposes()) {
    diag_free(p, size_hint, caller);
    return;
  }
  free_not_local(page, p, size_hint, caller);
}

/* A block of this thread's segments that the fast path did not free: a
 * medium or large one of its own pages (the core's), else the slow path. */
void api_free_not_small(shoal_page_t *page, void *p, size_t size_hint, caller_t caller,
                        uint64_t place) {
  if (likely(free_own_larger(page, p, size_hint, place))) return;
  if (caller == OWN_CALLER) caller = CALLER();
  api_free_slow(p, size_hint, caller);
}

slow_path void api_free_slow(void *p, size_t size_hint, caller_t caller) {
  if (p == NULL) return;
  if (caller == OWN_CALLER) caller = CALLER();
  if (thread_heap == &heap_empty && diag_interposes()) {
    diag_free(p, size_hint, caller);
    return;
  }
  free_slow(p, size_hint, caller);
}

exported void *shoal_malloc(size_t size) {
  return api_malloc(size, OWN_CALLER);
}
exported void shoal_free(void *p) {
  api_free(p, 0, OWN_CALLER);
}
exported void shoal_free_sized(void *p, size_t size) {
  api_free(p, size, OWN_CALLER);
}

/* ---- calloc, realloc ---- */

void *api_calloc(size_t count, size_t size, caller_t caller) {
  size_t total;
  if (unlikely(__builtin_mul_overflow(count, size, &total))) {
    errno = ENOMEM;
    return NULL;
  }
  if (unlikely(diag_takes())) {
    void *p = diag_malloc(total, 0, caller);
    return p == NULL ? NULL : memset(p, 0, total);
  }
  return core_malloc_zeroed(total, caller);
}

void *api_realloc(void *p, size_t size, caller_t caller) {
  if (unlikely(diag_takes())) return diag_realloc(p, size, caller);
  return core_realloc(p, size, caller);
}

void *api_reallocarray(void *p, size_t count, size_t size, caller_t caller) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return api_realloc(p, total, caller);
}

exported void *shoal_calloc(size_t count, size_t size) {
  return api_calloc(count, size, CALLER());
}
exported void *shoal_realloc(void *p, size_t size) {
  return api_realloc(p, size, CALLER());
}
exported void *shoal_reallocarray(void *p, size_t count, size_t size) {
  return api_reallocarray(p, count, size, CALLER());
}

/* ---- aligned: each function's own rules, then one way down ---- */

static void *alloc_aligned(size_t alignment, size_t size, caller_t caller) {
  if (alignment <= WORD_SIZE) return api_malloc(size, caller);
  if (unlikely(diag_takes())) return diag_malloc(size, alignment, caller);
  return core_alloc_aligned(alignment, size, caller);
}

static bool is_power_of_two(size_t x) {
  return x != 0 && (x & (x - 1)) == 0;
}

int api_posix_memalign(void **result, size_t alignment, size_t size, caller_t caller) {
  if (!is_power_of_two(alignment) || alignment % sizeof(void *) != 0) return EINVAL;
  void *p = alloc_aligned(alignment, size, caller);
  if (p == NULL) return ENOMEM; /* and errno ENOMEM, as glibc's: programs read either */
  *result = p;
  return 0;
}

void *api_aligned_alloc(size_t alignment, size_t size, caller_t caller) {
  if (!is_power_of_two(alignment)) {
    errno = EINVAL;
    return NULL;
  }
  return alloc_aligned(alignment, size, caller);
}

void *api_memalign(size_t alignment, size_t size, caller_t caller) {
  if (alignment <= WORD_SIZE) return api_malloc(size, caller);
  if (!is_power_of_two(alignment)) { /* glibc rounds up to a power of two */
    /* Beyond 2^63 there is no power to round up to (EINVAL); up to it,
     * the core says ENOMEM, as glibc does. */
    if (alignment > ((size_t)1 << 63)) {
      errno = EINVAL;
      return NULL;
    }
    alignment = (size_t)1 << (64 - __builtin_clzll(alignment));
  }
  return alloc_aligned(alignment, size, caller);
}

void *api_valloc(size_t size, caller_t caller) {
  return alloc_aligned(os_page_size(), size, caller);
}

void *api_pvalloc(size_t size, caller_t caller) {
  size_t page = os_page_size();
  size_t rounded = (size + page - 1) & ~(page - 1);
  if (rounded < size) {
    errno = ENOMEM;
    return NULL;
  }
  return alloc_aligned(page, rounded == 0 ? page : rounded, caller);
}

exported int shoal_posix_memalign(void **result, size_t alignment, size_t size) {
  return api_posix_memalign(result, alignment, size, CALLER());
}
exported void *shoal_aligned_alloc(size_t alignment, size_t size) {
  return api_aligned_alloc(alignment, size, CALLER());
}
exported void *shoal_memalign(size_t alignment, size_t size) {
  return api_memalign(alignment, size, CALLER());
}
exported void *shoal_valloc(size_t size) {
  return api_valloc(size, CALLER());
}
exported void *shoal_pvalloc(size_t size) {
  return api_pvalloc(size, CALLER());
}

/* ---- sizes and ownership ---- */

size_t api_usable_size(const void *p, const char *function, caller_t caller) {
  if (unlikely(diag_takes())) return diag_usable_size(p, function, caller);
  return core_usable_size(p, function);
}

exported size_t shoal_malloc_usable_size(const void *p) {
  return api_usable_size(p, "malloc_usable_size", CALLER());
}

exported bool shoal_owns(const void *p) {
  return segment_find(p) != NULL;
}

exported size_t shoal_block_size(const void *p) {
  size_t size = core_class_block_size(p);
  if (likely(size != 0)) return size;
  if (segment_find(p) == NULL) return 0;
  return api_usable_size(p, "shoal_block_size", CALLER());
}

/* ---- statistics and collection ---- */

exported void shoal_stats_get(shoal_stats_t *stats) {
  stats_fill(stats);
}

exported shoal_stats_t shoal_stats(void) {
  shoal_stats_t stats;
  stats_fill(&stats);
  return stats;
}

exported void shoal_collect(bool force) {
  if (force) diag_collect();
  stats_collect(force);
}

/* ---- reports ---- */

exported bool shoal_report_file(const char *path) {
  process_init(diag_start);
  return output_set_file(path);
}

exported bool shoal_leak_report_at_exit(bool on) {
  process_init(diag_start);
  return diag_leaks_report_at_exit(on);
}

exported void shoal_report_namer(shoal_block_namer_t namer) {
  process_init(diag_start);
  leaks_set_namer(namer);
}

exported bool shoal_read_memory(const void *address, void *out, size_t size) {
  return os_read_memory(address, out, size);
}
