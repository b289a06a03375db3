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
 *         zero limit, that the page is a small class's and not parked), the
 *         double-free key, and a push on the page's free list when this
 *         thread owns it. A medium or large block of its own takes an
 *         exit (free_not_small) that makes the same checks.
 *         In a loop that frees at random, every instruction here narrows
 *         how many of the program's cache misses the core overlaps: going
 *         from 42 to 35 made smallobj's random phase 15 % faster, three
 *         fewer (the class test and the is_zero store gone) 12 % more.
 * Their unlikely exits are noinline functions.
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
void *alloc_generic(size_t size, shoal_heap_t *heap, caller_t caller);
void *alloc_generic_exact(size_t size, shoal_heap_t *heap, caller_t caller); /* no borrowing */
void free_slow(void *p, size_t size_hint, caller_t caller);
void free_not_local(shoal_page_t *page, void *p, size_t size_hint, caller_t caller);
void heap_page_freed(shoal_heap_t *heap, shoal_page_t *page);
/* A free of a block of this thread's segments that the fast path's tests
 * sent on, with the block test's product (block_place): a medium or large
 * block of its own page is freed there (free_own_larger, with the fast
 * path's checks: true), anything else goes on to free_slow, which reports
 * every error. */
void free_not_small(shoal_page_t *page, void *p, size_t size_hint, caller_t caller, uint64_t place);

/* The rest of the C API, in the core's terms: no argument checks beyond
 * overflow (the api layer owns the standard's rules), no diagnostics. */
void *core_malloc_zeroed(size_t size, caller_t caller); /* calloc, its product taken */
void *core_realloc(void *p, size_t size, caller_t caller);
/* A power-of-two alignment (a word or less: plain malloc). */
void *core_alloc_aligned(size_t alignment, size_t size, caller_t caller);
size_t core_usable_size(const void *p, const char *function);
size_t core_class_block_size(const void *p); /* a live class block's size, else 0 */
void *block_containing(const void *p, size_t *usable);

typedef void *(*alloc_exit_t)(size_t size, shoal_heap_t *heap, caller_t caller);
typedef void (*free_not_local_exit_t)(shoal_page_t *page, void *p, size_t size_hint,
                                      caller_t caller);
typedef void (*free_not_small_exit_t)(shoal_page_t *page, void *p, size_t size_hint,
                                      caller_t caller, uint64_t place);
typedef void (*free_exit_t)(void *p, size_t size_hint, caller_t caller);

/* The fast path with the slow exit of one's choice (operator new's handles
 * failure), called last so that it can be a tail call. */
fast_path void *alloc_fast_then(size_t size, caller_t caller, alloc_exit_t slow) {
  shoal_heap_t *heap = thread_heap;
  if (likely(size <= DIRECT_MAX)) {
    shoal_page_t *page = heap->direct_page[(size + WORD_SIZE - 1) / WORD_SIZE];
    if (likely(page->free != NULL)) return page_pop(heap, page);
  }
  return slow(size, heap, caller);
}

fast_path void *alloc_fast(size_t size, caller_t caller) {
  return alloc_fast_then(size, caller, alloc_generic);
}

/* A free block of one of the next classes in reach (internal.h, borrow_reach),
 * from its class cache or its first page, for a medium class with none of
 * its own at hand. */
fast_path void *medium_borrow(shoal_heap_t *heap, uint8_t size_class) {
  unsigned reach = size_class + borrow_reach(size_class);
  for (unsigned k = size_class + 1u; k <= reach && k < (unsigned)CLASS_COUNT; k++) {
    shoal_page_t *lender = &heap->class_cache[k];
    if (class_cache_marked(heap, (uint8_t)k) && lender->free != NULL) return page_pop(heap, lender);
    lender = heap->queues[k].first;
    if (lender != NULL && lender->free != NULL) return page_pop(heap, lender);
  }
  return NULL;
}

/* A small class whose first page ran dry, as a medium class's in
 * alloc_slow_pop: the next page of its queue with a block at hand, without
 * the slow path and its lock. A program that frees blocks of a class in
 * random order spreads its frees over all the class's pages, and the first
 * page runs dry long before the others (larson, 1 thread: a slow path for
 * 7 % of its mallocs, each taking the heap's lock; with this, 0.3 %, and
 * -15 % time; smallobj -7 %; medians of 5, bench/README.md). Only the
 * class's own first page: not a page lent by the next class, nor the class
 * cache, whose blocks the slow path takes when no page has one. Unlike a
 * medium class, nothing to deliver first: the mailbox carries medium
 * blocks only (heap.c, outbox_goes_by_owner). */
fast_path void *small_rotate(shoal_heap_t *heap, shoal_page_t *page, uint8_t size_class) {
  if (page->next == NULL || page->size_class != size_class ||
      heap->queues[size_class].first != page)
    return NULL;
  page = heap_queue_rotate(heap, size_class);
  return page != NULL ? page_pop(heap, page) : NULL;
}

