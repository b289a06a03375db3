/* heap.c — one heap per thread: page queues and the malloc slow path.
 *
 * Call tree of an allocation (core/alloc.h holds the fast path):
 *   shoal_malloc -> direct_page[size/8]->free pop              (fast, inline)
 *     `-> heap_malloc_slow                                      (this file)
 *           |-> heap_get_or_create      first call of a thread
 *           |-> heap_drain_notified     parked pages that got remote frees
 *           |-> heap_find_page          collect / extend / park the queue's pages
 *           |     `-> segment_page_alloc   fresh page when none has room
 *           `-> heap_malloc_large       single-block pages, huge blocks
 *
 * Only the owner thread touches a heap's queues, except that a dead
 * thread's heap is serviced (state SERVICING) by a thread freeing into it,
 * and adopted whole (state LIVE again) by a new thread. */
#define _GNU_SOURCE
#include "core/internal.h"

#include <errno.h>
#include <string.h>

/* The earliest time a dead thread's heap is due for its purge; 0: none.
 * Any thread's slow path after it services such heaps (heap_maybe_purge). */
_Atomic(int64_t) abandoned_purge_at_ms;

shoal_page_t page_empty;
shoal_heap_t heap_empty = {
    .direct_page = {[0 ... DIRECT_SLOTS - 1] = &page_empty},
};
__attribute__((tls_model("initial-exec"))) _Thread_local shoal_heap_t *thread_heap = &heap_empty;
__attribute__((tls_model("initial-exec"))) _Thread_local shoal_heap_t *thread_heap_parked;
static _Thread_local bool thread_exited; /* its heap was abandoned at its exit */
core_hooks_t core_hooks;

/* ---- queues ---- */

/* Point the direct slots of a small class at a page. */
static void heap_direct_set(shoal_heap_t *heap, uint8_t size_class, shoal_page_t *page) {
  size_t slot = (size_t)(class_block_size[size_class] / WORD_SIZE);
  while (direct_class[slot] == size_class) {
    heap->direct_page[slot] = page;
    if (slot == 0) break;
    slot--;
  }
}

/* Keep direct_page in step with the first page of each small class. */
static void heap_direct_update(shoal_heap_t *heap, uint8_t size_class) {
  if (class_block_size[size_class] > DIRECT_MAX) return;
  shoal_page_t *page = heap->queues[size_class].first;
  heap_direct_set(heap, size_class, page != NULL ? page : &page_empty);
}

static void list_remove(page_queue_t *queue, shoal_page_t *page) {
  if (page->prev != NULL)
    page->prev->next = page->next;
  else
    queue->first = page->next;
  if (page->next != NULL)
    page->next->prev = page->prev;
  else
    queue->last = page->prev;
  page->next = page->prev = NULL;
}

static void list_push_front(page_queue_t *queue, shoal_page_t *page) {
  page->prev = NULL;
  page->next = queue->first;
  if (queue->first != NULL)
    queue->first->prev = page;
  else
    queue->last = page;
  queue->first = page;
}

static void list_push_back(page_queue_t *queue, shoal_page_t *page) {
  page->next = NULL;
  page->prev = queue->last;
  if (queue->last != NULL)
    queue->last->next = page;
  else
    queue->first = page;
  queue->last = page;
}

static void queue_remove(shoal_heap_t *heap, shoal_page_t *page) {
  bool was_first = heap->queues[page->size_class].first == page;
  list_remove(&heap->queues[page->size_class], page);
  if (was_first) heap_direct_update(heap, page->size_class);
}

void heap_queue_push(shoal_heap_t *heap, shoal_page_t *page) {
  list_push_front(&heap->queues[page->size_class], page);
  heap_direct_update(heap, page->size_class);
}

/* A page back from the full list, with a block or a few free: behind the
 * pages being served. At the front, the next malloc would take its one
 * block and the one after would park it again; a loader freeing into full
 * pages as it went paid a slow path on every other malloc so. */
