/* alloc.h — the two fast paths, inline so that every exported name (the api
 * layer's) is the whole path with no extra call. Each takes its slow exits
 * as arguments, which inlining turns into direct calls: the core's own
 * (alloc_fast, free_fast, for the core and the diagnostics) go straight to
 * the core's slow paths, the api layer's look first whether a diagnostic
 * interposes.
 *
 * malloc: one TLS load, one table load (direct_page), a pop (which
 *         prefetches the next block of the list).
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

#include "core/internal.h"

/* The core's slow exits (alloc.c). `caller` is passed through for the
 * exits of the layers above; the core itself does not read it. */
void *alloc_generic(shoal_heap_t *heap, size_t size, caller_t caller);
void *alloc_generic_exact(shoal_heap_t *heap, size_t size, caller_t caller); /* no borrowing */
void free_slow(void *p, size_t size_hint, caller_t caller);
void free_not_local(shoal_page_t *page, void *p, size_t size_hint, caller_t caller);
void heap_page_freed(shoal_heap_t *heap, shoal_page_t *page);
void free_own_medium(shoal_heap_t *heap, shoal_page_t *page, shoal_block_t *block);

/* The rest of the C API, in the core's terms: no argument checks beyond
 * overflow (the api layer owns the standard's rules), no diagnostics. */
void *core_malloc_zeroed(size_t size, caller_t caller); /* calloc, its product taken */
void *core_realloc(void *p, size_t size, caller_t caller);
/* A power-of-two alignment (a word or less: plain malloc). */
void *core_alloc_aligned(size_t alignment, size_t size, caller_t caller);
size_t core_usable_size(const void *p, const char *function);
size_t core_class_block_size(const void *p); /* a live class block's size, else 0 */
void *block_containing(const void *p, size_t *usable);

typedef void *(*alloc_exit_t)(shoal_heap_t *heap, size_t size, caller_t caller);
typedef void (*free_not_local_exit_t)(shoal_page_t *page, void *p, size_t size_hint,
                                      caller_t caller);
typedef void (*free_exit_t)(void *p, size_t size_hint, caller_t caller);

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

/* A free block of one of the next BORROW_CLASSES classes (internal.h),
 * from its class cache or its first page, for a medium class with none of
 * its own at hand. */
fast_path void *medium_borrow(shoal_heap_t *heap, uint8_t size_class) {
  for (unsigned k = size_class + 1u; k <= size_class + BORROW_CLASSES && k < (unsigned)CLASS_COUNT;
       k++) {
    shoal_page_t *lender = &heap->class_cache[k];
    if (lender->free != NULL) return page_pop(heap, lender);
    lender = heap->queues[k].first;
    if (lender != NULL && lender->free != NULL) return page_pop(heap, lender);
  }
  return NULL;
}

/* The first thing a malloc slow exit tries, without the heap's slow lock.
 * A small plain request whose direct page ran dry: the page's blocks that
 * other threads freed meanwhile (page_collect_queued). Above DIRECT_MAX:
 * the class by bit arithmetic, then the same pop from the class's remote
 * cache (other threads' blocks this thread freed: reused first, as the
 * direct pages of small classes do) or from the first page of its queue,
 * with the other threads' frees waiting on it; spent, the next page of the
 * queue that has a block at hand comes first (heap_queue_rotate); when no
 * other page of the class and no remote free may hold a block, a
 * neighbour's free block (`may_borrow`: medium_borrow) or the page's next
 * never-used block (page_bump). NULL: the slow path's turn. A plain
 * request up to POOL_MAX goes to the heap's pool instead while
 * SHOAL_MEDIUM_POOL is set. */