/* The first thing a malloc slow exit tries, without the heap's slow lock.
 * A small plain request whose direct page ran dry: the page's blocks that
 * other threads freed meanwhile (page_collect_queued), else, where the
 * direct page is its class's first, the next page of the queue that has a
 * block at hand (small_rotate). Above DIRECT_MAX:
 * the class by bit arithmetic, then the same pop from the class's remote
 * cache (other threads' blocks this thread freed: reused first, as the
 * direct pages of small classes do) or from the first page of its queue,
 * with the other threads' frees waiting on it; spent, the next page of the
 * queue that has a block at hand comes first (heap_queue_rotate); when no
 * other page of the class and no remote free may hold a block, a
 * neighbour's free block (`may_borrow`: medium_borrow) or the page's next
 * never-used block (page_bump). NULL: the slow path's turn. A plain
 * request that size_is_pooled goes to the heap's pool instead. */
fast_path void *alloc_slow_pop(shoal_heap_t *heap, size_t size, bool may_borrow) {
  if (size <= DIRECT_MAX) {
    size_t slot = (size + WORD_SIZE - 1) / WORD_SIZE;
    shoal_page_t *page = heap->direct_page[slot];
    if (!may_borrow) return NULL;
    if (page_collect_queued(page)) return page_pop(heap, page);
    return small_rotate(heap, page, direct_class[slot]);
  }
  if (likely(size <= MEDIUM_MAX)) {
    if (unlikely(atomic_load_explicit(&heap->mailbox, memory_order_relaxed) != NULL))
      heap_mailbox_deliver(heap); /* other threads' frees onto the pages, before a pop */
    if (may_borrow && unlikely(size_is_pooled(heap, size)) && heap != &heap_empty)
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
 * most REMOTE_CACHE_BYTES a class (internal.h says why so few). Reads only
 * the page's shared line, with the same checks as the local path: false
 * sends the block on to the slow exits, which also report every error. A
 * thread without a heap, or whose heap is parked while a diagnostic
 * interposes, has no queued page. */
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
  if ((cache->capacity - cache->used) * block_size >= REMOTE_CACHE_BYTES) return false;
  uint64_t limit = atomic_load_explicit(&page->shared_limit, memory_order_relaxed);
  if (!is_carved_block(page->shared_start, page->shared_divisor, limit, p) || block->key == key ||
      size_hint > block_size)
    return false;
  block->next = cache->free;
  block->key = key;
  cache->free = block;
  cache->capacity++;
  class_cache_mark(heap, size_class);
  return true;
}

/* The fast path's tests for a page of this thread's segments that is a
 * medium or large class's, with larger_limit for free_limit: 0 where the
 * page is parked, unused or a guest, or a small class's. `place`: the
 * fast path's block_place. Passed, the block goes to the class cache for
 * the thread's next malloc of its class, as a thread cache keeps it: that
 * malloc takes the block freed last, still in the processor's cache, where
 * the page's list would hand out the block freed last into that page,
 * often long ago (rptest, 2 threads: -7 % time; a miss on the block's link
 * was a third of its medium mallocs' samples). The block stays counted in
 * its page, as another thread's block in the cache is, so no thread
 * serving the heap finds the page empty while the cache holds some of it;
 * and a page's last counted block goes to the page, lest the cache keep an
 * otherwise empty page out of use (mtalloc t=2 / t=8 peak RSS, 64 KiB a
 * class: +7 / +12 % without this, +4 / +2 % with it). At most
 * OWN_CACHE_MEDIUM bytes a class; past it, and for large blocks, the
 * page's list. */
fast_path bool free_own_larger(shoal_page_t *page, void *p, size_t size_hint, uint64_t place) {
  shoal_heap_t *heap = thread_heap;
  shoal_block_t *block = p;
  uintptr_t key = heap->free_key;
  if (place >= page->larger_limit || block->key == key || size_hint > page->block_size)
    return false;
  uint8_t size_class = page->size_class;
  shoal_page_t *cache = &heap->class_cache[size_class];
  page->is_zero = 0; /* calloc reads the page's flag for blocks of the cache too (zero_block) */
  if (likely(size_class < CLASS_COUNT && page->used > 1 &&
             (cache->capacity - cache->used) * page->block_size < OWN_CACHE_MEDIUM)) {
    block->next = cache->free;
    block->key = key;
    cache->free = block;
    cache->capacity++;
    class_cache_mark(heap, size_class);
#if SHOAL_STATISTICS
    cache->own_frees++;
#endif
    return true;
  }
  block->next = page->free;
  block->key = key;
  page->free = block;
  if (--page->used == 0) heap_page_freed(heap, page);
  return true;
}

/* size_hint: the size the caller says it allocated (sized delete), or 0.
 * Ownership is read from the segment header, which stays in cache; a
 * remote free never touches the owner's line of the page. */
fast_path void free_fast_then(void *p, size_t size_hint, caller_t caller,
                              free_not_local_exit_t not_local, free_not_small_exit_t not_small,
                              free_exit_t slow) {
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
  /* Only a small class's page has a free_limit, and only while neither
   * parked nor unused: the block test sends every other on. */
  uint64_t place = block_place(page->start, page->free_divisor, p);
  if (unlikely(place >= page->free_limit || block->key == key || size_hint > page->block_size))
    return not_small(page, p, size_hint, caller, place);
  block->next = page->free;
  block->key = key;
  page->free = block;
  if (unlikely(--page->used == 0)) heap_page_freed(heap, page);
}

fast_path void free_fast(void *p, size_t size_hint, caller_t caller) {
  free_fast_then(p, size_hint, caller, free_not_local, free_not_small, free_slow);
}

#endif /* SHOAL_ALLOC_H */
