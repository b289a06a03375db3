/* alloc.c — the core's slow paths around the inline fast paths of alloc.h,
 * and calloc, realloc, aligned blocks and usable size in the core's terms
 * (the api layer gives them the C library's names and rules).
 *
 * Bad pointers are caught where the layout makes it cheap: a pointer not in
 * any segment, a pointer that is not a block start, a block whose key word
 * says it is already free. Each gets one line on stderr naming the kind and
 * the address, then abort (SHOAL_ABORT_ON_ERROR=0: the call is ignored). */
#include "core/alloc.h"

#include <errno.h>
#include <string.h>

/* ---- errors ---- */

slow_path void report_bad_pointer(const char *function, const void *p, const char *kind) {
  bool abort_now = option(SHOAL_OPTION_ABORT_ON_ERROR) != 0;
  if (strcmp(kind, "double free") == 0)
    message("%s(): double free of %p%s", function, p, abort_now ? "" : " (ignored)");
  else
    message("%s(): %p %s%s", function, p, kind, abort_now ? "" : " (ignored)");
  if (abort_now) os_abort();
}

static const char *const NOT_OURS = "was not allocated by shoal";
static const char *const INSIDE = "points inside a block";
static const char *const NEVER_ALLOCATED = "was never allocated (past its page's blocks)";

/* The block a pointer designates, or NULL after reporting why it is bad.
 * Accepts interior pointers of aligned large blocks. */
static shoal_block_t *block_lookup(const void *p, const char *function, shoal_page_t **page_out) {
  shoal_segment_t *segment = segment_find(p);
  if (segment == NULL) {
    report_bad_pointer(function, p, NOT_OURS);
    return NULL;
  }
  shoal_page_t *page = segment_page_of(segment, p);
  *page_out = page;
  if (segment->kind == SEGMENT_HUGE) page = *page_out = &segment->pages[0];
  if (page_is_unused(page)) { /* a free slice (a large block freed), or the header */
    bool at_slice = ((uintptr_t)p & (SLICE_SIZE - 1)) == 0 && segment->kind == SEGMENT_NORMAL &&
                    ((uintptr_t)p & SEGMENT_MASK) != 0;
    report_bad_pointer(function, p, at_slice ? "double free" : NOT_OURS);
    return NULL;
  }
  uint8_t *start = page->start;
  if (page->size_class == CLASS_POOL) {
    if (pool_block_of(page, p).usable != 0) return (shoal_block_t *)p;
    report_bad_pointer(function, p, INSIDE);
    return NULL;
  }
  if (page->size_class == CLASS_HUGE || page->size_class == CLASS_LARGE) {
    if ((const uint8_t *)p == start ||
        (page->has_aligned && (const uint8_t *)p > start &&
         (const uint8_t *)p <
             (uint8_t *)segment + (page->size_class == CLASS_HUGE
                                       ? segment->size
                                       : (size_t)start - (size_t)segment + page->block_size)))
      return (shoal_block_t *)start;
    report_bad_pointer(function, p, (const uint8_t *)p > start ? INSIDE : NOT_OURS);
    return NULL;
  }
  if ((const uint8_t *)p < start || !page_is_block_start(page, p)) {
    report_bad_pointer(function, p, INSIDE);
    return NULL;
  }
  if (!page_is_carved_block(page, p)) { /* past the blocks the page has handed out */
    report_bad_pointer(function, p, NEVER_ALLOCATED);
    return NULL;
  }
  return (shoal_block_t *)p;
}

/* The block that contains p and its usable size, for checked mode, which
 * keeps a header before what the program gets; NULL when p lies in no
 * block. Reports nothing, and reads only the page's shared line. */