void heap_queue_push_back(shoal_heap_t *heap, shoal_page_t *page) {
  page_queue_t *queue = &heap->queues[page->size_class];
  list_push_back(queue, page);
  if (queue->first == page) heap_direct_update(heap, page->size_class);
}

/* Park a page with no free block; false when remote frees beat us to it. */
static bool heap_park(shoal_heap_t *heap, shoal_page_t *page) {
  if (!page_park_full(page)) return false;
  page_mark_parked(page);
  list_push_front(&heap->full, page);
  return true;
}

static void heap_unpark_listed(shoal_heap_t *heap, shoal_page_t *page) {
  list_remove(&heap->full, page);
  page_mark_unparked(page);
}

/* ---- page retirement and remote-free notifications ---- */

/* A dead thread's heap keeps what it freed warm for the thread that adopts
 * it (threads come and go in pools: purging at each exit made the next
 * thread fault it all in again, a third of mstress's time), until its purge
 * is due; then the next slow path of any thread gives it back. */
static void abandoned_purge_note(int64_t at) {
  int64_t due = atomic_load_explicit(&abandoned_purge_at_ms, memory_order_relaxed);
  while ((due == 0 || at < due) &&
         !atomic_compare_exchange_weak_explicit(&abandoned_purge_at_ms, &due, at,
                                                memory_order_relaxed, memory_order_relaxed)) {
  }
}

static void heap_maybe_purge(shoal_heap_t *heap) {
  int64_t now = os_now_ms();
  if (heap->purge_at_ms != 0 && now >= heap->purge_at_ms)
    segment_purge_heap(heap);
  else if (atomic_load_explicit(&arena_purge_at_ms, memory_order_relaxed) != 0)
    arena_cache_trim(false);
  int64_t abandoned_due = atomic_load_explicit(&abandoned_purge_at_ms, memory_order_relaxed);
  if (abandoned_due != 0 && now >= abandoned_due &&
      atomic_compare_exchange_strong_explicit(&abandoned_purge_at_ms, &abandoned_due, 0,
                                              memory_order_relaxed, memory_order_relaxed))
    heap_service_all_abandoned(); /* each re-notes its deadline if not due yet */
}

static bool page_is_alone_in_queue(shoal_heap_t *heap, shoal_page_t *page) {
  page_queue_t *queue = &heap->queues[page->size_class];
  return queue->first == page && queue->last == page;
}

/* An empty page in a queue: keep the last one of its class (against
 * alloc/free thrash at a page boundary), give the others back. */
void heap_page_retire(shoal_heap_t *heap, shoal_page_t *page) {
  if (page->size_class == CLASS_LARGE) {
    segment_page_free(heap, page);
    return;
  }
  if (page_is_alone_in_queue(heap, page)) {
    heap_maybe_purge(heap); /* a page just emptied: a quiet moment to see if a purge is due */
    return;
  }
  queue_remove(heap, page);
  segment_page_free(heap, page);
}

/* A page whose remote frees arrived while parked. `abandoned`: nobody will
 * allocate from it, so it goes back to the full list (re-armed) unless empty. */
static void heap_take_notified_page(shoal_heap_t *heap, shoal_page_t *page, bool abandoned) {
  heap_unpark_listed(heap, page);
  for (;;) {
    page_collect(page);
    if (page->used == 0) {
      if (page->size_class == CLASS_LARGE || abandoned) {
        segment_page_free(heap, page);
        return;
      }
      break;
    }
    if (!abandoned && page->size_class != CLASS_LARGE) break;
    if (heap_park(heap, page)) return;
  }
  heap_queue_push_back(heap, page);
  if (page->used == 0) heap_page_retire(heap, page);
}