fast_path void *alloc_slow_pop(shoal_heap_t *heap, size_t size, bool may_borrow) {
  if (size <= DIRECT_MAX) {
    shoal_page_t *page = heap->direct_page[(size + WORD_SIZE - 1) / WORD_SIZE];
    return may_borrow && page_collect_queued(page) ? page_pop(heap, page) : NULL;
  }
  if (likely(size <= MEDIUM_MAX)) {
    if (may_borrow && unlikely(size_is_pooled(size)) && heap != &heap_empty)
      return heap_pool_malloc(heap, size); /* SHOAL_MEDIUM_POOL */
    uint8_t size_class = size_class_of_large(size);
    shoal_page_t *cache = &heap->class_cache[size_class];
    if (cache->free != NULL) return page_pop(heap, cache);
    shoal_page_t *page = heap->queues[size_class].first;
    if (likely(page != NULL)) {
      if (likely(page->free != NULL) || page_collect_queued(page)) return page_pop(heap, page);
      if (page->next != NULL) {
        page = heap_queue_rotate(heap, size_class);
        return page != NULL ? page_pop(heap, page) : NULL;
      }
      if (atomic_load_explicit(&page->xthread_free, memory_order_relaxed) == 0) {
        if (may_borrow) {
          void *lent = medium_borrow(heap, size_class);
          if (lent != NULL) return lent;
        }
        if (page->capacity < page->reserved) return page_bump(page);
      }
    }
  }
  return NULL;
}

/* Another heap's block, kept to serve this thread's own next mallocs of its
 * class (heap.c, heap_find_page): a push on a pseudo page that the malloc
 * fast path pops like any other, no atomic, counted when the cache is
 * folded. Only a thread that allocates the class itself keeps such blocks
 * (one that only frees would strand them; one whose first malloc of the
 * class they served would write into the other thread's cache lines), at
 * most REMOTE_CACHE_BYTES a small class and REMOTE_CACHE_MEDIUM a
 * medium one (internal.h says why so few). Reads only the page's shared line, with
 * the same checks as the local path: false sends the block on to the slow
 * exits, which also report every error. A thread without a heap, or whose
 * heap is parked while a diagnostic interposes, has no queued page. */
fast_path bool remote_cache_push(shoal_heap_t *heap, shoal_page_t *page, void *p,
                                 size_t size_hint) {
  uint8_t size_class = page->shared_class;
  if (size_class >= CLASS_COUNT || heap->queues[size_class].first == NULL) return false;
  shoal_page_t *cache = &heap->class_cache[size_class];
  shoal_block_t *block = p;
  uintptr_t key = heap->free_key;
  uint32_t block_size = page->shared_block_size;
  /* Room first: a full cache sends the block on before the checks that
   * free_not_local makes again. */
  size_t room = size_class < DIRECT_CLASSES ? REMOTE_CACHE_BYTES : REMOTE_CACHE_MEDIUM;
  if ((cache->capacity - cache->used) * block_size >= room) return false;
  uint64_t limit = atomic_load_explicit(&page->shared_limit, memory_order_relaxed);
  if (!is_carved_block(page->shared_start, page->shared_divisor, limit, p) || block->key == key ||
      size_hint > block_size)
    return false;
  block->next = cache->free;
  block->key = key;
  cache->free = block;
  cache->capacity++;
  return true;
}

/* size_hint: the size the caller says it allocated (sized delete), or 0.
 * Ownership is read from the segment header, which stays in cache; a
 * remote free never touches the owner's line of the page. */
fast_path void free_fast_then(void *p, size_t size_hint, caller_t caller,
                              free_not_local_exit_t not_local, free_exit_t slow) {
  if (unlikely(!segment_map_is_head(p))) return slow(p, size_hint, caller);
  shoal_segment_t *segment = segment_of(p);
  shoal_page_t *page = segment_page_of(segment, p);
  shoal_heap_t *heap = thread_heap;
  if (unlikely(atomic_load_explicit(&segment->heap, memory_order_relaxed) != heap)) {
    if (likely(remote_cache_push(heap, page, p, size_hint))) return;
    return not_local(page, p, size_hint, caller);
  }
  shoal_block_t *block = p;
  uintptr_t key = heap->free_key; /* once: the stores below could alias it */
  /* A parked or unused page has no free_limit: the block test sends it on. */
  if (unlikely(!is_carved_block(page->start, page->free_divisor, page->free_limit, p) ||
               block->key == key || size_hint > page->block_size))
    return slow(p, size_hint, caller);
  if (unlikely(page->size_class >= DIRECT_CLASSES)) return free_own_medium(heap, page, block);
  block->next = page->free;
  block->key = key;
  page->free = block;
  page->is_zero = 0;
  if (unlikely(--page->used == 0)) heap_page_freed(heap, page);
}

fast_path void free_fast(void *p, size_t size_hint, caller_t caller) {
  free_fast_then(p, size_hint, caller, free_not_local, free_slow);
}

#endif /* SHOAL_ALLOC_H */