void *block_containing(const void *p, size_t *usable) {
  shoal_segment_t *segment = segment_find(p);
  if (segment == NULL) return NULL;
  shoal_page_t *page =
      segment->kind == SEGMENT_HUGE ? &segment->pages[0] : segment_page_of(segment, p);
  uint8_t size_class = page->shared_class;
  if (size_class == CLASS_POOL) return pool_block_containing(page, p, usable);
  uint8_t *start = page->shared_start;
  size_t block_size = page->shared_block_size;
  if (size_class == CLASS_NONE || (const uint8_t *)p < start) return NULL;
  if (size_class == CLASS_HUGE) block_size = huge_usable_size(segment, start);
  if (block_size == 0) return NULL;
  size_t index = (size_t)((const uint8_t *)p - start) / block_size;
  if (size_class >= CLASS_COUNT && index != 0) return NULL;
  *usable = block_size;
  return start + index * block_size;
}

/* ---- free ---- */

heap_counters_t orphan_counters;

/* Count a free in this thread's heap. A thread may free before it ever
 * allocated, or after its heap was abandoned at exit (the C library frees
 * thread data after key destructors ran): such frees count in the shared
 * orphan counters instead of creating a heap nobody would abandon. */
static void count_free(shoal_heap_t *heap, uint8_t size_class, size_t bytes, bool remote) {
  if (heap == &heap_empty) {
    heap_counters_t *c = &orphan_counters;
    atomic_fetch_add_explicit(&c->freed[size_class], 1, memory_order_relaxed);
    if (size_class >= CLASS_COUNT)
      atomic_fetch_add_explicit(&c->outsized_freed_bytes, bytes, memory_order_relaxed);
    if (remote) atomic_fetch_add_explicit(&c->remote_frees, 1, memory_order_relaxed);
    return;
  }
  heap_counters_t *c = &heap->counters;
  counter_add(&c->freed[size_class], 1);
  if (size_class >= CLASS_COUNT) counter_add(&c->outsized_freed_bytes, bytes);
  if (remote) counter_add(&c->remote_frees, 1);
}

/* What heap_page_freed does beyond keeping its class's last page: under the
 * slow lock, out of line (the lock's calls would cost the kept page's path
 * its registers). */
static out_of_line void page_freed_locked(shoal_heap_t *heap, shoal_page_t *page) {
  heap_slow_enter(heap);
  if (page->flags == 0) {
    heap_page_retire(heap, page);
  } else if (page->flags & PAGE_BORROWED) { /* parked until empty */
    if (page->used == 0 && page_unpark(page)) heap_release_borrowed(heap, page);
  } else if (page_unpark(page)) { /* else a notification is on its way: the drain decides */
    heap_unpark_listed(heap, page);
    if (page->size_class == CLASS_LARGE) { /* the page's used counts the block, not its bytes */
      counter_add(&heap->counters.outsized_freed_bytes, page->block_size);
      heap_page_retire(heap, page);
    } else {
      heap_queue_push_back(heap, page);
      if (page->used == 0) heap_page_retire(heap, page);
    }
  }
  heap_slow_exit(heap);
}

/* A local free that emptied the page or hit a parked page. */
void heap_page_freed(shoal_heap_t *heap, shoal_page_t *page) {
  if (likely(page->flags == 0)) { /* emptied; the common case keeps it as its class's last page */
    page_queue_t *queue = &heap->queues[page->size_class];
    /* No purge due, the heap's or the arena's: one test for both. */
    int64_t purges_due = atomic_load_explicit(&heap->purge_at_ms, memory_order_relaxed) |
                         atomic_load_explicit(&arena_purge_at_ms, memory_order_relaxed);
    if (queue->first == page && queue->last == page && likely(purges_due == 0))
      return; /* (dead heaps' purges wait for a malloc slow path) */
  }
  page_freed_locked(heap, page);
}

void free_not_small(shoal_page_t *page, void *p, size_t size_hint, caller_t caller,
                    uint64_t place) {
  if (likely(free_own_larger(page, p, size_hint, place))) return;
  free_slow(p, size_hint, caller);
}