static void heap_drain(shoal_heap_t *heap, bool abandoned) {
  shoal_page_t *page = atomic_exchange_explicit(&heap->notified, NULL, memory_order_acquire);
  while (page != NULL) {
    shoal_page_t *next = page->next_notified;
    shoal_heap_t *owner = (shoal_heap_t *)atomic_load_explicit(&page->owner, memory_order_relaxed);
    if (likely(owner == heap)) {
      heap_take_notified_page(heap, page, abandoned);
    } else {
      /* Notified here by a freer that read the owner before this dead
       * heap's segment went to a live heap (heap_take_dead_segment): on to
       * the page's heap now. */
      shoal_heap_t *abandoned_owner = page_notify(page, owner);
      if (abandoned_owner != NULL) heap_service_abandoned(abandoned_owner);
    }
    page = next;
  }
}

void heap_drain_notified(shoal_heap_t *heap) {
  if (atomic_load_explicit(&heap->notified, memory_order_relaxed) != NULL) heap_drain(heap, false);
}

/* ---- a dead thread's memory for a live thread ---- */

/* The dead heap's segment with the most free slices, its pages and all, to
 * `heap`: its parked pages to heap's full list, its queued pages behind
 * heap's. The dead heap is held by its servicer (the caller). */
static bool heap_take_dead_segment(shoal_heap_t *heap, shoal_heap_t *dead) {
  shoal_segment_t *best = NULL;
  size_t best_free = 0;
  for (shoal_segment_t *segment = dead->segments; segment != NULL; segment = segment->next) {
    size_t free_count = bit_count(segment->free_slices);
    if (free_count > best_free) best = segment, best_free = free_count;
  }
  if (best == NULL) return false;
  for (size_t slice = 1; slice < SLICES_PER_SEGMENT;) {
    if (best->free_slices & ((uint64_t)1 << slice)) { /* its descriptor may be stale */
      slice++;
      continue;
    }
    shoal_page_t *page = segment_page_of(best, (uint8_t *)best + slice * SLICE_SIZE);
    slice += page->slice_count;
    if (page->size_class != CLASS_NONE) {
      if (page->flags & PAGE_FULL) {
        list_remove(&dead->full, page);
        atomic_store_explicit(&page->owner, (uintptr_t)heap, memory_order_relaxed);
        list_push_front(&heap->full, page);
      } else {
        queue_remove(dead, page);
        atomic_store_explicit(&page->owner, (uintptr_t)heap, memory_order_relaxed);
        heap_queue_push_back(heap, page);
      }
    }
  }
  segment_move(dead, heap, best);
  return true;
}

/* This heap needs a segment it does not have: before one is mapped, a dead
 * thread's heap that nobody adopted yet gives it one of its segments, with
 * the pages in it. A thread that runs on while others exit so reuses their
 * memory instead of holding its own beside it, and the rest stays warm for
 * the thread that adopts the dead heap. A remote free that read a moved
 * page's old owner notifies the dead heap, whose drain forwards it. */
static void heap_reuse_dead_memory(shoal_heap_t *heap) {
  shoal_heap_t *dead = arena_abandoned_to_service();
  if (dead == NULL) return;
  heap_drain(dead, true); /* its notified pages are in its lists after this */
  heap_take_dead_segment(heap, dead);
  atomic_store_explicit(&dead->state, HEAP_ABANDONED, memory_order_seq_cst);
  if (atomic_load_explicit(&dead->notified, memory_order_seq_cst) != NULL)
    heap_service_abandoned(dead);
}

/* ---- finding a page with a free block ---- */

/* No purge check here: a heap taking fresh pages is about to reuse what it
 * freed, the worst moment to give that memory back. */
static shoal_page_t *heap_fresh_page(shoal_heap_t *heap, uint8_t size_class) {
  if (heap->segments == NULL) heap_reuse_dead_memory(heap);
  shoal_page_t *page = segment_page_alloc(heap, class_slices[size_class]);
  if (page == NULL) return NULL;
  page_init(page, heap, class_block_size[size_class], size_class, page->is_zero);
  page_extend(page);
  heap_queue_push(heap, page);
  return page;
}

