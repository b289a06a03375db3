/* segment.c — 1 MiB aligned regions carved into 64 KiB slices for pages.
 *
 * Owns: slice allocation inside a heap's segments, and purging of free
 * slices (the arena maps segments and keeps the segment map). A segment belongs to one heap, so
 * nothing here takes a lock: the heap's owner (or the thread servicing an abandoned heap) is the
 * only caller. Empty segments go back to the arena.
 *
 * Invariants: slice 0 is the header and never free; free_slices has a bit
 * per slice not in any page; page_offset[i] locates the descriptor of the
 * page holding slice i (its first slice's), or slice i's own when free; a free slice's
 * descriptor has size_class CLASS_NONE and owner 0, so a stray pointer into it is caught;
 * a segment is in its heap's list exactly while it has a free slice (a heap of 1 GiB in
 * small blocks walked 250 full segments on every page it took). */
#include "core/internal.h"

#include <string.h>

_Static_assert(sizeof(shoal_page_t) == 192, "three cache lines per page descriptor");
_Static_assert(offsetof(shoal_page_t, free) == 64 && offsetof(shoal_page_t, xthread_free) == 128,
               "read-mostly, owner and remote fields each on a line of their own");
_Static_assert(sizeof(shoal_segment_t) <= SLICE_SIZE, "the header fits in slice 0");

static inline uint64_t slice_mask(size_t first, size_t count) {
  return (count >= 64 ? SLICES_ALL : (((uint64_t)1 << count) - 1)) << first;
}

/* Bit i set when slices i .. i+count-1 are all free: log2(count) steps. */
static uint64_t free_runs(uint64_t free_slices, size_t count) {
  uint64_t runs = free_slices;
  for (size_t width = 1; width < count && runs != 0;) {
    size_t shift = width < count - width ? width : count - width;
    runs &= runs >> shift;
    width += shift;
  }
  return runs;
}

static void heap_segment_link(shoal_heap_t *heap, shoal_segment_t *segment) {
  segment->prev = NULL;
  segment->next = heap->segments;
  if (heap->segments != NULL) heap->segments->prev = segment;
  heap->segments = segment;
}

static void heap_segment_unlink(shoal_heap_t *heap, shoal_segment_t *segment) {
  if (segment->prev != NULL)
    segment->prev->next = segment->next;
  else
    heap->segments = segment->next;
  if (segment->next != NULL) segment->next->prev = segment->prev;
  segment->next = segment->prev = NULL;
}

/* Free slices still resident and not yet lazily purged. */
static size_t pending_bytes(const shoal_segment_t *segment, uint64_t mask) {
  return bit_count(segment->free_slices & segment->dirty_slices & ~segment->lazy_slices & mask) *
         SLICE_SIZE;
}

/* Slices about to serve again: any of them purged for good is a refault. */
static void segment_take_purged(shoal_segment_t *segment, uint64_t mask) {
  if (unlikely((segment->purged_slices & mask) != 0)) {
    purge_note_refault(segment->purged_ms);
    segment->purged_slices &= ~mask;
  }
}

/* The first of `runs` (free runs of `slices` slices) as a page of the heap
 * whose segment it is. */
static shoal_page_t *segment_take_run(shoal_heap_t *heap, shoal_segment_t *segment, uint64_t runs,
                                      size_t slices) {
  size_t first = (size_t)__builtin_ctzll(runs);
  uint64_t mask = slice_mask(first, slices);
  segment_take_purged(segment, mask);
  heap->purge_pending_bytes -= pending_bytes(segment, mask);
  bool is_zero = (segment->dirty_slices & mask) == 0;
  os_commit_note((ptrdiff_t)(bit_count(mask & ~segment->dirty_slices) * SLICE_SIZE));
  segment->free_slices &= ~mask;
  segment->dirty_slices |= mask;
  segment->lazy_slices &= ~mask;
  if (segment->free_slices == 0) heap_segment_unlink(heap, segment);
  for (size_t i = first; i < first + slices; i++) segment_slice_set_page(segment, i, first);
  shoal_page_t *page = &segment->pages[first];
  memset(page, 0, sizeof *page);
  page->freed_class = CLASS_NONE;
  page->slice_count = (uint8_t)slices;
  page->is_zero = is_zero;
  page->start = (uint8_t *)segment + first * SLICE_SIZE;
  page->size_class = CLASS_NONE;
  page->flags = PAGE_UNUSED; /* until page_init */
  page_publish_shape(page);
  owner_count_add(&heap->pages_taken, 1);
  return page;
}

