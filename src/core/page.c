/* page.c — a run of blocks of one size: carve, collect, park.
 *
 * A page has two free lists, so the owner never needs an atomic to
 * allocate or to free its own blocks:
 *   free          blocks to hand out, and the owner's frees (owner);
 *   xthread_free  blocks other threads freed, pushed with one CAS each.
 * When `free` runs dry the slow path collects the other. The owner frees
 * onto `free` itself, last in first out, so a block freed is the next one
 * handed out while still in cache. (A third list for the owner's frees, as
 * in mimalloc's free-list sharding, handed out blocks freed long before and
 * sent every few mallocs to the slow path: a replay of cc1 ran 10 % slower
 * so.) A page whose
 * blocks are all out is "parked" in the heap's full list with bit 0 of
 * xthread_free set; the first remote free clears the bit and queues the page
 * on the owner's notify stack, so a parked page never has to be scanned
 * (FastMM's release stack, seed 003, made lock-free and per page). */
#include "core/internal.h"

#include <string.h>

#define NOTIFY_BIT ((uintptr_t)1)

uintptr_t free_key;

void page_init(shoal_page_t *page, shoal_heap_t *heap, size_t block_size, uint8_t size_class,
               bool is_zero) {
  size_t bytes = (size_t)page->slice_count * SLICE_SIZE;
  page->block_size = (uint32_t)block_size;
  page->size_class = size_class;
  page->reserved = (uint32_t)(bytes / block_size);
  page->capacity = 0;
  page->used = page->used_at_fold = 0;
  page->unfolded_allocs = 0;
  page->free = NULL;
  page->is_zero = is_zero;
  page->flags = 0;
  page->has_aligned = 0;
  page->next = page->prev = page->next_notified = NULL;
  atomic_store_explicit(&page->xthread_free, 0, memory_order_relaxed);
  atomic_store_explicit(&page->owner, (uintptr_t)heap, memory_order_relaxed);
  page_publish_shape(page);
}

/* Thread an OS page worth of never-used blocks onto the free list: memory is
 * touched only as it is handed out, so a page costs what it serves. */
bool page_extend(shoal_page_t *page) {
  if (page->capacity >= page->reserved) return false;
  size_t size = page->block_size;
  size_t count = EXTEND_BYTES / size;
  if (count == 0) count = 1;
  if (count > page->reserved - page->capacity) count = page->reserved - page->capacity;
  uint8_t *first = page->start + (size_t)page->capacity * size;
  /* Each block gets the free key as well as the link (the same line): a
   * free of a block never handed out is then a double free to the block
   * test, not a second entry on the free list. */
  for (size_t i = 0; i < count; i++) {
    shoal_block_t *block = (shoal_block_t *)(first + i * size);
    block->next = i + 1 < count ? (shoal_block_t *)(first + (i + 1) * size) : page->free;
    block->key = free_key;
  }
  page->free = (shoal_block_t *)first;
  page->capacity += (uint32_t)count;
  page_publish_extent(page);
  return true;
}

/* Move other threads' frees onto `free`; returns how many there were. */
size_t page_collect(shoal_page_t *page) {
  uintptr_t head = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
  if ((head & ~NOTIFY_BIT) == 0) return 0;
  /* Keep the notify bit as it is; take the list. */
  head = atomic_exchange_explicit(&page->xthread_free, head & NOTIFY_BIT, memory_order_acquire);
  shoal_block_t *list = (shoal_block_t *)(head & ~NOTIFY_BIT);
  if (list == NULL) return 0;
  size_t count = 1;
  shoal_block_t *tail = list;
  while (tail->next != NULL) {
    tail = tail->next;
    count++;
  }
  tail->next = page->free;
  page->free = list;
  page->used -= (uint32_t)count;
  page->used_at_fold -= (uint32_t)count; /* counted by the threads that freed them */
  page->is_zero = 0;
  return count;
}

bool page_park_full(shoal_page_t *page) {
  uintptr_t expected = 0;
  return atomic_compare_exchange_strong_explicit(&page->xthread_free, &expected, NOTIFY_BIT,
                                                 memory_order_acq_rel, memory_order_relaxed);
}

bool page_unpark(shoal_page_t *page) {
  uintptr_t expected = NOTIFY_BIT;
  return atomic_compare_exchange_strong_explicit(&page->xthread_free, &expected, 0,
                                                 memory_order_acq_rel, memory_order_relaxed);
}

static shoal_heap_t *page_notify_owner(shoal_page_t *page);

/* A block freed by a thread that does not own the page: one CAS (retried
 * only if another thread pushed at the same instant); the first push onto a
 * parked page tells the owner. */
shoal_heap_t *page_push_remote(shoal_page_t *page, shoal_block_t *block) {
  uintptr_t head = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
  do {
    block->next = (shoal_block_t *)(head & ~NOTIFY_BIT);
    /* acq_rel: a pusher that clears the notify bit then uses the page's
     * notify link, which the owner's parking (a release) handed over. */
  } while (!atomic_compare_exchange_weak_explicit(&page->xthread_free, &head, (uintptr_t)block,
                                                  memory_order_acq_rel, memory_order_relaxed));
  return (head & NOTIFY_BIT) != 0 ? page_notify_owner(page) : NULL;
}

/* Called by the remote freer that cleared the notify bit. The heap is never
 * unmapped, so reaching it is safe even if its thread is gone; then the
 * caller services it, a layer up. */
static shoal_heap_t *page_notify_owner(shoal_page_t *page) {
  shoal_heap_t *heap = (shoal_heap_t *)atomic_load_explicit(&page->owner, memory_order_relaxed);
  shoal_page_t *head = atomic_load_explicit(&heap->notified, memory_order_relaxed);
  do {
    page->next_notified = head;
  } while (!atomic_compare_exchange_weak_explicit(&heap->notified, &head, page,
                                                  memory_order_seq_cst, memory_order_relaxed));
  bool abandoned = atomic_load_explicit(&heap->state, memory_order_seq_cst) == HEAP_ABANDONED;
  return abandoned ? heap : NULL;
}