static shoal_page_t *heap_find_queued_page(shoal_heap_t *heap, uint8_t size_class) {
  shoal_page_t *page = heap->queues[size_class].first;
  while (page != NULL) {
    shoal_page_t *next = page->next;
    if (page->free == NULL) page_collect(page);
    if (page->free != NULL || page_extend(page)) {
      if (heap->queues[size_class].first != page) { /* serve from the front */
        queue_remove(heap, page);
        heap_queue_push(heap, page);
      }
      return page;
    }
    queue_remove(heap, page);
    if (!heap_park(heap, page)) { /* remote frees arrived meanwhile */
      page_collect(page);
      heap_queue_push(heap, page);
      return page;
    }
    page = next;
  }
  return heap_fresh_page(heap, size_class);
}

/* Other threads' blocks this thread freed come first: they are in its cache
 * already, and using them sends nothing back across threads. */
static shoal_page_t *heap_find_page(shoal_heap_t *heap, uint8_t size_class) {
  heap_drain_notified(heap);
  if (size_class < REMOTE_CACHE_CLASSES) {
    shoal_page_t *cache = &heap->remote_cache[size_class];
    if (cache->free != NULL) {
      heap_direct_set(heap, size_class, cache);
      return cache;
    }
    page_fold_counters(heap, cache);
    cache->reserved = cache->used = cache->used_at_fold = 0;
  }
  shoal_page_t *page = heap_find_queued_page(heap, size_class);
  if (size_class < REMOTE_CACHE_CLASSES) heap_direct_update(heap, size_class);
  return page;
}

/* Only a thread that allocates the class itself (it has a page of it)
 * keeps another thread's block: one that only frees (a consumer) would
 * strand it, and one whose first malloc of the class it would serve would
 * write beside the other thread's blocks in their cache lines (Hoard's
 * cache-scratch ran 2.6 times slower so). */
bool heap_remote_cache_push(shoal_heap_t *heap, uint8_t size_class, shoal_block_t *block) {
  if (size_class >= REMOTE_CACHE_CLASSES || heap->queues[size_class].first == NULL) return false;
  shoal_page_t *cache = &heap->remote_cache[size_class];
  if ((cache->reserved - cache->used) * class_block_size[size_class] >= REMOTE_CACHE_BYTES)
    return false;
  block->next = cache->free;
  cache->free = block;
  cache->reserved++;
  return true;
}

/* ---- the outbox ---- */

static inline size_t outbox_index(const shoal_page_t *page) {
  return (size_t)(((uintptr_t)page * 0x9E3779B97F4A7C15u) >> 58);
}

static void outbox_send(shoal_heap_t *heap, size_t index) {
  outbox_slot_t *slot = &heap->outbox[index];
  shoal_heap_t *abandoned_owner = page_push_remote(slot->page, slot->head, slot->tail, slot->count);
  slot->page = NULL;
  heap->outbox_occupied &= ~((uint64_t)1 << index);
  if (unlikely(abandoned_owner != NULL)) heap_service_abandoned(abandoned_owner);
}

void heap_outbox_push(shoal_heap_t *heap, shoal_page_t *page, shoal_block_t *block) {
  size_t index = outbox_index(page);
  outbox_slot_t *slot = &heap->outbox[index];
  if (slot->page != page) {
    if (slot->page != NULL) outbox_send(heap, index);
    slot->page = page;
    slot->head = NULL;
    slot->tail = block;
    slot->count = 0;
    heap->outbox_occupied |= (uint64_t)1 << index;
  }
  block->next = slot->head;
  slot->head = block;
  if (++slot->count * page->shared_block_size >= OUTBOX_BYTES) outbox_send(heap, index);
}

