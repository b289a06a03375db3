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

/* Checked mode (SHOAL_CHECK=1): verify the guards of every live block and
 * the fill of every quarantined one now; each fault is reported as at free
 * (then abort, unless SHOAL_ABORT_ON_ERROR=0). Returns the faults found;
 * 0 without checked mode, which keeps nothing to check. */
SHOAL_API size_t shoal_check_heap(void);

/* Give back what can be given now: collect blocks freed by other threads
 * into this thread's heap, and with force also purge every free page of
 * this thread and the shared caches at once instead of after the delay. */
SHOAL_API void shoal_collect(bool force);

/* Statistics: process-wide figures, summed on request from counters each
 * thread keeps in its own heap (no lock, no shared write on the fast paths).
 * SHOAL_STATS=1 prints them at exit as a table on stderr, SHOAL_STATS=json
 * as JSON. A build with -DSHOAL_STATISTICS=OFF keeps no counters: then the
 * figures marked (counted) read 0 and counters_enabled says so.
 *
 * A thread's newest allocations and frees wait in its pages until it takes
 * a slow path, calls shoal_stats() or shoal_collect(), or exits: figures
 * are exact once every thread has done one of these (the caller's own are
 * always current); while threads run they are a snapshot. "Cumulative"
 * figures only grow, from the start of the process.
 *
 * The two lists below generate the structs and the printers (src/core/stats.c, src/diag/report.c):
 * X(name, kind, description), kind COUNT or BYTES. New figures go at the end
 * of a list, so that the layout of the old ones stays as it was; the Pascal
 * unit (pascal/shoalmm.pas, TShoalStats) mirrors the layout and its test
 * compares the sizes. */
#define SHOAL_STATS_FIELDS(X)                                                                      \
  X(live_blocks, COUNT, "blocks handed out and not yet freed (counted)")                           \
  X(live_bytes, BYTES, "sum of their usable sizes (counted)")                                      \
  X(os_reserved_bytes, BYTES, "address space held from the OS")                                    \
  X(os_committed_bytes, BYTES, "of it, memory that may be resident")                               \
  X(os_peak_committed_bytes, BYTES, "the highest os_committed_bytes so far")                       \
  X(segments, COUNT, "1 MiB segments held by heaps (cached ones and huge blocks apart)")           \
  X(pages, COUNT, "pages in use (runs of 64 KiB slices holding blocks)")                           \
  X(huge_blocks, COUNT, "blocks with a mapping of their own")                                      \
  X(heaps, COUNT, "thread heaps ever created (live and adoptable)")                                \
  X(heaps_abandoned, COUNT, "heaps of exited threads awaiting adoption")                           \
  X(remote_frees, COUNT, "frees of blocks another thread owns, cumulative (counted)")              \
  X(purges, COUNT, "ranges given back to the OS, cumulative")                                      \
  X(purged_bytes, BYTES, "bytes given back to the OS, cumulative")                                 \
  X(purge_delay_ms, COUNT,                                                                         \
    "purge delay in force: SHOAL_PURGE_DELAY, longer while purged memory "                         \
    "is soon wanted again")                                                                        \
  X(slow_paths, COUNT, "mallocs that found no block at hand, or large ones, cumulative (counted)") \
  X(allocated_blocks, COUNT, "blocks handed out, cumulative (counted)")                            \
  X(freed_blocks, COUNT, "blocks freed, cumulative (counted)")                                     \
  X(outsized_live_bytes, BYTES, "of live_bytes, in large and huge blocks (counted)")               \
  X(counters_enabled, COUNT, "1: built with SHOAL_STATISTICS; 0: (counted) figures read 0")

/* One row of the per-class table: a size class, or the large or huge blocks. */
#define SHOAL_CLASS_STATS_FIELDS(X)                                                                \
  X(block_size, BYTES, "bytes per block; 0 for large and huge blocks, whose sizes vary")           \
  X(allocated, COUNT, "blocks handed out, cumulative")                                             \
  X(freed, COUNT, "blocks freed, cumulative")                                                      \
  X(live, COUNT, "allocated - freed")

#define SHOAL_STATS_SIZE_CLASSES 72 /* 16 B to 32 KiB; beyond, large and huge blocks */
#define SHOAL_LARGE_MAX          ((size_t)960 * 1024) /* larger blocks are the huge row */