/* Home to its page, gathered with others of the page in the outbox; a
 * thread without a heap (after its exit hook) sends it at once. Counted
 * in its class (a pool block's: its request's). A heap's first goes
 * through the outbox too, though the outbox lies past the heap's first OS
 * page and a thread that frees one block of another's (Hoard's
 * cache-scratch) so writes a page for it (cthrash, 64 threads, full size:
 * peak RSS 2.87 MB against 2.68): sent home at once, it made batch
 * producers and consumers run 1.6 times as long (xmalloc 2:2 / 4:4 / 8:8,
 * full sizes, medians of 5-7: 2.34 / 3.33 / 2.93 s against 1.55 / 2.11 /
 * 1.73), for 10-16 % less peak RSS (why is open: bench/README.md). */
static void free_remote(shoal_heap_t *heap, shoal_page_t *page, shoal_block_t *block,
                        uint8_t size_class, size_t bytes) {
  count_free(heap, size_class, bytes, true);
  block->key = free_key;
  if (likely(heap != &heap_empty)) {
    heap_outbox_push(heap, page, block);
    return;
  }
  shoal_heap_t *to_serve = page_push_remote(page, block, block, 1);
  if (unlikely(to_serve != NULL)) heap_serve(to_serve);
}

/* A block of another heap that the fast path did not keep in its remote
 * cache (alloc.h): gathered to go home a chain at a time; or of a huge
 * segment, or no block at all. Reads only the page's shared line. */
void free_not_local(shoal_page_t *page, void *p, size_t size_hint, caller_t caller) {
  shoal_block_t *block = p;
  if (unlikely(page->shared_class >= CLASS_HUGE || size_hint > page->shared_block_size ||
               !is_carved_block(page->shared_start, page->shared_divisor,
                                atomic_load_explicit(&page->shared_limit, memory_order_relaxed),
                                p) ||
               block->key == free_key)) {
    free_slow(p, size_hint, caller); /* huge blocks, aligned interiors, and every error */
    return;
  }
  shoal_heap_t *heap = thread_heap;
  if (unlikely(heap == &heap_empty)) {
    heap = heap_of_freeing_thread(); /* an adopted heap may allocate the class */
    if (heap != &heap_empty && remote_cache_push(heap, page, p, size_hint)) return;
  }
  free_remote(heap, page, block, page->shared_class, page->shared_block_size);
}

static void free_huge(shoal_segment_t *segment, shoal_block_t *block, const void *p) {
  if (block->key == free_key) {
    report_bad_pointer("free", p, "double free");
    return;
  }
  count_free(thread_heap, CLASS_HUGE, huge_usable_size(segment, block), false);
  block->key = free_key;
  huge_free(segment);
}

/* A block of a pool page (its header checked): its owner's free joins it
 * with its neighbours; another thread's marks it with the free key, as a
 * class block's, and sends it home, and the owner's next requests go to
 * the classes (size_is_pooled). */
static void free_pool_block(shoal_page_t *page, void *p, size_t size_hint) {
  pool_block_t block = pool_block_of(page, p);
  if (block.is_free || ((shoal_block_t *)p)->key == free_key) {
    report_bad_pointer("free", p, "double free");
    return;
  }
  if (size_hint > block.usable) {
    report_bad_pointer("free", p, "was freed with a size larger than its block");
    return;
  }
  shoal_heap_t *heap = thread_heap;
  shoal_heap_t *owner = (shoal_heap_t *)atomic_load_explicit(&page->owner, memory_order_relaxed);
  if (owner == heap) {
    heap_pool_free(heap, page, p, block.size_class);
    return;
  }
  if (owner != NULL && !atomic_load_explicit(&owner->pool_shunned, memory_order_relaxed))
    atomic_store_explicit(&owner->pool_shunned, true, memory_order_relaxed);
  if (unlikely(heap == &heap_empty)) heap = heap_of_freeing_thread();
  free_remote(heap, page, p, block.size_class, block.usable);
}

