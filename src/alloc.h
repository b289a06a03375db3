/* alloc.h — the two fast paths, inline so that every exported name (alloc.c,
 * exports.c) is the whole path with no extra call.
 *
 * malloc: one TLS load, one table load (direct_page), a pop.
 * free:   a segment-map byte, a mask, the page descriptor (one add), a
 *         multiply that checks the pointer is a block start (and, through a
 *         zero divisor, that the page is not parked), the double-free key,
 *         and a push on the page's free list when this thread owns it.
 *         In a loop that frees at random, every instruction here narrows
 *         how many of the program's cache misses the core overlaps: going
 *         from 42 to 35 made smallobj's random phase 15 % faster.
 * Each has one unlikely exit to a noinline function.
 *
 * `caller` names the call site for the diagnostics: the return address of
 * the exported function (CALLER()), or OWN_CALLER where the exported
 * function tail-calls the slow exit (malloc, free, new, delete), which then
 * reads its own return address, the program's. Passing CALLER() would cost
 * a load on the fast path (compilers hoist it); OWN_CALLER costs nothing.
 * Without tail calls (-O0), such sites name shoal's exported function,
 * and the unwound frames after it the program's. */
#ifndef SHOAL_ALLOC_H
#define SHOAL_ALLOC_H

#include "internal.h"

void *alloc_generic(shoal_heap_t *heap, size_t size, caller_t caller);
void free_slow(void *p, size_t size_hint, caller_t caller);
void free_not_local(shoal_page_t *page, void *p, size_t size_hint, caller_t caller);
void heap_page_freed(shoal_heap_t *heap, shoal_page_t *page);

/* The API behind both names of each function (shoal_calloc and calloc...),
 * told who called. */
void *api_calloc(size_t count, size_t size, caller_t caller);
void *api_realloc(void *p, size_t size, caller_t caller);
void *api_reallocarray(void *p, size_t count, size_t size, caller_t caller);
int api_posix_memalign(void **result, size_t alignment, size_t size, caller_t caller);
void *api_aligned_alloc(size_t alignment, size_t size, caller_t caller);
void *api_memalign(size_t alignment, size_t size, caller_t caller);
void *api_valloc(size_t size, caller_t caller);
void *api_pvalloc(size_t size, caller_t caller);
size_t api_usable_size(const void *p, const char *function, caller_t caller);
void *block_containing(const void *p, size_t *usable);

typedef void *(*alloc_exit_t)(shoal_heap_t *heap, size_t size, caller_t caller);

/* The fast path with the slow exit of one's choice (operator new's handles
 * failure), called last so that it can be a tail call. */
fast_path void *alloc_fast_then(size_t size, caller_t caller, alloc_exit_t slow) {
  shoal_heap_t *heap = thread_heap;
  if (likely(size <= DIRECT_MAX)) {
    shoal_page_t *page = heap->direct_page[(size + WORD_SIZE - 1) / WORD_SIZE];
    if (likely(page->free != NULL)) return page_pop(heap, page);
  }
  return slow(heap, size, caller);
}

fast_path void *alloc_fast(size_t size, caller_t caller) {
  return alloc_fast_then(size, caller, alloc_generic);
}

/* size_hint: the size the caller says it allocated (sized delete), or 0.
 * Ownership is read from the segment header, which stays in cache; a
 * remote free never touches the owner's line of the page. */
fast_path void free_fast(void *p, size_t size_hint, caller_t caller) {
  if (unlikely(!segment_map_is_head(p))) return free_slow(p, size_hint, caller);
  shoal_segment_t *segment = segment_of(p);
  shoal_page_t *page = segment_page_of(segment, p);
  shoal_heap_t *heap = thread_heap;
  if (unlikely(segment->heap != heap)) return free_not_local(page, p, size_hint, caller);
  shoal_block_t *block = p;
  uintptr_t key = heap->free_key; /* once: the stores below could alias it */
  /* A parked or unused page has no free_limit: the block test sends it on. */
  if (unlikely(!is_carved_block(page->start, page->free_divisor, page->free_limit, p) ||
               block->key == key || size_hint > page->block_size))
    return free_slow(p, size_hint, caller);
  block->next = page->free;
  block->key = key;
  page->free = block;
  page->is_zero = 0;
  if (unlikely(--page->used == 0)) heap_page_freed(heap, page);
}

#endif /* SHOAL_ALLOC_H */
