/* shoal — a scalable memory manager: one heap per thread, lock-free frees
 * from other threads, memory given back to the OS.
 *
 * Linking with -lshoal (or LD_PRELOAD=libshoal.so) replaces malloc, free and
 * the C++ new/delete family in the whole program. This header adds the
 * prefixed twins (usable beside another allocator) and introspection. */
#ifndef SHOAL_H
#define SHOAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHOAL_VERSION_MAJOR 0
#define SHOAL_VERSION_MINOR 1
#define SHOAL_VERSION_PATCH 0

#if defined(__GNUC__)
#define SHOAL_API         __attribute__((visibility("default")))
#define SHOAL_MALLOC_LIKE __attribute__((malloc, warn_unused_result))
#else
#define SHOAL_API
#define SHOAL_MALLOC_LIKE
#endif

/* The standard API under the shoal_ prefix; same contracts as the C library. */
SHOAL_API SHOAL_MALLOC_LIKE void *shoal_malloc(size_t size);
SHOAL_API SHOAL_MALLOC_LIKE void *shoal_calloc(size_t count, size_t size);
SHOAL_API void *shoal_realloc(void *ptr, size_t size);
SHOAL_API void *shoal_reallocarray(void *ptr, size_t count, size_t size);
SHOAL_API void shoal_free(void *ptr);
/* Free with the size the caller allocated (C++ sized delete, C23 free_sized). */
SHOAL_API void shoal_free_sized(void *ptr, size_t size);
SHOAL_API int shoal_posix_memalign(void **result, size_t alignment, size_t size);
SHOAL_API SHOAL_MALLOC_LIKE void *shoal_aligned_alloc(size_t alignment, size_t size);
SHOAL_API SHOAL_MALLOC_LIKE void *shoal_memalign(size_t alignment, size_t size);
SHOAL_API SHOAL_MALLOC_LIKE void *shoal_valloc(size_t size);
SHOAL_API SHOAL_MALLOC_LIKE void *shoal_pvalloc(size_t size);
SHOAL_API size_t shoal_malloc_usable_size(const void *ptr);

/* True when ptr lies in memory shoal manages (any block, live or not).
 * Lets a host (the Pascal unit) route foreign pointers elsewhere. */
SHOAL_API bool shoal_owns(const void *ptr);

/* shoal_owns and malloc_usable_size in one lookup: 0 when ptr is not in
 * shoal's memory (NULL included), the usable size of the block otherwise
 * (a bad pointer inside shoal's memory is reported as by malloc_usable_size). */
SHOAL_API size_t shoal_block_size(const void *ptr);

/* Give back what can be given now: collect blocks freed by other threads
 * into this thread's heap, and with force also purge every free page of
 * this thread and the shared caches at once instead of after the delay. */
SHOAL_API void shoal_collect(bool force);

/* Process-wide figures. Live figures are exact once all threads are quiet;
 * while threads run they are a consistent-enough snapshot. */
typedef struct shoal_stats_s {
  size_t live_blocks;        /* blocks handed out and not yet freed */
  size_t live_bytes;         /* sum of their usable sizes */
  size_t os_reserved_bytes;  /* address space held from the OS */
  size_t os_committed_bytes; /* of it, memory that may be resident */
  size_t os_peak_committed_bytes;
  size_t segments;        /* segments in use (each SHOAL_SEGMENT_SIZE) */
  size_t pages;           /* pages in use */
  size_t huge_blocks;     /* blocks with a mapping of their own */
  size_t heaps;           /* thread heaps ever created (live + adoptable) */
  size_t heaps_abandoned; /* heaps of exited threads awaiting adoption */
  size_t remote_frees;    /* frees of blocks owned by another thread */
  size_t purges;          /* ranges given back to the OS */
  size_t purged_bytes;
} shoal_stats_t;

SHOAL_API void shoal_stats_get(shoal_stats_t *stats);

/* Options: each is also read once from the environment as SHOAL_<NAME>. */
typedef enum shoal_option_e {
  SHOAL_OPTION_PURGE_DELAY,    /* ms before an emptied page is purged */
  SHOAL_OPTION_PURGE_LIMIT,    /* bytes of free dirty memory a thread keeps */
  SHOAL_OPTION_HUGE_CACHE,     /* bytes of freed huge blocks kept mapped */
  SHOAL_OPTION_ABORT_ON_ERROR, /* 1: abort on a bad free; 0: warn, ignore */
  SHOAL_OPTION_VERBOSE,        /* 1: say what shoal decides on stderr */
  SHOAL_OPTION_REALLOC_GROWTH, /* 1: over-allocate on realloc growth */
  SHOAL_OPTION_COUNT
} shoal_option_t;

SHOAL_API long shoal_option_get(shoal_option_t option);
SHOAL_API void shoal_option_set(shoal_option_t option, long value);
SHOAL_API const char *shoal_option_name(shoal_option_t option);

#ifdef __cplusplus
}
#endif
#endif /* SHOAL_H */