#define SHOAL_STATS_MEMBER_(name, kind, description) size_t name;
typedef struct shoal_class_stats_s {
  SHOAL_CLASS_STATS_FIELDS(SHOAL_STATS_MEMBER_)
} shoal_class_stats_t;

typedef struct shoal_stats_s {
  SHOAL_STATS_FIELDS(SHOAL_STATS_MEMBER_)
  shoal_class_stats_t classes[SHOAL_STATS_SIZE_CLASSES]; /* smallest block size first */
  shoal_class_stats_t large; /* over 32 KiB up to SHOAL_LARGE_MAX: a page of slices each */
  shoal_class_stats_t huge;  /* over SHOAL_LARGE_MAX (960 KiB): a mapping each */
} shoal_stats_t;
#undef SHOAL_STATS_MEMBER_

/* Fill *stats with the figures now. */
SHOAL_API void shoal_stats_get(shoal_stats_t *stats);
/* The same, returned by value (about 2.8 KB). */
SHOAL_API shoal_stats_t shoal_stats(void);

/* Options: each is also read once from the environment as SHOAL_<NAME>. */
typedef enum shoal_option_e {
  SHOAL_OPTION_PURGE_DELAY,      /* ms before an emptied page is purged */
  SHOAL_OPTION_PURGE_LIMIT,      /* bytes of free dirty memory a thread keeps */
  SHOAL_OPTION_HUGE_CACHE,       /* bytes of freed huge blocks kept mapped */
  SHOAL_OPTION_ABORT_ON_ERROR,   /* 1: abort on a bad free; 0: warn, ignore */
  SHOAL_OPTION_VERBOSE,          /* 1: say what shoal decides on stderr */
  SHOAL_OPTION_REALLOC_GROWTH,   /* 1: over-allocate on realloc growth */
  SHOAL_OPTION_LEAKS_SAMPLE,     /* SHOAL_LEAKS: one sample per this many bytes */
  SHOAL_OPTION_CHECK_QUARANTINE, /* SHOAL_CHECK: bytes of freed blocks held back */
  SHOAL_OPTION_HUGE_PAGES,       /* 1: back huge blocks with transparent huge pages */
  SHOAL_OPTION_MEDIUM_POOL,      /* plain blocks from a coalescing pool: 0, 1 (1-32 KiB), 2 */
  SHOAL_OPTION_COUNT
} shoal_option_t;

SHOAL_API long shoal_option_get(shoal_option_t option);
SHOAL_API void shoal_option_set(shoal_option_t option, long value);
SHOAL_API const char *shoal_option_name(shoal_option_t option);

/* ---- reports ----
 * Where the diagnostics' reports go: path, "auto" (<program>_shoal_report.txt
 * beside the executable) or NULL (stderr, the default unless
 * SHOAL_REPORT_FILE says otherwise). With a file, stderr gets a summary of
 * each report (its first lines). False, and nothing changed, once a report
 * has been written or when the path cannot be used. */
SHOAL_API bool shoal_report_file(const char *path);
/* on: track every block allocated from now on and report those still
 * allocated at exit (what SHOAL_LEAKS=all does from the start). Threads
 * already running when it is called go on untracked: call it before
 * starting any. off: no leak report at exit (blocks stay tracked). False
 * when called from inside a block namer (a report is being written). */
SHOAL_API bool shoal_leak_report_at_exit(bool on);
/* Name what a leaked block holds ("TStringList", "AnsiString"): the leak
 * report calls it for each leaked block at exit, block being what malloc
 * returned and size what was asked for. It writes at most capacity bytes,
 * NUL-terminated, and returns the name's length, 0 when it cannot tell.
 * It must read memory the block points to only through shoal_read_memory.
 * The Pascal unit ShoalMM installs one for objects, strings and arrays. */
typedef size_t (*shoal_block_namer_t)(const void *block, size_t size, char *name, size_t capacity);
SHOAL_API void shoal_report_namer(shoal_block_namer_t namer);
/* Copy size bytes at address into out, if the whole range is readable
 * memory of this process; false, out unspecified, when it is not. */
SHOAL_API bool shoal_read_memory(const void *address, void *out, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* SHOAL_H */