/* Segments looked at, once one has resident free slices, for those a page
 * of the class itself gave back: such slices are resident about as far as
 * the class carves them again. Another class's page made there keeps the
 * rest of them resident where no one can use it, until a purge
 * (heap_purge_untouched_tails): replaying CPython's three threads, whose
 * heaps change hands each round, 2.9 of 12 MB at the peak. */
#define CLASS_RUN_SEGMENTS 8

/* The first of `runs` whose slices a page of `size_class` gave back, or 0. */
static uint64_t runs_of_class(const shoal_segment_t *segment, uint64_t runs, uint8_t size_class) {
  for (; runs != 0; runs &= runs - 1) {
    size_t first = (size_t)__builtin_ctzll(runs);
    if (segment->pages[first].freed_class == size_class) return (uint64_t)1 << first;
  }
  return 0;
}

/* A page of `slices` contiguous slices from one of the heap's segments,
 * taking a fresh segment from the arena when none has room. The descriptor
 * comes back with slice_count, is_zero and start set; page_init does the rest. */
shoal_page_t *segment_page_alloc(shoal_heap_t *heap, size_t slices, uint8_t size_class) {
  /* Slices already touched first: reusing them costs no new memory, while
   * untouched ones would add to the resident set (and fault). */
  bool by_class = size_class < CLASS_COUNT;
  shoal_segment_t *segment, *dirty_segment = NULL, *clean_segment = NULL;
  uint64_t runs = 0, dirty_runs = 0, clean_runs = 0;
  size_t looked = 0;
  for (segment = heap->segments; segment != NULL; segment = segment->next) {
    runs = free_runs(segment->free_slices & segment->dirty_slices, slices);
    if (runs != 0) {
      uint64_t own = by_class ? runs_of_class(segment, runs, size_class) : 0;
      if (own != 0) return segment_take_run(heap, segment, own, slices);
      if (dirty_segment == NULL) {
        dirty_segment = segment;
        dirty_runs = runs;
      }
    } else if (clean_segment == NULL &&
               (clean_runs = free_runs(segment->free_slices, slices)) != 0) {
      clean_segment = segment;
    }
    if (dirty_segment != NULL && (!by_class || ++looked >= CLASS_RUN_SEGMENTS)) break;
  }
  segment = dirty_segment;
  runs = dirty_runs;
  if (segment == NULL && clean_segment != NULL) {
    segment = clean_segment;
    runs = clean_runs;
  }
  if (segment == NULL) {
    segment = arena_segment_acquire();
    if (segment == NULL) {
      huge_cache_trim(true); /* cached huge blocks may be what stands in the way */
      segment = arena_segment_acquire();
    }
    if (segment == NULL) return NULL;
    atomic_store_explicit(&segment->heap, heap, memory_order_relaxed);
    heap_segment_link(heap, segment);
    /* A cached segment comes with slices its last heap touched: free and
     * resident, they are this heap's to purge now (taking one subtracts). */
    heap->purge_pending_bytes += pending_bytes(segment, SLICES_ALL & ~SLICE_HEADER_BITS);
    runs = free_runs(segment->free_slices, slices);
  }
  return segment_take_run(heap, segment, runs, slices);
}

/* Only slices still resident: lending them saves the borrower a fault per
 * page and the process memory it would map beside them. */
shoal_page_t *segment_page_lend(shoal_heap_t *owner, size_t slices) {
  for (shoal_segment_t *segment = owner->segments; segment != NULL; segment = segment->next) {
    uint64_t runs =
        free_runs(segment->free_slices & segment->dirty_slices & ~segment->lazy_slices, slices);
    if (runs != 0) {
      shoal_page_t *page = segment_take_run(owner, segment, runs, slices);
      atomic_store_explicit(&page->guest, GUEST_PAGE, memory_order_relaxed);
      return page;
    }
  }
  return NULL;
}

/* Grow a single-block page in place over the free slices that follow it;
 * its block_size is the caller's to set. Owner only. False when they are
 * taken, the segment ends first, or the segment is another heap's (a
 * borrowed page's: its free slices are that heap's to give). */