void heap_outbox_flush(shoal_heap_t *heap) {
  while (heap->outbox_occupied != 0)
    outbox_send(heap, (size_t)__builtin_ctzll(heap->outbox_occupied));
}

/* Send every cached block home, e.g. when the thread ends. */
void heap_remote_cache_flush(shoal_heap_t *heap) {
  for (uint8_t size_class = 0; size_class < REMOTE_CACHE_CLASSES; size_class++) {
    shoal_page_t *cache = &heap->remote_cache[size_class];
    shoal_block_t *block = cache->free;
    cache->free = NULL;
    page_fold_counters(heap, cache);
    cache->reserved = cache->used = cache->used_at_fold = 0;
    heap_direct_update(heap, size_class);
    while (block != NULL) {
      shoal_block_t *next = block->next;
      heap_outbox_push(heap, segment_page_of(segment_of(block), block), block);
      block = next;
    }
  }
  heap_outbox_flush(heap);
}

static slow_path void *out_of_memory(void) {
  errno = ENOMEM;
  return NULL;
}

void *heap_malloc_medium(shoal_heap_t *heap, size_t size) {
  uint8_t size_class = size_class_of(size);
  shoal_page_t *page = heap->queues[size_class].first;
  /* A small class gets here when its direct page ran dry: find_page also
   * re-points the direct slots. */
  if (size_class < REMOTE_CACHE_CLASSES || page == NULL || page->free == NULL) {
    if (page != NULL) page_fold_counters(heap, page);
    page = heap_find_page(heap, size_class);
    if (page == NULL) return out_of_memory();
  }
  return page_pop(heap, page);
}

static void *heap_malloc_huge(shoal_heap_t *heap, size_t size, size_t alignment, bool zero) {
  void *block = huge_alloc(size, alignment, zero);
  if (block == NULL) return out_of_memory();
  counter_add(&heap->counters.allocated[CLASS_HUGE], 1);
  counter_add(&heap->counters.outsized_allocated_bytes,
              huge_usable_size(segment_find(block), block));
  return block;
}

void *heap_calloc_huge(shoal_heap_t *heap, size_t size) {
  if (size > PTRDIFF_MAX) return out_of_memory();
  return heap_malloc_huge(heap, size, 0, true);
}

/* A block of its own: slices of a segment up to LARGE_MAX, a huge segment
 * beyond. The page is parked from the start so a remote free reaches us. */
void *heap_malloc_large(shoal_heap_t *heap, size_t size, size_t alignment) {
  size_t extra = alignment > SLICE_SIZE ? alignment - SLICE_SIZE : 0;
  if (size > LARGE_MAX || size + extra > LARGE_MAX)
    return heap_malloc_huge(heap, size, alignment, false);
  heap_drain_notified(heap);
  heap_maybe_purge(heap);
  size_t slices = (size + extra + SLICE_SIZE - 1) / SLICE_SIZE;
  if (heap->segments == NULL) heap_reuse_dead_memory(heap);
  shoal_page_t *page = segment_page_alloc(heap, slices);
  if (page == NULL) return out_of_memory();
  uint8_t *block = page->start;
  if (extra != 0)
    block = (uint8_t *)(((uintptr_t)block + alignment - 1) & ~(uintptr_t)(alignment - 1));
  size_t offset = (size_t)(block - page->start);
  page_init(page, heap, large_block_bytes(page, offset + size), CLASS_LARGE, page->is_zero);
  page->has_aligned = offset != 0;
  page->capacity = page->reserved = 1;
  page->used = page->used_at_fold = 1; /* counted below, not by a pop */
  page_publish_extent(page);
  heap_park(heap, page);
  /* Dirty slices may hold a free key; the key of an aligned block is kept
   * at the page start, where free looks for it. */
  ((shoal_block_t *)page->start)->key = 0;
  counter_add(&heap->counters.allocated[CLASS_LARGE], 1);
  counter_add(&heap->counters.outsized_allocated_bytes, page->block_size);
  return block;
}