slow_path void free_slow(void *p, size_t size_hint, caller_t caller) {
  (void)caller;
  if (p == NULL) return;
  int saved_errno = errno;
  shoal_page_t *page;
  shoal_block_t *block = block_lookup(p, "free", &page);
  if (block == NULL) goto done;
  shoal_segment_t *segment = segment_of(page);
  if (page->size_class == CLASS_POOL) {
    free_pool_block(page, p, size_hint);
    goto done;
  }
  if (size_hint != 0) {
    size_t usable =
        page->size_class == CLASS_HUGE ? huge_usable_size(segment, block) : page->block_size;
    if (size_hint > usable) {
      report_bad_pointer("free", p, "was freed with a size larger than its block");
      goto done;
    }
  }
  if (page->size_class == CLASS_HUGE) {
    free_huge(segment, block, p);
    goto done;
  }
  if (block->key == free_key) {
    report_bad_pointer("free", p, "double free");
    goto done;
  }
  /* An aligned large block freed by its interior pointer, or a block whose
   * sized delete took us here: the ordinary path now. */
  shoal_heap_t *heap = thread_heap;
  if (atomic_load_explicit(&page->owner, memory_order_relaxed) == (uintptr_t)heap) {
    /* The page may be parked: a thread serving the heap may collect it, or
     * have lent its segment to another heap (so, again under the lock). */
    heap_slow_enter(heap);
    bool still_own = atomic_load_explicit(&page->owner, memory_order_relaxed) == (uintptr_t)heap;
    if (still_own) {
      block->next = page->free;
      block->key = free_key;
      page->free = block;
      page->is_zero = 0;
      if (--page->used == 0 || page->flags != 0) heap_page_freed(heap, page);
    }
    heap_slow_exit(heap);
    if (still_own) goto done;
  }
  free_remote(heap, page, block, page->shared_class, page->shared_block_size);
done:
  errno = saved_errno;
}

/* ---- malloc ---- */

/* Sizes above DIRECT_MAX up to MEDIUM_MAX pop here (or come from the pool),
 * and a small size whose direct page has other threads' frees waiting
 * (alloc_slow_pop); everything else is the slow path, which makes the
 * thread's heap on its first call. */
out_of_line void *alloc_generic(size_t size, shoal_heap_t *heap, caller_t caller) {
  (void)caller;
  void *p = alloc_slow_pop(heap, size, true);
  if (likely(p != NULL)) return p;
  return heap_malloc_slow(heap, size);
}

/* The slow exit of aligned requests: a block of the size's own class. */
out_of_line void *alloc_generic_exact(size_t size, shoal_heap_t *heap, caller_t caller) {
  (void)caller;
  void *p = alloc_slow_pop(heap, size, false);
  if (likely(p != NULL)) return p;
  return heap_malloc_slow_exact(heap, size);
}

/* ---- calloc: skip zeroing memory fresh from the OS ---- */

static void *zero_block(void *p, size_t size) {
  shoal_segment_t *segment = segment_of(p);
  shoal_page_t *page =
      segment->kind == SEGMENT_HUGE ? &segment->pages[0] : segment_page_of(segment, p);
  /* is_zero speaks for the page's blocks, freed ones in this thread's class
   * cache included; a block of another thread's page came used, from that
   * cache. The page's owner, not the segment's heap: another heap's guest
   * page in this thread's segment is that heap's, which writes its flag
   * (TSan, stress_pool: a calloc read it while its exiting owner collected
   * the page). A huge page's
   * flag speaks for its block's start only: checked mode hands out a point
   * further in, after its header. */
  bool own =
      segment->kind == SEGMENT_HUGE
          ? p == page->start
          : atomic_load_explicit(&page->owner, memory_order_relaxed) == (uintptr_t)thread_heap;
  /* A small class's flag says only that its page was made on fresh
   * slices: the free fast path does not clear it. */
  if (own && page->is_zero && page->size_class >= DIRECT_CLASSES)
    ((shoal_block_t *)p)->next = NULL; /* only the link was written */
  else
    memset(p, 0, size);
  return p;
}