bool segment_page_grow(shoal_heap_t *heap, shoal_page_t *page, size_t slices) {
  shoal_segment_t *segment = segment_of(page);
  if (atomic_load_explicit(&segment->heap, memory_order_relaxed) != heap) return false;
  size_t first = (size_t)(page - segment->pages), have = page->slice_count;
  if (first + slices > SLICES_PER_SEGMENT) return false;
  uint64_t mask = slice_mask(first + have, slices - have);
  if ((segment->free_slices & mask) != mask) return false;
  segment_take_purged(segment, mask);
  heap->purge_pending_bytes -= pending_bytes(segment, mask);
  os_commit_note((ptrdiff_t)(bit_count(mask & ~segment->dirty_slices) * SLICE_SIZE));
  segment->free_slices &= ~mask;
  segment->dirty_slices |= mask;
  segment->lazy_slices &= ~mask;
  if (segment->free_slices == 0) heap_segment_unlink(heap, segment);
  for (size_t i = first + have; i < first + slices; i++) segment_slice_set_page(segment, i, first);
  page->slice_count = (uint8_t)slices;
  return true;
}

/* Purge the free, touched slices of one segment but those in `spare`, a
 * contiguous run at a time: for good (MADV_DONTNEED), or lazily (MADV_FREE)
 * those not lazy already. */
static void segment_purge(shoal_segment_t *segment, bool lazy, uint64_t spare) {
  uint64_t bits = segment->free_slices & segment->dirty_slices & ~SLICE_HEADER_BITS & ~spare;
  if (lazy) bits &= ~segment->lazy_slices;
  if (!lazy && bits != 0) segment_note_purged(segment, bits, os_now_ms());
  while (bits != 0) {
    size_t first = (size_t)__builtin_ctzll(bits);
    size_t count = (size_t)__builtin_ctzll(~(bits >> first));
    if (first + count > SLICES_PER_SEGMENT) count = SLICES_PER_SEGMENT - first;
    uint64_t mask = slice_mask(first, count);
    uint8_t *start = (uint8_t *)segment + first * SLICE_SIZE;
    if (lazy) {
      os_purge_lazy(start, count * SLICE_SIZE);
      segment->lazy_slices |= mask;
    } else {
      os_purge(start, count * SLICE_SIZE);
      os_commit_note(-(ptrdiff_t)(count * SLICE_SIZE));
      segment->dirty_slices &= ~mask;
      segment->lazy_slices &= ~mask;
    }
    bits &= ~mask;
  }
}

/* A segment of a dead thread's heap goes to a live heap (heap.c's
 * heap_take_segment, which moves its pages): its place in the list of
 * segments with free slices and its slices pending purge go with it. */
void segment_move(shoal_heap_t *from, shoal_heap_t *to, shoal_segment_t *segment) {
  size_t pending = pending_bytes(segment, SLICES_ALL & ~SLICE_HEADER_BITS);
  from->purge_pending_bytes -= pending;
  to->purge_pending_bytes += pending;
  if (segment->free_slices != 0) {
    heap_segment_unlink(from, segment);
    heap_segment_link(to, segment);
  }
  atomic_store_explicit(&segment->heap, to, memory_order_relaxed);
}

static void segment_purge_schedule(shoal_heap_t *heap, int64_t now, long delay) {
  purge_deadline_push(&heap->purge_at_ms, &heap->purge_latest_ms, now, delay);
}

/* Purge the heap's free slices, all of them or (aged) those not freed since
 * the last purge; the spared ones get a purge of their own. */
static void purge_heap(shoal_heap_t *heap, bool aged) {
  size_t pending = 0;
  bool spared = false;
  for (shoal_segment_t *segment = heap->segments; segment != NULL; segment = segment->next) {
    uint64_t recent =
        aged ? segment->recent_slices & segment->free_slices & segment->dirty_slices : 0;
    segment_purge(segment, false, recent);
    segment->recent_slices = 0;
    spared |= recent != 0;
    pending += pending_bytes(segment, SLICES_ALL & ~SLICE_HEADER_BITS);
  }
  heap->purge_pending_bytes = pending;
  atomic_store_explicit(&heap->purge_at_ms, 0, memory_order_relaxed);
  int64_t now = os_now_ms();
  purge_note_purge(now);
  if (spared) segment_purge_schedule(heap, now, purge_delay());
  huge_cache_trim(false);
  arena_cache_trim(false);
}

/* A collect or a thread exit: give every free slice back for good. */
void segment_purge_heap(shoal_heap_t *heap) {
  purge_heap(heap, false);
}

/* The purge delay is over but the owner kept running: purge the slices that
 * have stayed free since the last purge, and spare those freed since, until
 * the next. Purging them all, 8 threads on 2 cores came back from each wait
 * for a core to purge what they had freed in their last time slice, and
 * fault it in again (largemix t=8: 3x the time of the best allocator, 4.5x
 * its page faults). */
