/* page.c — a run of blocks of one size: carve, collect, park.
 *
 * A page has two free lists, so the owner never needs an atomic to
 * allocate or to free its own blocks:
 *   free          blocks to hand out, and the owner's frees (owner);
 *   xthread_free  blocks other threads freed, pushed a chain at a time with
 *                 one CAS (a thread gathers its frees of a page first,
 *                 heap.c's outbox), with their count in the word's top 16
 *                 bits, so the owner takes them all with one exchange and
 *                 knows how many without walking them.
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

#include <inttypes.h>
#include <string.h>

#define NOTIFY_BIT   ((uintptr_t)1)
#define POINTER_MASK ((((uintptr_t)1 << XTHREAD_COUNT_SHIFT) - 1) & ~NOTIFY_BIT)
_Static_assert(ADDRESS_BITS < XTHREAD_COUNT_SHIFT, "the count sits above every address");
_Static_assert(SLICE_SIZE / MIN_BLOCK_SIZE < 65536, "a page's blocks fit the 16-bit count");

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

/* A page made on fresh slices (is_zero) that carves is filling: its free
 * list is spent, so every block it carved is live or on its way back from
 * another thread (a small class's own frees do not clear the flag: the
 * free fast path stays a store shorter). When its carving
 * reaches POPULATE_FROM bytes, and at each doubling after, the OS pages up
 * to the next doubling are faulted in by one call, not one fault each. On
 * this virtual machine a fault costs 13.6 µs, the kernel's loop about 1,
 * the first touch after it 4: smallobj (5 M nodes allocated, then freed)
 * -21 %, giveback -34 %. What a page never carves of it stays resident:
 * at most what it carved already, and only in a process that holds
 * POPULATE_MIN_COMMITTED, where that is little (small programs' pages stop
 * early: parallel held 2 % more without the bound), and in a heap that
 * holds POPULATE_MIN_PAGES: many threads that each keep a few pages pass
 * the process's bound with their segments' slices alone (parallel, 64
 * threads, 65 heaps: peak RSS 14.4 → 13.5 MB with this bound). */
static bool page_heap_is_big(const shoal_page_t *page) {
  const shoal_heap_t *heap =
      (const shoal_heap_t *)atomic_load_explicit(&page->owner, memory_order_relaxed);
  return heap_pages_held(heap) >= POPULATE_MIN_PAGES;
}

static void page_populate_ahead(const shoal_page_t *page, size_t from, size_t to) {
  size_t bytes = (size_t)page->slice_count * SLICE_SIZE;
  for (size_t window = POPULATE_FROM; window < bytes; window *= 2)
    if (from <= window && window < to) {
      if (os_committed_bytes() < POPULATE_MIN_COMMITTED || !page_heap_is_big(page)) return;
      size_t end = 2 * window < bytes ? 2 * window : bytes;
      os_populate(page->start + window, end - window);
      return;
    }
}

/* Thread an OS page worth of never-used blocks onto the free list: memory is
 * touched only as it is handed out, so a page costs what it serves. */
bool page_extend(shoal_page_t *page) {
  if (page->capacity >= page->reserved) return false;
  size_t size = page->block_size;
  size_t count = EXTEND_BYTES / size;
  if (count == 0) count = 1;
  if (count > page->reserved - page->capacity) count = page->reserved - page->capacity;
  size_t carved = (size_t)page->capacity * size;
  if (page->is_zero) page_populate_ahead(page, carved, carved + count * size);
  uint8_t *first = page->start + carved;
  uint8_t *last = first + (count - 1) * size;
  uintptr_t key = free_key;
  /* Each block gets the free key as well as the link (the same line): a
   * free of a block never handed out is then a double free to the block
   * test, not a second entry on the free list. A pointer walk: 6
   * instructions a block where an index and a test for the last took 8
   * (smallobj carves 4 M blocks). */
  for (uint8_t *at = first; at < last; at += size) {
    ((shoal_block_t *)at)->next = (shoal_block_t *)(at + size);
    ((shoal_block_t *)at)->key = key;
  }
  ((shoal_block_t *)last)->next = page->free;
  ((shoal_block_t *)last)->key = key;
  page->free = (shoal_block_t *)first;
  page->capacity += (uint32_t)count;
  page_publish_extent(page);
  return true;
}

