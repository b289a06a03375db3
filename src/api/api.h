/* api.h — the api layer: the names a program calls, over the core and the
 * diagnostics.
 *
 *   api.c      the shoal_* names, the C library's rules for each call (the
 *              aligned family's arguments, calloc's product), the slow exits
 *              of the fast paths, where a diagnostic may take the call, and
 *              start-up
 *   exports.c  malloc, free, ... and C++'s operator new/delete: the same
 *              calls under the standard names, in an object of their own
 *
 * The fast paths are the core's (core/alloc.h) with this layer's exits: a
 * malloc or free that leaves them comes here, which starts the library on a
 * thread's first call and asks diag_interposes() before the core goes on. */
#ifndef SHOAL_API_H
#define SHOAL_API_H

#include "core/alloc.h"

/* The exits: on a thread's first call, start the library; while a
 * diagnostic interposes, hand it the call; else the core's slow path. */
void *api_alloc_exit(size_t size, shoal_heap_t *heap, caller_t caller);
void api_free_not_local(shoal_page_t *page, void *p, size_t size_hint, caller_t caller);
void api_free_not_small(shoal_page_t *page, void *p, size_t size_hint, caller_t caller,
                        uint64_t place);
void api_free_slow(void *p, size_t size_hint, caller_t caller);

fast_path void *api_malloc(size_t size, caller_t caller) {
  return alloc_fast_then(size, caller, api_alloc_exit);
}

fast_path void api_free(void *p, size_t size_hint, caller_t caller) {
  free_fast_then(p, size_hint, caller, api_free_not_local, api_free_not_small, api_free_slow);
}

/* Behind both names of each function (shoal_calloc and calloc...), told who
 * called. */
void *api_calloc(size_t count, size_t size, caller_t caller);
void *api_realloc(void *p, size_t size, caller_t caller);
void *api_reallocarray(void *p, size_t count, size_t size, caller_t caller);
int api_posix_memalign(void **result, size_t alignment, size_t size, caller_t caller);
void *api_aligned_alloc(size_t alignment, size_t size, caller_t caller);
void *api_memalign(size_t alignment, size_t size, caller_t caller);
void *api_valloc(size_t size, caller_t caller);
void *api_pvalloc(size_t size, caller_t caller);
size_t api_usable_size(const void *p, const char *function, caller_t caller);

/* The reports at exit, for hosts that run no C destructors (api.c). */
void api_exit_reports(void);

#endif /* SHOAL_API_H */