void segment_purge_heap_aged(shoal_heap_t *heap) {
  purge_heap(heap, true);
}

/* A new thread has adopted the heap: what the dead one left free counts as
 * freed now, for the adopter to reuse before it is purged. */
void segment_purge_restart(shoal_heap_t *heap) {
  for (shoal_segment_t *segment = heap->segments; segment != NULL; segment = segment->next)
    segment->recent_slices = segment->free_slices;
  heap->page_freed_ms = os_now_ms();
  atomic_store_explicit(&heap->purge_at_ms, 0, memory_order_relaxed);
  if (heap->purge_pending_bytes > 0)
    segment_purge_schedule(heap, heap->page_freed_ms, purge_delay());
}

/* Past the purge limit in a burst of frees: the kernel may take the memory
 * meanwhile, and a lazy purge costs little if the program allocates again
 * soon (it often does); the purge for good still follows the delay. */
void segment_purge_heap_lazy(shoal_heap_t *heap) {
  for (shoal_segment_t *segment = heap->segments; segment != NULL; segment = segment->next)
    segment_purge(segment, true, 0);
  heap->purge_pending_bytes = 0;
}

/* Slices [first, first + count) of a heap's segment are free again (their
 * descriptors reset by the caller): an empty segment goes back to the
 * arena; the slices stay resident until a purge is due
 * (purge_deadline_push) and they have stayed free since the one before
 * (segment_purge_heap_aged). Past the purge limit in a burst they are
 * purged lazily at once. */
static void segment_slices_free(shoal_heap_t *heap, shoal_segment_t *segment, size_t first,
                                size_t count) {
  uint64_t mask = slice_mask(first, count);
  bool was_full = segment->free_slices == 0; /* then out of the heap's list */
  segment->free_slices |= mask;
  segment->recent_slices |= mask;

  if (segment->free_slices == (SLICES_ALL & ~SLICE_HEADER_BITS)) {
    heap->purge_pending_bytes -= pending_bytes(segment, SLICES_ALL & ~mask);
    if (!was_full) heap_segment_unlink(heap, segment);
    arena_segment_release(segment);
    return;
  }
  if (was_full) heap_segment_link(heap, segment);
  heap->purge_pending_bytes += pending_bytes(segment, mask);
  long delay = purge_delay();
  if (delay == 0) {
    segment_purge_heap(heap);
    return;
  }
  if (heap->purge_pending_bytes > (size_t)option(SHOAL_OPTION_PURGE_LIMIT))
    segment_purge_heap_lazy(heap);
  heap->page_freed_ms = os_now_ms();
  segment_purge_schedule(heap, heap->page_freed_ms, delay);
}

static void segment_slices_unassign(shoal_segment_t *segment, size_t first, size_t count) {
  for (size_t i = first; i < first + count; i++) {
    segment_slice_set_page(segment, i, i);
    segment->pages[i].freed_class = CLASS_NONE;
  }
}

/* Give the page's slices back to its segment (segment_slices_free). */
void segment_page_free(shoal_heap_t *heap, shoal_page_t *page) {
  shoal_segment_t *segment = segment_of(page);
  size_t first = (size_t)(page - segment->pages), count = page->slice_count;
  segment_slices_unassign(segment, first, count);
  page->freed_class = page->size_class;
  atomic_store_explicit(&page->owner, 0, memory_order_relaxed);
  page->size_class = CLASS_NONE;
  page->block_size = 0;
  page->flags = PAGE_UNUSED;
  atomic_store_explicit(&page->guest, 0, memory_order_relaxed);
  page_publish_shape(page);
  page->free = NULL;
  page->used = page->used_at_fold = 0;
  owner_count_add(&heap->pages_given, 1);
  segment_slices_free(heap, segment, first, count);
}

/* Shrink a single-block page to its first `slices` slices, the rest back to
 * the segment as free slices that a page of the same class takes first; its
 * block_size is the caller's to set. Owner only; false for a borrowed page,
 * as segment_page_grow. */
bool segment_page_shrink(shoal_heap_t *heap, shoal_page_t *page, size_t slices) {
  shoal_segment_t *segment = segment_of(page);
  if (atomic_load_explicit(&segment->heap, memory_order_relaxed) != heap) return false;
  size_t first = (size_t)(page - segment->pages), have = page->slice_count;
  segment_slices_unassign(segment, first + slices, have - slices);
  segment->pages[first + slices].freed_class = page->size_class;
  page->slice_count = (uint8_t)slices;
  segment_slices_free(heap, segment, first + slices, have - slices);
  return true;
}