/* Move other threads' frees onto `free`; returns how many there were. The
 * word says how many; only when `free` is not empty (collect and abandon,
 * not the malloc slow path) is the list walked, to join the two. */
size_t page_collect(shoal_page_t *page) {
  uintptr_t word = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
  if ((word & ~NOTIFY_BIT) == 0) return 0;
  /* Keep the notify bit as it is; take the list and its count. */
  word = atomic_exchange_explicit(&page->xthread_free, word & NOTIFY_BIT, memory_order_acquire);
  shoal_block_t *list = (shoal_block_t *)(word & POINTER_MASK);
  uint32_t count = (uint32_t)(word >> XTHREAD_COUNT_SHIFT);
  if (list == NULL) return 0;
  AUDIT(count <= page->used, "other threads freed more blocks than the page has out", list, count,
        page->used);
  if (page->free != NULL) {
    shoal_block_t *tail = list;
    while (tail->next != NULL) tail = tail->next;
    tail->next = page->free;
  }
  page->free = list;
  page->used -= count;
  page->used_at_fold -= count; /* counted by the threads that freed them */
  page->is_zero = 0;
  return count;
}

/* The malloc slow exit's first try, before the heap's slow lock: a queued
 * page (not parked, so no notification and no drain can race us for its
 * list) whose own list ran dry takes other threads' frees waiting on it.
 * Half of a producer's slow paths found them there (prodcons 1:1: 136,000
 * of 150,000 small ones; rptest t=2: 580,000 of 1.6 M medium ones), and
 * took the lock only to collect them. true: `free` holds blocks now. */
bool page_collect_queued(shoal_page_t *page) {
  uintptr_t word = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
  if (word == 0 || (word & NOTIFY_BIT) != 0 || page->flags != 0) return false;
  page_collect(page);
  return page->free != NULL;
}

/* Other threads' frees, taken when they are all the blocks the page has
 * out (so none can follow): true, and the page is empty. The word's count
 * says so without a walk or an exchange. */
bool page_collect_if_emptied(shoal_page_t *page) {
  uintptr_t word = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
  if (page->used == 0 || (uint32_t)(word >> XTHREAD_COUNT_SHIFT) != page->used) return false;
  page_collect(page);
  return page->used == 0;
}

/* Other threads' frees, all of them, the page armed again in the same
 * exchange (a pool page is never disarmed while it has blocks out): the
 * next remote free notifies the owner anew. acq_rel: the pusher that
 * clears the bit then writes the page's notify link, which the drain that
 * called us has read (as page_park_full hands it over). */