void *core_malloc_zeroed(size_t size, caller_t caller) {
  /* Big zeroed arrays are the blocks programs touch sparsely: kept from
   * huge pages (large.c), which would make every touch cost 2 MiB. */
  if (unlikely(size > LARGE_MAX) && thread_heap != &heap_empty)
    return heap_calloc_huge(thread_heap, size);
  void *p = alloc_fast(size, caller);
  return p == NULL ? NULL : zero_block(p, size);
}

/* ---- aligned ---- */

/* Every class is a multiple of the alignments its size allows (size_class.c)
 * and pages start on 64 KiB, so rounding the size up to the alignment is
 * enough up to MEDIUM_MAX; beyond, a large page starts on 64 KiB too. */
void *core_alloc_aligned(size_t alignment, size_t size, caller_t caller) {
  if (alignment <= WORD_SIZE) return alloc_fast(size, caller);
  if (size == 0) size = 1;
  size_t rounded = (size + alignment - 1) & ~(alignment - 1);
  if (rounded < size || rounded > PTRDIFF_MAX) { /* no block so big, or so aligned (2^63) */
    errno = ENOMEM;
    return NULL;
  }
  if (rounded <= MEDIUM_MAX && alignment <= SLICE_SIZE) {
    /* A small class's direct slots may name a neighbour's page, lent
     * (BORROW_CLASSES): past 16 bytes, only its own class is aligned. */
    shoal_heap_t *heap = thread_heap;
    size_t slot = (rounded + WORD_SIZE - 1) / WORD_SIZE;
    if (alignment > BLOCK_ALIGNMENT && rounded <= DIRECT_MAX &&
        heap->direct_page[slot]->size_class != direct_class[slot])
      return alloc_generic_exact(rounded, heap, caller);
    return alloc_fast_then(rounded, caller, alloc_generic_exact);
  }
  shoal_heap_t *heap = thread_heap;
  if (heap == &heap_empty && (heap = heap_get_or_create()) == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  return heap_malloc_large(heap, size, alignment);
}

/* ---- usable size ---- */

size_t core_usable_size(const void *p, const char *function) {
  if (p == NULL) return 0;
  shoal_page_t *page;
  shoal_block_t *block = block_lookup(p, function, &page);
  if (block == NULL) return 0;
  if (page->size_class == CLASS_HUGE) return huge_usable_size(segment_of(page), p);
  if (page->size_class == CLASS_POOL) return pool_block_of(page, p).usable;
  return (size_t)((uint8_t *)block + page->block_size - (const uint8_t *)p);
}

size_t core_class_block_size(const void *p) {
  if (likely(segment_map_is_head(p))) {
    shoal_page_t *page = segment_page_of(segment_of(p), p);
    if (likely(page->size_class < CLASS_COUNT && page_is_carved_block(page, p) &&
               ((const shoal_block_t *)p)->key != free_key))
      return page->block_size;
  }
  return 0;
}

/* ---- realloc ---- */

/* Growth allowance, chosen by measurement rather than taken from FastMM
 * (seed 003: small blocks to 2x+32, others +25 %): a block that must move to
 * grow gets at least an eighth more than it had, one size class of room.
 * Buffers grown step by step (bench mtrealloc) run 10-15 % faster and 100k
 * strings grown a byte at a time 16 % faster for 6 % more memory; FastMM's
 * rule made the latter 37 % slower and 86 % bigger. */
static size_t realloc_target(size_t usable, size_t size) {
  if (!option(SHOAL_OPTION_REALLOC_GROWTH) || size > LARGE_MAX) return size;
  size_t target = usable + usable / 8;
  return size < target ? target : size;
}

/* A buffer that realloc grows past this is likely to go on growing: it
 * becomes a large block, which grows in place over the slices after it,
 * rather than a class block copied at every class boundary up to
 * MEDIUM_MAX (mtrealloc, growing buffers to 48 KiB, ran 35 % slower so). */
#define REALLOC_LARGE_FROM (8 * 1024)

static void *alloc_growable(size_t size, caller_t caller) {
  if (size <= REALLOC_LARGE_FROM || size > LARGE_MAX) return alloc_fast(size, caller);
  shoal_heap_t *heap = thread_heap;
  if (heap == &heap_empty && (heap = heap_get_or_create()) == NULL) return NULL;
  return heap_malloc_large(heap, size, 0);
}

/* Copy into a new block; the old one stays intact if that fails. */
static void *realloc_move(void *p, size_t usable, size_t size, caller_t caller) {
  if (size > PTRDIFF_MAX) {
    errno = ENOMEM;
    return NULL;
  }
  void *fresh = NULL;
  if (size > usable) fresh = alloc_growable(realloc_target(usable, size), caller);
  /* Not from the pool: a buffer that realloc moves changes size again, and
   * in the pool it leaves holes as it goes (mtrealloc, growing and
   * shrinking buffers up to 48 KiB: +11 % peak RSS). Only where the pool
   * would take it: the exact path borrows from no neighbour class (scaling
   * t=8, reallocs up to 4 KiB: +3.5 % peak RSS for all of 1-32 KiB). */
  if (fresh == NULL)
    fresh = size_is_pooled(thread_heap, size) ? alloc_fast_then(size, caller, alloc_generic_exact)
                                              : alloc_fast(size, caller);
  if (fresh == NULL) return NULL;
  memcpy(fresh, p, size < usable ? size : usable);
  free_fast(p, 0, caller);
  return fresh;
}

/* Stay in place when the block fits and would waste at most half. */
static inline bool realloc_fits(size_t usable, size_t size) {
  return size <= usable && (size >= usable / 2 || usable <= 128);
}

/* Shrunk to `size` from its page's start, the large block still spans all
 * its slices: it stays as it is, with nothing to give back. */
static inline bool large_keeps_slices(const shoal_page_t *page, size_t size) {
  return size <= page->block_size && size > REALLOC_LARGE_FROM &&
         slices_spanned(size) == page->slice_count;
}

/* A large block that keeps more than REALLOC_LARGE_FROM (an eighth of a
 * slice) shrinks where it is: a buffer that shrinks tends to grow again,
 * and its last slice is resident already up to where the block reached. A
 * move into a class block holds that block beside the slice, which waits
 * for the next large block (mtrealloc, buffers of 1 byte to 48 KiB, full
 * size, t=2 / t=8: peak RSS +8 / +9 % and time +8 / +11 % when blocks
 * moved below half; +3 / +3 % peak RSS when they moved below a quarter of
 * the slice). Whole slices past the new end go back to the segment (the
 * rest stays: large_keeps_slices). False, unchanged, for a borrowed page,
 * whose slices are another heap's. */
static bool large_shrink(shoal_heap_t *heap, shoal_page_t *page, size_t wanted) {
  size_t slices = slices_spanned(wanted);
  if (slices == page->slice_count) return true;
  size_t old_bytes = page->block_size;
  heap_slow_enter(heap);
  bool shrunk = segment_page_shrink(heap, page, slices);
  heap_slow_exit(heap);
  if (!shrunk) return false;
  page->block_size = (uint32_t)large_block_bytes(page, page->block_size);
  page_publish_shape(page);
  counter_add(&heap->counters.outsized_freed_bytes, old_bytes - page->block_size);
  return true;
}

static slow_path void *realloc_slow(void *p, size_t size, caller_t caller) {
  size_t usable = core_usable_size(p, "realloc");
  if (usable == 0) {
    errno = EINVAL;
    return NULL;
  }
  if (realloc_fits(usable, size)) return p;
  shoal_segment_t *segment = segment_find(p);
  shoal_page_t *page = segment_page_of(segment, p);
  shoal_heap_t *heap = thread_heap;
  if (segment->kind == SEGMENT_NORMAL && page->size_class == CLASS_POOL && size > usable &&
      atomic_load_explicit(&page->owner, memory_order_relaxed) == (uintptr_t)heap &&
      heap_pool_grow(heap, page, p, size))
    return p; /* over the free block after it: no copy */
  if (segment->kind == SEGMENT_NORMAL && page->size_class == CLASS_LARGE && size > usable &&
      size <= LARGE_MAX &&
      atomic_load_explicit(&page->owner, memory_order_relaxed) == (uintptr_t)heap) {
    /* A large block grows into the rest of its slices, or over the free
     * slices after it: no copy. */
    size_t old_bytes = page->block_size;
    size_t wanted = (size_t)((uint8_t *)p - page->start) + size;
    size_t slices = slices_spanned(wanted);
    heap_slow_enter(heap);
    bool grown = slices <= page->slice_count || segment_page_grow(heap, page, slices);
    heap_slow_exit(heap);
    if (grown) {
      page->block_size = (uint32_t)large_block_bytes(page, wanted);
      page_publish_shape(page);
      counter_add(&heap->counters.outsized_allocated_bytes, page->block_size - old_bytes);
      return p;
    }
  }
  if (segment->kind == SEGMENT_NORMAL && page->size_class == CLASS_LARGE && size < usable &&
      size > REALLOC_LARGE_FROM &&
      atomic_load_explicit(&page->owner, memory_order_relaxed) == (uintptr_t)heap &&
      large_shrink(heap, page, (size_t)((uint8_t *)p - page->start) + size))
    return p;
  if (segment->kind == SEGMENT_HUGE && size > LARGE_MAX && !segment->pages[0].has_aligned) {
    void *moved = huge_realloc(segment, size);
    if (moved != NULL) {
      shoal_heap_t *heap = thread_heap;
      if (heap != &heap_empty) { /* the block changed size: keep live bytes exact */
        counter_add(&heap->counters.outsized_allocated_bytes,
                    huge_usable_size(segment_of(moved), moved));
        counter_add(&heap->counters.outsized_freed_bytes, usable);
      }
      return moved;
    }
    if (size > PTRDIFF_MAX) {
      errno = ENOMEM;
      return NULL;
    }
    /* It cannot grow where it is (where the OS resizes mappings in place
     * only: Windows), so it is copied: with an eighth more room, or a
     * string appended to a byte at a time copies itself at every page
     * (10 M appends took 9 s instead of 0.3). */
    if (size > usable && size <= PTRDIFF_MAX - size / 8) size += size / 8;
  }
  return realloc_move(p, usable, size, caller);
}

void *core_realloc(void *p, size_t size, caller_t caller) {
  if (p == NULL) return alloc_fast(size, caller);
  if (size == 0) {
    free_fast(p, 0, caller);
    return NULL;
  }
  /* A live block whose page says its usable size: a class block, or the
   * start of a large or huge block. Appending to a growing buffer lives here.
   * The key is read only at a block start (aligned); the rest is realloc_slow's. */
  if (likely(segment_map_is_head(p))) {
    shoal_page_t *page = segment_page_of(segment_of(p), p);
    bool class_block = page->size_class < CLASS_COUNT && page_is_carved_block(page, p);
    if (likely((class_block || p == page->start) && ((shoal_block_t *)p)->key != free_key)) {
      if (likely(class_block)) {
        if (realloc_fits(page->block_size, size)) return p;
        return realloc_move(p, page->block_size, size, caller);
      }
      if (p == page->start && page->size_class == CLASS_HUGE &&
          realloc_fits(huge_usable_size(segment_of(p), p), size))
        return p;
      if (p == page->start && page->size_class == CLASS_LARGE &&
          (realloc_fits(page->block_size, size) || large_keeps_slices(page, size)))
        return p;
    }
  }
  return realloc_slow(p, size, caller);
}