void *heap_malloc_slow(shoal_heap_t *heap, size_t size) {
  if (unlikely(heap == &heap_empty)) {
    heap = heap_get_or_create();
    if (heap == NULL) return out_of_memory();
  }
  counter_add(&heap->counters.slow_paths, 1);
  if (heap->outbox_occupied != 0) heap_outbox_flush(heap); /* a quiet moment to send them */
  if (unlikely(atomic_load_explicit(&abandoned_purge_at_ms, memory_order_relaxed) != 0))
    heap_maybe_purge(heap);
  if (size <= MEDIUM_MAX) return heap_malloc_medium(heap, size);
  if (size > PTRDIFF_MAX) return out_of_memory();
  return heap_malloc_large(heap, size, 0);
}

/* ---- thread start and exit ---- */

/* A heap adopted from a dead thread: its non-large parked pages may still
 * have free blocks, so move them back to their queues. */
static void heap_take_over(shoal_heap_t *heap) {
  shoal_page_t *page = heap->full.first;
  while (page != NULL) {
    shoal_page_t *next = page->next;
    if (page->size_class != CLASS_LARGE && page_unpark(page)) {
      heap_unpark_listed(heap, page);
      page_collect(page);
      heap_queue_push_back(heap, page);
    }
    page = next;
  }
  heap_drain(heap, false);
}

/* A heap the arena has just carved: zeroed, registered. */
static void heap_init_new(shoal_heap_t *heap) {
  heap->free_key = free_key;
  for (size_t i = 0; i < DIRECT_SLOTS; i++) heap->direct_page[i] = &page_empty;
  for (uint8_t c = 0; c < REMOTE_CACHE_CLASSES; c++) { /* pseudo pages: never freed into */
    shoal_page_t *cache = &heap->remote_cache[c];
    cache->size_class = cache->shared_class = c;
    cache->block_size = cache->shared_block_size = class_block_size[c];
    cache->flags = PAGE_UNUSED;
  }
}

shoal_heap_t *heap_get_or_create(void) {
  /* process_init (run by the caller) may have allocated (the fork handlers)
   * and made our heap. */
  if (thread_heap != &heap_empty) return thread_heap;
  bool adopted = false;
  shoal_heap_t *heap = arena_heap_new_or_adopt(&adopted);
  if (heap == NULL) return NULL;
  if (adopted)
    heap_take_over(heap);
  else
    heap_init_new(heap);
  thread_heap = heap;
  os_thread_exit_arm(heap);
  return heap;
}

/* Bring every page's counts into the heap's counters (page_fold_counters). */
void heap_fold_counters(shoal_heap_t *heap) {
  for (int size_class = 0; size_class < CLASS_COUNT; size_class++)
    for (shoal_page_t *page = heap->queues[size_class].first; page != NULL; page = page->next)
      page_fold_counters(heap, page);
  for (shoal_page_t *page = heap->full.first; page != NULL; page = page->next)
    page_fold_counters(heap, page);
  for (int size_class = 0; size_class < REMOTE_CACHE_CLASSES; size_class++)
    page_fold_counters(heap, &heap->remote_cache[size_class]);
}

/* Give every page the thread still holds to the arena: empty pages go back
 * to their segments now, the rest are parked so that the first remote free
 * into each brings a servicing thread, or an adopter finds them. */