shoal_block_t *page_take_remote_armed(shoal_page_t *page) {
  uintptr_t word = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
  if (word == NOTIFY_BIT) return NULL;
  word = atomic_exchange_explicit(&page->xthread_free, NOTIFY_BIT, memory_order_acq_rel);
  return (shoal_block_t *)(word & POINTER_MASK);
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

slow_path void audit_failed(const char *what, const void *block, long first, long second) {
  message("audit: %s: block " ADDRESS_FORMAT " (%ld, %ld)", what, ADDRESS_ARG(block), first,
          second);
  os_abort();
}

void audit_chain(const shoal_page_t *page, uint8_t size_class, const shoal_block_t *head,
                 const shoal_block_t *tail, uint32_t count) {
  uint32_t seen = 0;
  for (const shoal_block_t *block = head; block != NULL; block = block->next) {
    const shoal_page_t *home = segment_page_of(segment_of(block), block);
    AUDIT(block->key == free_key, "a chain holds a block that is not free", block, seen, count);
    AUDIT(page != NULL ? home == page : home->shared_class == size_class,
          "a chain holds a block of another page", block, seen, count);
    AUDIT(++seen <= count, "a chain is longer than its count", block, seen, count);
    if (block == tail) break;
  }
  AUDIT(seen == count, "a chain is shorter than its count", head, seen, count);
}

void audit_page_empty(const shoal_page_t *page) {
  if (page->size_class >= CLASS_COUNT) return;
  for (uint32_t i = 0; i < page->capacity; i++) {
    const shoal_block_t *block = (const void *)(page->start + (size_t)i * page->block_size);
    AUDIT(block->key == free_key, "a page given back holds a live block", block, i, page->capacity);
  }
}

/* SHOAL_AUDIT: what follows the link and the key in blocks about to go
 * onto a page's remote list, overwritten: once pushed they are the
 * owner's, and a sender that still read them (a parcel's count, once)
 * reads this instead. A class page's blocks only (a pool page keeps its
 * own words); blocks that come home so are never taken for zero
 * (page_collect clears is_zero). */
#define AUDIT_POISON_WORDS 8
static void audit_poison(const shoal_page_t *page, shoal_block_t *head, shoal_block_t *tail) {
  if (page->shared_class >= CLASS_COUNT) return;
  size_t words = page->shared_block_size / WORD_SIZE;
  if (words > AUDIT_POISON_WORDS) words = AUDIT_POISON_WORDS;
  for (shoal_block_t *block = head;; block = block->next) {
    for (size_t i = 2; i < words; i++) ((uintptr_t *)block)[i] = (uintptr_t)0xa5a5a5a5a5a5a5a5u;
    if (block == tail) break;
  }
}

/* Blocks freed by a thread that does not own the page, `count` of them
 * linked from head to tail: one CAS (retried only if another thread pushed
 * at the same instant); the first push onto a parked page tells the owner. */
shoal_heap_t *page_push_remote(shoal_page_t *page, shoal_block_t *head, shoal_block_t *tail,
                               uint32_t count) {
  /* Read while the blocks pushed keep the page in use: once they are on
   * its list, its owner may collect them and give the page back. */
  shoal_heap_t *owner = (shoal_heap_t *)atomic_load_explicit(&page->owner, memory_order_relaxed);
  if (SHOAL_AUDIT) {
    audit_chain(page, 0, head, tail, count);
    audit_poison(page, head, tail);
  }
  uintptr_t word = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
  uintptr_t desired;
  do {
    tail->next = (shoal_block_t *)(word & POINTER_MASK);
    desired = (uintptr_t)head |
              ((uintptr_t)((uint32_t)(word >> XTHREAD_COUNT_SHIFT) + count) << XTHREAD_COUNT_SHIFT);
    /* acq_rel: a pusher that clears the notify bit then uses the page's
     * notify link, which the owner's parking (a release) handed over. */
  } while (!atomic_compare_exchange_weak_explicit(&page->xthread_free, &word, desired,
                                                  memory_order_acq_rel, memory_order_relaxed));
  if (word & NOTIFY_BIT) return page_notify_owner(page);
  /* A parked page is the drain's; a queued one may be empty now. Read
   * before written: the flag stays set through a round of the owner's, and
   * a heap is never unmapped. */
  if (owner != NULL && !atomic_load_explicit(&owner->remote_pushed, memory_order_relaxed))
    atomic_store_explicit(&owner->remote_pushed, true, memory_order_relaxed);
  return NULL;
}

/* Called by the remote freer that cleared the notify bit. The heap is never
 * unmapped, so reaching it is safe even if its thread is gone; then the
 * caller services it, a layer up. */
static shoal_heap_t *page_notify_owner(shoal_page_t *page) {
  return page_notify(page,
                     (shoal_heap_t *)atomic_load_explicit(&page->owner, memory_order_relaxed));
}

/* Past this many slices (2 MiB) of notified pages, the owner is taken to be
 * idle (blocked, descheduled: an owner that allocates drains them at its
 * next slow path) and the notifier serves the heap for it. A producer
 * blocked on a full queue would otherwise hold every block its consumers
 * freed: 8 producer/consumer pairs (bench xmalloc 8) held 4 times the live
 * memory. Set in bytes: with slices of 16 KiB, 32 of them made rptest t=8
 * twelve times slower, serving and purging owners that were running. */
#define IDLE_OWNER_SLICES ((size_t)(2u << 20) >> SLICE_SHIFT)

shoal_heap_t *page_notify(shoal_page_t *page, shoal_heap_t *heap) {
  size_t page_slices = page->slice_count; /* before the push: then the owner may free the page */
  shoal_page_t *head = atomic_load_explicit(&heap->notified, memory_order_relaxed);
  do {
    page->next_notified = head;
  } while (!atomic_compare_exchange_weak_explicit(&heap->notified, &head, page,
                                                  memory_order_seq_cst, memory_order_relaxed));
  if (atomic_load_explicit(&heap->state, memory_order_seq_cst) == HEAP_ABANDONED) return heap;
  size_t slices = page_slices + atomic_fetch_add_explicit(&heap->notified_slices, page_slices,
                                                          memory_order_relaxed);
  return slices >= IDLE_OWNER_SLICES ? heap : NULL;
}