void heap_abandon(shoal_heap_t *heap) {
  heap_fold_counters(heap);
  heap_remote_cache_flush(heap);
  heap_drain(heap, false);
  for (int size_class = 0; size_class < CLASS_COUNT; size_class++) {
    page_queue_t *queue = &heap->queues[size_class];
    while (queue->first != NULL) {
      shoal_page_t *page = queue->first;
      list_remove(queue, page);
      for (;;) {
        page_collect(page);
        if (page->used == 0) {
          segment_page_free(heap, page);
          break;
        }
        if (heap_park(heap, page)) break;
      }
    }
    heap_direct_update(heap, (uint8_t)size_class);
  }
  /* Warm for the thread that adopts this heap next, up to the purge limit
   * (beyond it, lazily purged now), until its purge is due. */
  if (heap->purge_pending_bytes > (size_t)option(SHOAL_OPTION_PURGE_LIMIT))
    segment_purge_heap_lazy(heap);
  if (heap->purge_at_ms != 0) abandoned_purge_note(heap->purge_at_ms);
  atomic_store_explicit(&heap->state, HEAP_ABANDONED, memory_order_seq_cst);
  arena_heap_abandoned(heap);
  if (atomic_load_explicit(&heap->notified, memory_order_seq_cst) != NULL)
    heap_service_abandoned(heap);
}

/* Run by a thread that freed into a dead thread's heap: act as its owner
 * for a moment, return what became empty, re-park the rest. */
void heap_service_abandoned(shoal_heap_t *heap) {
  for (;;) {
    int expected = HEAP_ABANDONED;
    if (!atomic_compare_exchange_strong_explicit(&heap->state, &expected, HEAP_SERVICING,
                                                 memory_order_seq_cst, memory_order_relaxed))
      return; /* adopted, or someone else is servicing it */
    heap_drain(heap, true);
    heap_maybe_purge(heap);
    if (heap->purge_at_ms != 0) abandoned_purge_note(heap->purge_at_ms);
    atomic_store_explicit(&heap->state, HEAP_ABANDONED, memory_order_seq_cst);
    if (atomic_load_explicit(&heap->notified, memory_order_seq_cst) == NULL) return;
  }
}

static void service_if_abandoned(shoal_heap_t *heap, void *context) {
  (void)context;
  if (atomic_load_explicit(&heap->state, memory_order_seq_cst) == HEAP_ABANDONED)
    heap_service_abandoned(heap);
}

void heap_service_all_abandoned(void) {
  arena_for_each_heap(service_if_abandoned, NULL);
}

void heap_thread_exit(void *value) {
  if (core_hooks.thread_exit != NULL) core_hooks.thread_exit();
  shoal_heap_t *heap = value;
  if (heap != NULL && heap == thread_heap_parked) { /* diagnostics kept it aside */
    thread_heap_parked = NULL;
    thread_heap = heap;
  }
  if (heap == NULL || heap == &heap_empty || heap != thread_heap) return;
  thread_heap = &heap_empty;
  thread_exited = true;
  heap_abandon(heap);
}

/* A thread that frees before it ever allocated (a consumer) gets its heap
 * now: counting its frees in the shared orphan counters, with an atomic
 * add on one line for every thread, took half of a consumer's time. After
 * its exit hook ran (the C library frees thread data late) it gets none:
 * nobody would abandon it. */
shoal_heap_t *heap_of_freeing_thread(void) {
  if (thread_exited) return &heap_empty;
  shoal_heap_t *heap = heap_get_or_create();
  return heap != NULL ? heap : &heap_empty;
}

/* Collect every page's frees; with force, return all that is empty now. */
void heap_collect(shoal_heap_t *heap, bool force) {
  heap_fold_counters(heap);
  if (force) heap_remote_cache_flush(heap);
  heap_outbox_flush(heap);
  heap_drain_notified(heap);
  for (int size_class = 0; size_class < CLASS_COUNT; size_class++) {
    shoal_page_t *page = heap->queues[size_class].first;
    while (page != NULL) {
      shoal_page_t *next = page->next;
      page_collect(page);
      if (force && page->used == 0) {
        queue_remove(heap, page);
        segment_page_free(heap, page);
      }
      page = next;
    }
  }
  if (force) {
    segment_purge_heap(heap);
    huge_cache_trim(true);
  } else {
    heap_maybe_purge(heap);
  }
}
