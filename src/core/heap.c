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
 * and adopted whole (state LIVE again) by a new thread.
 *
 * A live thread that does not run (blocked on a queue, descheduled) would
 * keep every block other threads free into its pages until it next
 * allocates. So a freeing thread that finds the owner's notified pages
 * piling up serves the heap for it (heap_serve_idle): under the heap's
 * slow lock, which the owner holds through its own slow paths (never its
 * fast paths), it returns the empty pages, parks the others again for the
 * owner, and purges; a heap short of slices takes a half-free segment of
 * such an idle heap before the arena maps one (heap_take_idle_segment), or
 * borrows a page's worth of another heap's resident free slices: a guest
 * page, its own, in that heap's segment (heap_borrow_slices). */
#define _GNU_SOURCE
#include "core/internal.h"

#include <errno.h>
#include <string.h>

/* The earliest time a dead thread's heap is due for its purge; 0: none.
 * Any thread's slow path after it services such heaps (heap_maybe_purge). */
_Atomic(int64_t) others_purge_at_ms;

shoal_page_t page_empty;
shoal_heap_t heap_empty = {
    .direct_page = {[0 ... DIRECT_SLOTS - 1] = &page_empty},
};
__attribute__((tls_model("initial-exec"))) _Thread_local shoal_heap_t *thread_heap = &heap_empty;
__attribute__((tls_model("initial-exec"))) _Thread_local shoal_heap_t *thread_heap_parked;
static _Thread_local bool thread_exited; /* its heap was abandoned at its exit */
core_hooks_t core_hooks;

/* A few heaps for others to find, by hint: entries may be stale, each is
 * checked when held. `count` slots of HEAP_SLOTS_MAX are used. */
#define HEAP_SLOTS_MAX 64
typedef struct heap_slots_s {
  size_t count;
  _Atomic(shoal_heap_t *) heaps[HEAP_SLOTS_MAX];
  _Atomic(unsigned) next;
} heap_slots_t;

static void heap_slots_note(heap_slots_t *slots, shoal_heap_t *heap) {
  for (size_t i = 0; i < slots->count; i++)
    if (atomic_load_explicit(&slots->heaps[i], memory_order_relaxed) == heap) return;
  unsigned slot = atomic_fetch_add_explicit(&slots->next, 1, memory_order_relaxed);
  atomic_store_explicit(&slots->heaps[slot % slots->count], heap, memory_order_relaxed);
}

/* Slot i no longer names `heap`, unless noted again meanwhile. */
static void heap_slots_forget(heap_slots_t *slots, size_t i, shoal_heap_t *heap) {
  atomic_compare_exchange_strong_explicit(&slots->heaps[i], &heap, NULL, memory_order_relaxed,
                                          memory_order_relaxed);
}

/* ---- queues ---- */

/* Point the direct slots of a small class at a page (a medium class has
 * none: its pages are found through its queue). */
static void heap_direct_set(shoal_heap_t *heap, uint8_t size_class, shoal_page_t *page) {
  if (size_class >= DIRECT_CLASSES) return;
  size_t slot = (size_t)(class_block_size[size_class] / WORD_SIZE);
  while (direct_class[slot] == size_class) {
    heap->direct_page[slot] = page;
    if (slot == 0) break;
    slot--;
  }
}

/* Keep direct_page in step with the first page of each small class. */
static void heap_direct_update(shoal_heap_t *heap, uint8_t size_class) {
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

/* A page leaving its queue (parked, retired) stops serving the classes
 * below it whose direct slots it was lent to (heap_find_page). */
static void queue_remove(shoal_heap_t *heap, shoal_page_t *page) {
  bool was_first = heap->queues[page->size_class].first == page;
  list_remove(&heap->queues[page->size_class], page);
  if (was_first) heap_direct_update(heap, page->size_class);
  for (unsigned below = 1; below <= BORROW_CLASSES; below++) {
    if (page->size_class < BORROW_FROM_CLASS + below) break;
    unsigned borrower = page->size_class - below;
    if (borrower < DIRECT_CLASSES &&
        heap->direct_page[class_block_size[borrower] / WORD_SIZE] == page)
      heap_direct_update(heap, (uint8_t)borrower);
  }
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

/* The list a parked page is in. */
static page_queue_t *parked_list(shoal_heap_t *heap, shoal_page_t *page) {
  if (page->size_class == CLASS_POOL) return &heap->pool; /* armed as parked pages are */
  return (page->flags & PAGE_REPARKED) ? &heap->reparked : &heap->full;
}

void heap_unpark_listed(shoal_heap_t *heap, shoal_page_t *page) {
  list_remove(parked_list(heap, page), page);
  page->flags &= (uint8_t)~PAGE_REPARKED;
  page_mark_unparked(page);
}

/* ---- pages back to their segments ---- */

/* While this thread serves another live heap: its own heap, where the
 * counts of what it gives back go (that heap's counters are its owner's,
 * written without a lock). */
static _Thread_local shoal_heap_t *serving_counts_in;

/* Heaps that kept resident free slices (at least LEND_MIN_PENDING_BYTES):
 * a heap that needs a page and has no free slice (for a large block or a
 * pool page: no resident one) borrows one there (heap_borrow_slices). */
#define LEND_MIN_PENDING_BYTES (1 * SLICE_SIZE)
static heap_slots_t lenders = {.count = 64};

static void heap_give_back_guest(shoal_heap_t *heap, shoal_page_t *page);

/* A page's slices to its segment, the heap's (held by the caller). */
static void heap_slices_back(shoal_heap_t *heap, shoal_page_t *page) {
  if (SHOAL_AUDIT) audit_page_empty(page);
  segment_page_free(heap, page);
  if (heap->purge_pending_bytes >= LEND_MIN_PENDING_BYTES) heap_slots_note(&lenders, heap);
}

/* The page's counts to the heap's counters (or the serving thread's), its
 * slices to its segment. */
static void heap_page_give_back(shoal_heap_t *heap, shoal_page_t *page) {
  page_fold_counters(serving_counts_in != NULL ? serving_counts_in : heap, page);
  if (unlikely(atomic_load_explicit(&page->guest, memory_order_relaxed) != 0))
    heap_give_back_guest(heap, page);
  else
    heap_slices_back(heap, page);
}

/* ---- page retirement and remote-free notifications ---- */

/* A dead thread's heap keeps what it freed warm for the thread that adopts
 * it (threads come and go in pools: purging at each exit made the next
 * thread fault it all in again, a third of mstress's time), until its purge
 * is due; then the next slow path of any thread gives it back. So does the
 * heap of an idle thread that others served (heap_serve_idle). */
/* A shared deadline (0: none) brought forward to `at` if that is earlier. */
static void deadline_note(_Atomic(int64_t) *deadline, int64_t at) {
  int64_t due = atomic_load_explicit(deadline, memory_order_relaxed);
  while ((due == 0 || at < due) &&
         !atomic_compare_exchange_weak_explicit(deadline, &due, at, memory_order_relaxed,
                                                memory_order_relaxed)) {
  }
}

static void others_purge_note(int64_t at) {
  deadline_note(&others_purge_at_ms, at);
}

static void heap_serve_all_idle(void);

/* A dead thread's heap waits PURGE_DEAD_DELAYS for an adopter. */
static int64_t heap_dead_purge_at(const shoal_heap_t *heap) {
  return heap->abandoned_ms + purge_wait(PURGE_DEAD_DELAYS);
}

/* A page whose tail went back (TAIL_PURGED) is watched for TAIL_WATCH_DELAYS
 * purge delays (the refault window of slices), and carving into it meanwhile
 * is a refault, which lengthens the delay in force as a purged slice taken
 * again does. Unpaced, pages made and emptied all the time gave their tails
 * back each delay and faulted them in again: rptest quick t=2 8 % slower,
 * mstress t=2 / t=8 / t=64 17-22 % slower, for peak RSS within 2 %. */
#define TAIL_WATCH_DELAYS 4

/* A class page carves its slices an OS page or a block at a time, and a
 * page made on slices that a large block or another class's page touched
 * keeps the rest of them resident, where no other class and no other page
 * can use it (mtalloc t=2: 1.25 of its 7.2 MiB at the peak). At a due
 * purge, and (`idle_only`) at the tails' own check for pages that have
 * carved nothing since the check before (heap_tails_check), what such a
 * page has not carved since it was made is given back; carving into it
 * later faults it in as fresh memory (a refault, if soon: TAIL_PURGED).
 * Only queued pages can have such a part: a parked one has carved all it
 * holds. */
static void heap_purge_untouched_tails(shoal_heap_t *heap, bool idle_only) {
  if (!heap->touched_tails) return;
  heap->touched_tails = false;
  size_t os_page = os_page_size();
  int64_t now = os_now_ms();
  bool watching = now - heap->tails_purged_ms < TAIL_WATCH_DELAYS * purge_delay();
  bool refaulted = false, purged = false;
  for (size_t size_class = 0; size_class < CLASS_COUNT; size_class++) {
    for (shoal_page_t *page = heap->queues[size_class].first; page != NULL; page = page->next) {
      if (page->touched_tail == TAIL_PURGED) {
        if (page->capacity != page->tail_capacity) {
          refaulted = true; /* it carved into what went back */
          page->touched_tail = 0;
        } else if (watching) {
          heap->touched_tails = true;
        } else {
          page->touched_tail = 0;
        }
        continue;
      }
      if (!page->touched_tail) continue;
      if (idle_only && page->capacity != page->tail_capacity) {
        page->tail_capacity = page->capacity; /* still carving: looked at again next time */
        heap->touched_tails = true;
        continue;
      }
      page->touched_tail = 0;
      uintptr_t carved = (uintptr_t)page->start + (size_t)page->capacity * page->block_size;
      uintptr_t from = (carved + os_page - 1) & ~(os_page - 1);
      uintptr_t end = (uintptr_t)page->start + (size_t)page->slice_count * SLICE_SIZE;
      if (from < end) {
        os_purge((void *)from, end - from);
        purged = true;
        page->touched_tail = TAIL_PURGED;
        page->tail_capacity = page->capacity;
        heap->touched_tails = true;
      }
    }
  }
  if (refaulted) purge_note_refault(heap->tails_purged_ms);
  if (purged) heap->tails_purged_ms = now;
}

/* The owner's slow paths look at the touched tails once a purge delay
 * from the first of them, not only at the heap's due purge: frees in a
 * burst put that off up to PURGE_BURST_DELAYS, and a program that starts
 * by making its pages keeps a page's worth for each meanwhile (mtalloc
 * t=2: 1 MB more for its first 100 ms, its peak). A page that carved
 * since the last look keeps its tail till the next: it is about to carve
 * there (mstress t=8, whose threads come and go: +6-12 % time when every
 * tail went at the first look). */
static void heap_tails_check(shoal_heap_t *heap, int64_t now) {
  if (!heap->touched_tails || heap != thread_heap || now < heap->tails_purge_at_ms) return;
  heap_purge_untouched_tails(heap, true);
  heap->tails_purge_at_ms = now + purge_delay();
}

/* The free blocks of the heap's pool pages: those free since the last
 * due purge give their inner OS pages back (all of them, with `all`). */
static void heap_pool_purge(shoal_heap_t *heap, bool all) {
  for (shoal_page_t *page = heap->pool.first; page != NULL; page = page->next)
    pool_purge(page, all);
}

/* The purge delay has passed on the clock. A heap that has freed no page
 * for two delays is quiet: its owner is blocked or busy elsewhere, and all
 * its free slices go. Else only the slices it has not freed since the last
 * purge go now. An owner that has only waited for cores meanwhile counts
 * the delay on its own CPU time: 8 threads on 2 cores wait 9 ms of every
 * 12, and purging on the clock, largemix t=8 and mstress t=8 faulted in 2-4
 * times the memory of the best allocator. */
static void heap_purge_due(shoal_heap_t *heap, int64_t now) {
  long delay = purge_delay();
  if (heap != thread_heap) { /* a dead thread's, serviced: warm for an adopter a while */
    int64_t due = heap_dead_purge_at(heap);
    if (now < due) {
      atomic_store_explicit(&heap->purge_at_ms, due, memory_order_relaxed);
    } else {
      heap_pool_purge(heap, true);
      segment_purge_heap(heap);
    }
    return;
  }
  os_thread_usage_t usage = os_thread_usage(), *last = &heap->purge_usage;
  bool contended = usage.preempted != last->preempted && usage.waited == last->waited;
  if (contended && usage.cpu_ms - last->cpu_ms < delay) { /* its own time: not a delay yet */
    atomic_store_explicit(&heap->purge_at_ms, now + delay, memory_order_relaxed);
    return;
  }
  *last = usage;
  heap_purge_untouched_tails(heap, false);
  heap_pool_purge(heap, false);
  if (!contended && now - heap->page_freed_ms >= 2 * delay)
    segment_purge_heap(heap);
  else
    segment_purge_heap_aged(heap);
}

static void heap_maybe_purge(shoal_heap_t *heap) {
  int64_t now = os_now_ms();
  heap_tails_check(heap, now);
  int64_t purge_at = atomic_load_explicit(&heap->purge_at_ms, memory_order_relaxed);
  if (purge_at != 0 && now >= purge_at)
    heap_purge_due(heap, now);
  else if (atomic_load_explicit(&arena_purge_at_ms, memory_order_relaxed) != 0)
    arena_cache_trim(false);
  int64_t others_due = atomic_load_explicit(&others_purge_at_ms, memory_order_relaxed);
  if (others_due != 0 && now >= others_due &&
      atomic_compare_exchange_strong_explicit(&others_purge_at_ms, &others_due, 0,
                                              memory_order_relaxed, memory_order_relaxed)) {
    heap_service_all_abandoned(); /* each re-notes its deadline if not due yet */
    heap_serve_all_idle();
  }
}

static bool page_is_alone_in_queue(shoal_heap_t *heap, shoal_page_t *page) {
  page_queue_t *queue = &heap->queues[page->size_class];
  return queue->first == page && queue->last == page;
}

/* An empty page in a queue: keep the last one of its class (against
 * alloc/free thrash at a page boundary), give the others back. */
void heap_page_retire(shoal_heap_t *heap, shoal_page_t *page) {
  if (page->size_class == CLASS_LARGE) {
    heap_page_give_back(heap, page);
    return;
  }
  if (page_is_alone_in_queue(heap, page)) {
    heap_maybe_purge(heap); /* a page just emptied: a quiet moment to see if a purge is due */
    return;
  }
  queue_remove(heap, page);
  heap_page_give_back(heap, page);
}

/* Who drains a heap's notified pages, and so what becomes of a page that
 * has free blocks now. */
typedef enum drain_mode_e {
  DRAIN_BY_OWNER,      /* back to its queue */
  DRAIN_ABANDONED,     /* nobody allocates: parked again (re-armed) */
  DRAIN_FOR_IDLE_OWNER /* another thread while the owner is idle: parked again, in the
                          reparked list, which the owner's next slow path takes back */
} drain_mode_t;

/* A page whose remote frees arrived while parked. `abandoned`: nobody will
 * allocate from it, so it goes back to the full list (re-armed) unless empty. */
static void heap_take_notified_page(shoal_heap_t *heap, shoal_page_t *page, bool abandoned) {
  heap_unpark_listed(heap, page);
  for (;;) {
    page_collect(page);
    if (page->used == 0) {
      if (page->size_class == CLASS_LARGE || abandoned) {
        heap_page_give_back(heap, page);
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

/* The same for a page that must stay parked while it has blocks: one of an
 * idle owner's, served by another thread (the owner may be freeing into
 * its pages meanwhile: its fast path reads free_limit, which stays 0 here,
 * so every such free waits on the slow lock we hold), or one borrowed from
 * a live heap (its old owner may still read free_limit in a free that
 * began before the move). Empty, it goes back to its segment, and an empty
 * segment to the arena, where any thread takes it; else it is re-armed, in
 * the reparked list for an idle owner to take back, in the full list if
 * borrowed. */
static void heap_take_notified_kept_parked(shoal_heap_t *heap, shoal_page_t *page) {
  list_remove(parked_list(heap, page), page);
  for (;;) {
    page_collect(page);
    if (page->used == 0) {
      heap_page_give_back(heap, page);
      return;
    }
    if (page_park_full(page)) break;
  }
  if (page->flags & PAGE_BORROWED) {
    page->flags &= (uint8_t)~PAGE_REPARKED;
    list_push_front(&heap->full, page);
  } else {
    page->flags |= PAGE_REPARKED;
    list_push_front(&heap->reparked, page);
  }
}

/* An empty guest page on its way back (heap_give_back_guest): to this
 * heap's segment, or on to the notify stack of the heap that holds the
 * segment now. */
static void heap_take_returned_guest(shoal_heap_t *heap, shoal_page_t *page) {
  shoal_heap_t *holder = atomic_load_explicit(&segment_of(page)->heap, memory_order_relaxed);
  if (holder == heap) {
    heap_slices_back(heap, page);
    return;
  }
  atomic_store_explicit(&page->owner, (uintptr_t)holder, memory_order_relaxed);
  shoal_heap_t *to_serve = page_notify(page, holder);
  if (to_serve != NULL) heap_serve(to_serve);
}

static void heap_pool_collect(shoal_page_t *page);
static void heap_pool_page_emptied(shoal_heap_t *heap, shoal_page_t *page, bool keep_last);

/* Pool pages back on the notify stack for their owner (heap_drain). */
static void heap_notify_again(shoal_heap_t *heap, shoal_page_t *first, shoal_page_t *last) {
  shoal_page_t *head = atomic_load_explicit(&heap->notified, memory_order_relaxed);
  do {
    last->next_notified = head;
  } while (!atomic_compare_exchange_weak_explicit(&heap->notified, &head, first,
                                                  memory_order_release, memory_order_relaxed));
}

static void heap_drain(shoal_heap_t *heap, drain_mode_t mode) {
  shoal_page_t *page = atomic_exchange_explicit(&heap->notified, NULL, memory_order_acquire);
  atomic_store_explicit(&heap->notified_slices, 0, memory_order_relaxed);
  /* An idle owner's pool pages stay notified: the owner changes its pool
   * without the slow lock (heap_pool_malloc), so only it joins their
   * blocks. They count no slices: no serve is asked for them. */
  shoal_page_t *for_owner = NULL, *for_owner_last = NULL;
  while (page != NULL) {
    shoal_page_t *next = page->next_notified;
    shoal_heap_t *owner = (shoal_heap_t *)atomic_load_explicit(&page->owner, memory_order_relaxed);
    if (unlikely(atomic_load_explicit(&page->guest, memory_order_relaxed) == GUEST_RETURNING)) {
      heap_take_returned_guest(heap, page);
    } else if (owner == heap && page->size_class == CLASS_POOL) {
      if (mode == DRAIN_FOR_IDLE_OWNER) {
        page->next_notified = for_owner;
        for_owner = page;
        if (for_owner_last == NULL) for_owner_last = page;
      } else {
        heap_pool_collect(page);
        if (page->used == 0) heap_pool_page_emptied(heap, page, mode != DRAIN_ABANDONED);
      }
    } else if (likely(owner == heap)) {
      if (mode == DRAIN_FOR_IDLE_OWNER || (page->flags & PAGE_BORROWED))
        heap_take_notified_kept_parked(heap, page);
      else
        heap_take_notified_page(heap, page, mode == DRAIN_ABANDONED);
    } else {
      /* Notified here by a freer that read the owner before this dead
       * heap's segment went to a live heap (heap_take_segment): on to
       * the page's heap now. */
      shoal_heap_t *to_serve = page_notify(page, owner);
      if (to_serve != NULL) heap_serve(to_serve);
    }
    page = next;
  }
  if (for_owner != NULL) heap_notify_again(heap, for_owner, for_owner_last);
}

/* A borrowed page its owner's own free emptied (and disarmed): back to its
 * segment, never unparked. */
void heap_release_borrowed(shoal_heap_t *heap, shoal_page_t *page) {
  list_remove(&heap->full, page);
  if (page->size_class == CLASS_LARGE) /* the page's used counts the block, not its bytes */
    counter_add(&heap->counters.outsized_freed_bytes, page->block_size);
  heap_page_give_back(heap, page);
}

/* Pages a thread serving this heap parked again with free blocks: the
 * owner's again, unless a remote free has notified them since (then the
 * drain takes them). */
static void heap_take_reparked(shoal_heap_t *heap) {
  shoal_page_t *page = heap->reparked.first;
  while (page != NULL) {
    shoal_page_t *next = page->next;
    if (page_unpark(page)) {
      heap_unpark_listed(heap, page);
      heap_queue_push_back(heap, page);
      if (page->used == 0) heap_page_retire(heap, page);
    }
    page = next;
  }
}

/* The owner, back to a heap that was served while it was away: how it
 * was away. With more threads than cores, an owner that runs (a producer
 * that yields while its consumers' queues are full) is off its core for
 * whole rounds of the others, long enough for them to find its notified
 * pages piling up and serve it several times: purging its free slices
 * then, it faulted them in again as soon as it ran (prodcons, 32
 * consumers on 2 cores: 1 GiB purged and faulted in for a 20 MB peak, time
 * 2.3 times that without). A blocked owner (a producer waiting on a
 * condition) counts voluntary switches; a preempted one involuntary ones
 * only. */
static slow_path void heap_owner_returns(shoal_heap_t *heap) {
  os_thread_usage_t usage = os_thread_usage(), *last = &heap->usage_at_return;
  bool preempted = usage.preempted != last->preempted && usage.waited == last->waited;
  *last = usage;
  atomic_store_explicit(&heap->owner_was_preempted, preempted, memory_order_relaxed);
  atomic_store_explicit(&heap->owner_back_ms, os_now_ms(), memory_order_relaxed);
  heap->owner_cpu_noted = false;
  /* Asked here, not when the heap is made: the call faulted 60 KiB of the
   * C library's text into every process. */
  if (atomic_load_explicit(&heap->owner_thread_id, memory_order_relaxed) == 0)
    atomic_store_explicit(&heap->owner_thread_id, os_thread_id(), memory_order_relaxed);
}

void heap_drain_notified(shoal_heap_t *heap) {
  if (unlikely(heap->serves_while_idle != 0)) heap_owner_returns(heap);
  heap->serves_while_idle = 0;
  if (atomic_load_explicit(&heap->notified, memory_order_relaxed) != NULL)
    heap_drain(heap, DRAIN_BY_OWNER);
  if (unlikely(heap->reparked.first != NULL)) heap_take_reparked(heap);
}

/* ---- a dead thread's memory for a live thread ---- */

/* The next page holding blocks from *slice on (NULL: none), *slice past it. */
static shoal_page_t *segment_next_page(shoal_segment_t *segment, size_t *slice) {
  while (*slice < SLICES_PER_SEGMENT) {
    if (segment->free_slices & ((uint64_t)1 << *slice)) { /* its descriptor may be stale */
      (*slice)++;
      continue;
    }
    shoal_page_t *page = segment_page_of(segment, (uint8_t *)segment + *slice * SLICE_SIZE);
    *slice += page->slice_count;
    if (page->size_class != CLASS_NONE) return page;
  }
  return NULL;
}

/* A page of another heap in this heap's segment, or one on its way back
 * (heap_give_back_guest): the segment's heap must leave it alone. */
static bool page_is_guest(shoal_page_t *page) {
  return atomic_load_explicit(&page->guest, memory_order_relaxed) != 0;
}

/* A segment whose pages are all parked: no queue or direct slot of its heap
 * points into it, so it can change heaps while its owner runs. */
static bool segment_all_parked(shoal_segment_t *segment) {
  size_t slice = 1;
  for (shoal_page_t *page; (page = segment_next_page(segment, &slice)) != NULL;)
    if (!page_is_guest(page) && (!(page->flags & PAGE_FULL) || page->size_class == CLASS_POOL))
      return false; /* guests stay theirs; the owner allocates from its pool pages */
  return true;
}

/* A live heap lends a segment only when at least half of it is free: the
 * owner's frees of blocks in what it lent become remote frees. */
#define LEND_MIN_FREE_SLICES (SLICES_PER_SEGMENT / 2)

/* `from`'s segment with the most free slices (of those all parked and half
 * free, when `from` has an owner), its pages and all, to `heap`: parked
 * pages to the same list of heap's, queued ones behind heap's. `from` is
 * held by the caller (its servicer, or its slow lock). */
static bool heap_take_segment(shoal_heap_t *heap, shoal_heap_t *from, bool all_parked) {
  shoal_segment_t *best = NULL;
  size_t best_free = 0;
  for (shoal_segment_t *segment = from->segments; segment != NULL; segment = segment->next) {
    size_t free_count = bit_count(segment->free_slices);
    if (free_count > best_free &&
        (!all_parked || (free_count >= LEND_MIN_FREE_SLICES && segment_all_parked(segment))))
      best = segment, best_free = free_count;
  }
  if (best == NULL) return false;
  size_t slice = 1;
  for (shoal_page_t *page; (page = segment_next_page(best, &slice)) != NULL;) {
    if (page_is_guest(page))
      continue; /* another heap's (or on its way back): stays so, for the segment's new heap */
    /* Its blocks that other threads freed into their class caches (alloc.h,
     * remote_cache_push) hold what the program wrote, and are this heap's
     * now: its calloc must not take them for fresh (zero_block). */
    page->is_zero = 0;
    if (page->flags & PAGE_FULL) {
      list_remove(parked_list(from, page), page);
      atomic_store_explicit(&page->owner, (uintptr_t)heap, memory_order_relaxed);
      if (all_parked) /* from a live heap: parked until empty (heap_take_notified_kept_parked) */
        page->flags = (uint8_t)((page->flags | PAGE_BORROWED) & ~PAGE_REPARKED);
      list_push_front(parked_list(heap, page), page);
    } else {
      queue_remove(from, page);
      atomic_store_explicit(&page->owner, (uintptr_t)heap, memory_order_relaxed);
      heap_queue_push_back(heap, page);
    }
  }
  segment_move(from, heap, best);
  return true;
}

/* This heap needs a segment it does not have: before one is mapped, a dead
 * thread's heap that nobody adopted yet gives it one of its segments, with
 * the pages in it. A thread that runs on while others exit so reuses their
 * memory instead of holding its own beside it, and the rest stays warm for
 * the thread that adopts the dead heap. A remote free that read a moved
 * page's old owner notifies the dead heap, whose drain forwards it. */
static bool heap_reuse_dead_memory(shoal_heap_t *heap) {
  shoal_heap_t *dead = arena_abandoned_to_service();
  if (dead == NULL) return false;
  heap_drain(dead, DRAIN_ABANDONED); /* its notified pages are in its lists after this */
  bool taken = heap_take_segment(heap, dead, false);
  atomic_store_explicit(&dead->state, HEAP_ABANDONED, memory_order_seq_cst);
  if (atomic_load_explicit(&dead->notified, memory_order_seq_cst) != NULL)
    heap_service_abandoned(dead);
  return taken;
}

/* ---- an idle thread's free memory for a running one ---- */

/* An owner idle through this many serves (no slow path of its own between
 * them) lends its half-free segments; through more, its free slices go
 * back to the OS at once, not a purge delay after the last page a serve
 * freed (serves go on freeing them). */
#define IDLE_SERVES_TO_LEND  2
#define IDLE_SERVES_TO_PURGE 8

/* The owner was only waiting for a core the last time it was served, and
 * came back lately (within two purge delays): it runs, and uses its free
 * slices again when it does; its own purge (heap_purge_due, which counts
 * such waits on its CPU time) gives them back. An owner that has stayed
 * away longer is taken to be idle again. (heap_owner_returns) */
static bool heap_owner_waits_for_core(shoal_heap_t *heap) {
  return atomic_load_explicit(&heap->owner_was_preempted, memory_order_relaxed) &&
         os_now_ms() - atomic_load_explicit(&heap->owner_back_ms, memory_order_relaxed) <
             2 * purge_delay();
}

/* The owner, away through many serves, is runnable (waiting for a core,
 * or yielding in a loop) and has had less than a purge delay of CPU since
 * a serve first saw it so: it is not idle, only away, and uses its free
 * slices when it runs. heap_owner_waits_for_core knows only how the owner
 * was away the time before; with 32 consumers on 2 cores a producer that
 * yields on a full queue was away longer than that allows, and serves gave
 * back its free slices 1,300 times a run, to fault them in again (prodcons
 * 1:32: 17,000-26,000 faults, mimalloc's 3,200). A blocked owner (a
 * producer waiting on a condition) and one that runs without allocating
 * are purged as before. Costs a read of /proc: only when about to purge. */
static bool heap_owner_only_away(shoal_heap_t *heap) {
  os_thread_state_t owner;
  if (!os_thread_state(atomic_load_explicit(&heap->owner_thread_id, memory_order_relaxed),
                       &owner) ||
      !owner.runnable)
    return false;
  if (!heap->owner_cpu_noted) {
    heap->owner_cpu_noted = true;
    heap->owner_cpu_ms_noted = owner.cpu_ms;
    return true;
  }
  return owner.cpu_ms - heap->owner_cpu_ms_noted < purge_delay();
}

static _Atomic(int) fork_gate;           /* 1 while fork prepares: no heap is held by another */
static _Atomic(int) other_holds_running; /* threads holding a live heap not their own */

/* Hold a live heap of another thread, or false: its slow lock, tried once
 * (the owner holds it through its slow paths). Signals wait meanwhile, as
 * for any lock of ours, so a handler's fork never finds the heap half changed. */
static bool heap_hold_other(shoal_heap_t *heap) {
  os_signals_hold();
  if (lock_try_acquire_plain(&heap->slow_lock)) {
    atomic_fetch_add_explicit(&other_holds_running, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&fork_gate, memory_order_seq_cst) == 0 &&
        atomic_load_explicit(&heap->state, memory_order_seq_cst) == HEAP_LIVE)
      return true;
    atomic_fetch_sub_explicit(&other_holds_running, 1, memory_order_seq_cst);
    lock_release_plain(&heap->slow_lock);
  }
  os_signals_release();
  return false;
}

static void heap_release_other(shoal_heap_t *heap) {
  atomic_fetch_sub_explicit(&other_holds_running, 1, memory_order_seq_cst);
  lock_release_plain(&heap->slow_lock);
  os_signals_release();
}

/* ---- guest pages: one heap's resident free slices for another ---- */

/* Threads whose need rises and falls in turn (producers whose batches wait
 * in a queue, a pool of workers) each keep the free slices of their ebb
 * beside their segments' pages, where only they can use them, while the
 * others map new memory: xmalloc 32:32 mapped 124 segments while the other
 * heaps held 17 MB of resident free slices on average at each. So a heap
 * that would fault in memory borrows a page's slices from a heap that kept
 * some (lenders), under that heap's lock, tried once each. The page is the
 * borrower's (a guest in the segment): its blocks are handed out and
 * collected as any page's, but every free of them that the fast path sees
 * is a remote one, the borrower's own included (the segment names the
 * lender). Empty, it goes back to the heap that holds its segment then.
 *
 * A class page borrows only when its heap has no segment with a free slice
 * at all: every free of a guest's many blocks is remote, and the owner sees
 * them only at its next collect (mtalloc t=8, class pages borrowing
 * whenever the heap had no resident free slice: peak RSS +12 %; those of
 * classes of 1 KiB and up only: -3 % at +6 % time). A large block's
 * page and a pool page borrow whenever their heap has no resident free
 * slice of its own: each heap otherwise keeps resident the most such
 * slices it ever needed, so the process holds the sum of every thread's
 * peak where shared slices would hold the peak of the sum (mtalloc, 8
 * threads: 4-5 MB of its 17 were free slices at any moment, 1.5-2.7 now;
 * its peak RSS at 2 / 8 / 32 / 64 threads -4 / -10 / -12 / -12 %, times
 * +2-3 %). A large block is freed once, and its page goes back on that
 * free; a pool page's owner frees its blocks in place (free_pool_block
 * reads the page's owner, not the segment's heap). */
typedef void page_shape_t(shoal_heap_t *heap, shoal_page_t *page, const void *how);

static shoal_page_t *heap_borrow_slices(shoal_heap_t *heap, size_t slices, page_shape_t *shape,
                                        const void *how) {
  for (size_t i = 0; i < lenders.count; i++) {
    shoal_heap_t *lender = atomic_load_explicit(&lenders.heaps[i], memory_order_relaxed);
    if (lender == NULL || lender == heap || !heap_hold_other(lender)) continue;
    shoal_page_t *page = segment_page_lend(lender, slices);
    if (page != NULL) shape(heap, page, how); /* while the lender, whose walks read it, is held */
    if (page == NULL || lender->purge_pending_bytes < LEND_MIN_PENDING_BYTES)
      heap_slots_forget(&lenders, i, lender);
    heap_release_other(lender);
    if (page != NULL) return page;
  }
  return NULL;
}

/* No resident free slice of its own for a page of `slices`: what it takes
 * next would be faulted in. */
static bool heap_lacks_resident_slices(const shoal_heap_t *heap, size_t slices) {
  return heap->purge_pending_bytes < slices * SLICE_SIZE;
}

static void class_page_shape(shoal_heap_t *heap, shoal_page_t *page, const void *how) {
  uint8_t size_class = *(const uint8_t *)how;
  page_init(page, heap, class_block_size[size_class], size_class, page->is_zero);
}

static shoal_page_t *heap_borrow_page(shoal_heap_t *heap, uint8_t size_class) {
  return heap_borrow_slices(heap, class_slices[size_class], class_page_shape, &size_class);
}

/* An empty guest page back to the heap that holds its segment now: at
 * once if that heap can be held, else handed over on its notify stack, so
 * that no one waits (whoever drains a heap holds it: its owner, a thread
 * serving it, or the servicer of a dead one). The segment may change heaps
 * before the drain: heap_take_segment leaves guests where they are, and
 * the drain sends the page on to the segment's heap of the moment. */
static void heap_give_back_guest(shoal_heap_t *heap, shoal_page_t *page) {
  shoal_segment_t *segment = segment_of(page);
  shoal_heap_t *holder = atomic_load_explicit(&segment->heap, memory_order_relaxed);
  if (holder != heap && heap_hold_other(holder)) {
    bool still_held = atomic_load_explicit(&segment->heap, memory_order_relaxed) == holder;
    if (still_held) heap_slices_back(holder, page);
    heap_release_other(holder);
    if (still_held) return;
  }
  atomic_store_explicit(&page->guest, GUEST_RETURNING, memory_order_relaxed);
  page_mark_parked(page); /* off every fast path */
  heap_take_returned_guest(heap, page);
}

/* Heaps served lately for an idle owner (heap_serve_idle) that kept free
 * slices: their purge, when due, is any thread's to run; and before the
 * arena maps a segment, a heap that needs one takes a segment of theirs
 * whose pages are all parked, from an owner idle through a few serves. A
 * producer blocked on a full queue otherwise keeps, beside the blocks its
 * consumers freed, the free slices of its segments, which no other
 * producer can use. Entries may be stale: each is checked when held. */
static heap_slots_t idle_heaps = {.count = 16};

static bool heap_take_idle_segment(shoal_heap_t *heap) {
  for (size_t i = 0; i < idle_heaps.count; i++) {
    shoal_heap_t *idle = atomic_load_explicit(&idle_heaps.heaps[i], memory_order_relaxed);
    if (idle == NULL || idle == heap || !heap_hold_other(idle)) continue;
    bool taken = idle->serves_while_idle >= IDLE_SERVES_TO_LEND &&
                 !heap_owner_waits_for_core(idle) && heap_take_segment(heap, idle, true);
    if (!taken || idle->segments == NULL) heap_slots_forget(&idle_heaps, i, idle);
    heap_release_other(idle);
    if (taken) return true;
  }
  return false;
}

/* This heap has no free slice left: a dead heap's segment, else an idle
 * heap's, before the arena maps one. */
static void heap_reuse_others_memory(shoal_heap_t *heap) {
  if (!heap_reuse_dead_memory(heap)) heap_take_idle_segment(heap);
}

/* ---- serving the heap of an idle owner ---- */

/* The owner of `heap` lets notified pages pile up: it is blocked or
 * descheduled. Do its drain (without waiting for anyone), and its purge if
 * due; what is left free it may lend (idle_heaps). */
static void heap_serve_idle(shoal_heap_t *heap) {
  shoal_heap_t *own = thread_heap;
  if (own == heap || own == &heap_empty || !heap_hold_other(heap)) return;
  shoal_heap_t *outer = serving_counts_in;
  serving_counts_in = own;
  heap_drain(heap, DRAIN_FOR_IDLE_OWNER);
  int64_t purge_at = atomic_load_explicit(&heap->purge_at_ms, memory_order_relaxed);
  /* Idle through several serves: its free slices go back now, not a purge
   * delay after the last page we freed for it (we keep freeing). */
  heap->serves_while_idle++;
  if (purge_at != 0 &&
      (heap->serves_while_idle >= IDLE_SERVES_TO_PURGE || os_now_ms() >= purge_at) &&
      !heap_owner_waits_for_core(heap) && !heap_owner_only_away(heap))
    segment_purge_heap(heap);
  serving_counts_in = outer;
  purge_at = atomic_load_explicit(&heap->purge_at_ms, memory_order_relaxed);
  if (purge_at != 0) others_purge_note(purge_at); /* a later slow path serves it again then */
  if (heap->segments != NULL) heap_slots_note(&idle_heaps, heap);
  heap_release_other(heap);
}

/* Each idle heap noted, served again: its purge may be due. */
static void heap_serve_all_idle(void) {
  for (size_t i = 0; i < idle_heaps.count; i++) {
    shoal_heap_t *idle = atomic_load_explicit(&idle_heaps.heaps[i], memory_order_relaxed);
    if (idle != NULL) heap_serve_idle(idle);
  }
}

void heap_serve(shoal_heap_t *heap) {
  int state = atomic_load_explicit(&heap->state, memory_order_seq_cst);
  if (state == HEAP_ABANDONED)
    heap_service_abandoned(heap);
  else if (state == HEAP_LIVE)
    heap_serve_idle(heap);
}

void heap_fork_prepare(void) {
  atomic_store_explicit(&fork_gate, 1, memory_order_seq_cst);
  while (atomic_load_explicit(&other_holds_running, memory_order_seq_cst) != 0) os_yield();
}

void heap_fork_after(void) {
  atomic_store_explicit(&fork_gate, 0, memory_order_seq_cst);
}

/* In the child: a thread that tried this thread's heap at the fork and is
 * gone cannot give it back. */
void heap_fork_child(shoal_heap_t *survivor) {
  depot_fork_child();
  atomic_store_explicit(&fork_gate, 0, memory_order_relaxed);
  atomic_store_explicit(&other_holds_running, 0, memory_order_relaxed);
  if (survivor == NULL || survivor == &heap_empty) return;
  if (survivor->slow_depth == 0) lock_reset(&survivor->slow_lock);
  atomic_store_explicit(&survivor->owner_thread_id, 0, memory_order_relaxed); /* not the child's */
}

/* ---- finding a page with a free block ---- */

/* Pages whose every block other threads have freed, still waiting in
 * their queues for the owner to reach them, give their slices back before
 * the heap takes new ones: a class that is not being allocated would hold
 * them until its next slow path (rptest, larson, producer/consumer: 5-10 %
 * of the peak). Its class's last page stays, as heap_page_retire keeps it
 * (without the purge check: see heap_fresh_page). A look covers
 * EMPTIED_SCAN_PAGES pages at most, going on from class to class where the
 * last one stopped: a heap fragmented over thousands of pages must not
 * walk them all for each page it takes. The looks come in rounds that go
 * once round the heap's pages, and only while other threads push blocks
 * onto its pages' lists (remote_pushed): a round that finds no page
 * emptied clears the flag, and the next push sets it again. A heap that no
 * other thread frees into read a line of each of 64 pages for every page it
 * took (the gcc replay: 2-4 % of its time, mtalloc t=2: 2 %); one they keep
 * emptying leaves the flag set, so that its pushers only read it. */
#define EMPTIED_SCAN_PAGES 64
static void heap_retire_remotely_emptied(shoal_heap_t *heap) {
  if (heap->emptied_scans_owed == 0) {
    if (!atomic_load_explicit(&heap->remote_pushed, memory_order_relaxed)) return;
    size_t looks = 1 + heap_pages_held(heap) / EMPTIED_SCAN_PAGES;
    heap->emptied_scans_owed = (uint32_t)(looks < CLASS_COUNT ? looks : CLASS_COUNT);
    heap->emptied_found = false;
  }
  unsigned budget = EMPTIED_SCAN_PAGES, size_class = heap->emptied_scan_class;
  for (unsigned classes = 0; classes < CLASS_COUNT && budget > 0; classes++) {
    for (shoal_page_t *page = heap->queues[size_class].first, *next; page != NULL && budget > 0;
         page = next, budget--) {
      next = page->next;
      if (!page_collect_if_emptied(page)) continue;
      heap->emptied_found = true;
      if (!page_is_alone_in_queue(heap, page)) {
        queue_remove(heap, page);
        heap_page_give_back(heap, page);
      }
    }
    size_class = size_class + 1 < CLASS_COUNT ? size_class + 1 : 0;
  }
  heap->emptied_scan_class = size_class;
  if (--heap->emptied_scans_owed == 0 && !heap->emptied_found)
    atomic_store_explicit(&heap->remote_pushed, false, memory_order_relaxed);
}

/* No purge check here: a heap taking fresh pages is about to reuse what it
 * freed, the worst moment to give that memory back. */
static shoal_page_t *heap_fresh_page(shoal_heap_t *heap, uint8_t size_class) {
  heap_retire_remotely_emptied(heap);
  if (heap->segments == NULL) heap_reuse_others_memory(heap);
  shoal_page_t *page = NULL;
  if (heap->segments == NULL && !arena_has_cached()) page = heap_borrow_page(heap, size_class);
  if (page == NULL) {
    page = segment_page_alloc(heap, class_slices[size_class], size_class);
    if (page == NULL) return NULL;
    page_init(page, heap, class_block_size[size_class], size_class, page->is_zero);
    page->touched_tail = !page->is_zero;
    if (page->touched_tail && !heap->touched_tails) {
      heap->touched_tails = true;
      heap->tails_purge_at_ms = os_now_ms() + purge_delay();
    }
  }
  page_extend(page);
  page->tail_capacity = page->capacity;
  heap_queue_push(heap, page);
  return page;
}

static shoal_page_t *heap_serve_from_front(shoal_heap_t *heap, shoal_page_t *page) {
  if (heap->queues[page->size_class].first != page) {
    queue_remove(heap, page);
    heap_queue_push(heap, page);
  }
  return page;
}

/* The malloc slow exit's second try (alloc.h: alloc_slow_pop for a medium
 * class, small_rotate for a small one), without the heap's slow lock: the
 * queue's first page has nothing left to hand out, the next one or two
 * often have (rptest t=2: 92 % of the locked walks of a medium queue found
 * their page second or third; mstress t=2: 66 %). The queues are the
 * owner's alone (a thread serving an idle heap touches its parked pages,
 * never its queues) and a queued page's remote frees are taken without a
 * lock (page_collect_queued), so only parking a page needs the lock: the
 * spent first page goes to the back unparked, where the locked walk parks
 * it when no page of the class has a block. */
shoal_page_t *heap_queue_rotate(shoal_heap_t *heap, uint8_t size_class) {
  page_queue_t *queue = &heap->queues[size_class];
  shoal_page_t *spent = queue->first, *page = spent->next;
  for (int tries = 0; tries < QUEUE_ROTATE_TRIES && page != NULL; tries++, page = page->next) {
    if (page->free != NULL || page_collect_queued(page)) {
      queue_remove(heap, spent);
      heap_queue_push_back(heap, spent);
      return heap_serve_from_front(heap, page);
    }
  }
  return NULL;
}

/* The first page of one of the next classes, for a class above 128 bytes
 * that has a page but no free block (borrow_reach): one with at least an
 * OS page of free blocks, what an extend would carve. Lent any free block,
 * the two classes drained the page twice as fast and each came back to its
 * slow path the sooner (mstress t=8: 28 % more slow paths, 4 % more time). */
static shoal_page_t *heap_lender_page(shoal_heap_t *heap, uint8_t size_class) {
  if (size_class < BORROW_FROM_CLASS || heap->queues[size_class].first == NULL) return NULL;
  unsigned reach = size_class + borrow_reach(size_class);
  for (unsigned k = size_class + 1u; k <= reach && k < CLASS_COUNT; k++) {
    shoal_page_t *lender = heap->queues[k].first;
    if (lender != NULL && lender->free != NULL &&
        (size_t)(lender->capacity - lender->used) * lender->block_size >= EXTEND_BYTES)
      return lender;
  }
  return NULL;
}

/* The depot shard a heap puts into and takes from first: heaps spread
 * over them by address (heaps lie a few pages apart). */
static unsigned heap_depot_home(const shoal_heap_t *heap) {
  uint64_t spread = ((uintptr_t)heap >> 12) * 0x9E3779B97F4A7C15u;
  return (unsigned)(spread >> 32) & (DEPOT_SHARDS - 1);
}

/* Blocks of a depot chain come with words the depot and the mailbox wrote
 * beyond the link and the key (a group's head, a parcel's addresses), so
 * a page of this heap's that still says its free blocks are zero (is_zero,
 * which calloc reads for a medium class's block: zero_block) says so no
 * more. Only a remote free collected or delivered clears the flag
 * otherwise, and these blocks came home by neither: a producer's calloc
 * got blocks its consumer had freed into the depot with those words in
 * them. A medium chain holds a few blocks (DEPOT_TAKE_BYTES). */
static void depot_blocks_not_zero(shoal_heap_t *heap, shoal_block_t *block) {
  for (; block != NULL; block = block->next) {
    shoal_page_t *page = segment_page_of(segment_of(block), block);
    if (atomic_load_explicit(&page->owner, memory_order_relaxed) == (uintptr_t)heap)
      page->is_zero = 0;
  }
}

/* First of all, before the heap's own pages, chains of the class that
 * other threads freed (depot.c), as the class cache's blocks, which the
 * class's cache is empty for (heap_find_page reset it). First:
 * taken after the own pages' free blocks, the chains piled up while the
 * blocks that went home served (xmalloc 8:8: the depot full at 16 MB, the
 * peak as before). Their frees were counted by the threads that freed
 * them: reserved says so to class_cache_fold. */
static shoal_page_t *heap_depot_take(shoal_heap_t *heap, uint8_t size_class) {
  if (size_class < DEPOT_FIRST_CLASS) return NULL;
  int64_t now = os_now_ms();
  depot_note_wanted(size_class, now);
  chain_t chain = depot_take(size_class, now, heap_depot_home(heap));
  if (chain.head == NULL) return NULL;
  if (SHOAL_AUDIT) audit_chain(NULL, size_class, chain.head, NULL, chain.count);
  if (size_class >= DIRECT_CLASSES) depot_blocks_not_zero(heap, chain.head);
  class_cache_mark(heap, size_class);
  shoal_page_t *cache = &heap->class_cache[size_class];
  cache->free = chain.head;
  cache->capacity = cache->reserved = chain.count;
  cache->size_class = size_class;
  return cache;
}

/* Blocks freed into any page of the queue come before never-used ones:
 * carving the first page further while the pages behind it hold freed
 * blocks touches fresh memory that the program does not need (rptest: a
 * thread's own frees land in all of its pages of a class). Pages with
 * neither are parked. */
static shoal_page_t *heap_find_queued_page(shoal_heap_t *heap, uint8_t size_class,
                                           bool may_borrow) {
  shoal_page_t *page = heap->queues[size_class].first;
  shoal_page_t *extensible = NULL;
  while (page != NULL) {
    shoal_page_t *next = page->next;
    if (page->free == NULL) page_collect(page);
    if (page->free != NULL) return heap_serve_from_front(heap, page);
    if (page->capacity < page->reserved) {
      if (extensible == NULL) extensible = page;
    } else {
      queue_remove(heap, page);
      if (!heap_park(heap, page)) { /* remote frees arrived meanwhile */
        page_collect(page);
        heap_queue_push(heap, page);
        return page;
      }
    }
    page = next;
  }
  shoal_page_t *lender = may_borrow ? heap_lender_page(heap, size_class) : NULL;
  if (lender != NULL) return lender;
  if (extensible != NULL && page_extend(extensible)) return heap_serve_from_front(heap, extensible);
  return heap_fresh_page(heap, size_class);
}

/* A class cache's counts into the heap's: its pops as any page's, its
 * pushes (capacity; reserved: those counted already) as frees, which free
 * counts nowhere else, and those of other threads' blocks (all but
 * own_frees) as remote frees. */
static void class_cache_fold(shoal_heap_t *heap, uint8_t size_class) {
  shoal_page_t *cache = &heap->class_cache[size_class];
  if (cache->capacity == cache->reserved && cache->unfolded_allocs == 0) return; /* nothing new */
  cache->size_class = size_class; /* what the fold reads; unset until the cache is used */
  page_fold_counters(heap, cache);
#if SHOAL_STATISTICS
  size_t pushes = cache->capacity - cache->reserved;
  counter_add(&heap->counters.freed[size_class], pushes);
  counter_add(&heap->counters.remote_frees, pushes - cache->own_frees);
  cache->reserved = cache->capacity;
  cache->own_frees = 0;
#endif
}

/* An empty class cache starts its counts again (one never pushed to since
 * is left as it is, untouched). */
static void class_cache_reset(shoal_heap_t *heap, uint8_t size_class) {
  shoal_page_t *cache = &heap->class_cache[size_class];
  if (cache->free == NULL && cache->capacity == 0) return;
  class_cache_fold(heap, size_class);
  cache->free = NULL;
  cache->capacity = cache->reserved = cache->used = cache->used_at_fold = 0;
}

/* Other threads' blocks this thread freed come first: they are in its cache
 * already, and using them sends nothing back across threads. A neighbour's
 * page lent to a small class serves its fast path until it runs dry, is
 * parked or retired (queue_remove), or the class's next slow path. */
static shoal_page_t *heap_find_page(shoal_heap_t *heap, uint8_t size_class, bool may_borrow) {
  heap_drain_notified(heap);
  if (unlikely(heap->touched_tails)) heap_tails_check(heap, os_now_ms());
  shoal_page_t *cache = &heap->class_cache[size_class];
  if (class_cache_marked(heap, size_class)) {
    if (cache->free != NULL) {
      cache->size_class = size_class; /* its own class's: aligned requests may take it */
      heap_direct_set(heap, size_class, cache);
      return cache;
    }
    class_cache_reset(heap, size_class);
  }
  shoal_page_t *page = heap_depot_take(heap, size_class);
  if (page == NULL) page = heap_find_queued_page(heap, size_class, may_borrow);
  if (page != NULL && (page->size_class != size_class || page == cache))
    heap_direct_set(heap, size_class, page);
  else
    heap_direct_update(heap, size_class);
  return page;
}

/* ---- the outbox, and the depot ---- */

/* When a class's depot may have gone unused for a purge delay; 0: none. */
static _Atomic(int64_t) depot_check_at_ms;

static void depot_check_note(int64_t at) {
  deadline_note(&depot_check_at_ms, at);
}

/* Whether this thread frees for more than one heap: over its last window
 * of chains sent, the owner changed at least once. Home is as good a place
 * as the depot for the blocks of a thread that frees one heap's (their
 * owner reuses them), and better for memory: the owner's pages empty and
 * give their slices to other classes, where blocks handed round by the
 * depot keep every page of the class in use (prodcons, one producer: 1.3
 * to 1.5 times the peak through the depot). */
static bool heap_frees_for_many_heaps(shoal_heap_t *heap, shoal_heap_t *owner) {
  if (owner != heap->remote_owner_last) {
    if (heap->remote_owner_last != NULL) heap->owner_changes_in_window++;
    heap->remote_owner_last = owner;
  }
  if (++heap->chains_in_window >= DEPOT_OWNER_WINDOW) {
    heap->frees_for_many_heaps = heap->owner_changes_in_window > 0;
    heap->chains_in_window = heap->owner_changes_in_window = 0;
  }
  return heap->frees_for_many_heaps;
}

/* A chain of the outbox (blocks of one page) into its class's depot, where
 * any thread that allocates the class takes it: when this thread frees for
 * several heaps, the owner is alive (a dead thread's heap, blocks home,
 * gives its pages back or to its adopter), and a thread looked for blocks
 * of the class within a purge delay (else they would wait for nobody,
 * while home they empty pages that can go back to the OS). A depot nobody
 * took from for a purge delay takes no more: its chains go home at the
 * next malloc slow path (heap_depot_check).
 *
 * A small class's chain goes so even when this thread allocates the class
 * itself (its remote cache full): home, it waits for an owner that may
 * not run for a while (more threads than cores), and meanwhile every
 * thread that needs the class carves anew. larson, each thread freeing
 * random threads' blocks: peak RSS -22 % at 2 threads, -16 % at 8, at the
 * same time. Not a medium class's, whose chain is a block or two: handed
 * round by the depot, blocks end up owned by every heap, and each thread's
 * own frees turn remote (rptest, 8 threads: +20-60 % time). */
static bool outbox_to_depot(shoal_heap_t *heap, const outbox_slot_t *slot) {
  uint8_t size_class = slot->page->shared_class;
  if (heap->outbox_home_only || size_class < DEPOT_FIRST_CLASS || size_class >= CLASS_COUNT ||
      (size_class >= DIRECT_CLASSES && heap->queues[size_class].first != NULL))
    return false;
  shoal_heap_t *owner =
      (shoal_heap_t *)atomic_load_explicit(&slot->page->owner, memory_order_relaxed);
  if (!heap_frees_for_many_heaps(heap, owner) || owner == NULL ||
      atomic_load_explicit(&owner->state, memory_order_relaxed) != HEAP_LIVE)
    return false;
  int64_t now = os_now_ms();
  if (now >= depot_active_until(size_class) && depot_may_hold(size_class)) {
    heap->depot_drain_due = true; /* once the outbox is whole again */
    return false;
  }
  if (!depot_is_wanted(size_class, now)) return false;
  if (!depot_put(size_class, slot->chain, now, heap_depot_home(heap))) return false;
  depot_check_note(depot_active_until(size_class));
  return true;
}

static void heap_depot_drain_due(shoal_heap_t *heap);

_Static_assert(OUTBOX_SLOT_BITS >= 1 && OUTBOX_SLOT_BITS <= 6, "a bit per slot in outbox_occupied");

/* The slot of a page's chain, or of an owner's parcel. */
static inline size_t outbox_index(const void *page_or_owner) {
  return (size_t)(((uintptr_t)page_or_owner * 0x9E3779B97F4A7C15u) >> (64 - OUTBOX_SLOT_BITS));
}

static void mailbox_post(shoal_heap_t *heap, shoal_heap_t *owner, parcel_t *parcel, size_t bytes);

static void outbox_send(shoal_heap_t *heap, size_t index) {
  outbox_slot_t *slot = &heap->outbox[index];
  shoal_heap_t *to_serve = NULL;
  if (slot->page == NULL) {
    mailbox_post(heap, slot->mail.owner, slot->mail.parcel, slot->mail.bytes);
  } else {
    heap->outbox_bytes -= (size_t)slot->chain.count * slot->page->shared_block_size;
    if (!outbox_to_depot(heap, slot))
      to_serve =
          page_push_remote(slot->page, slot->chain.head, slot->chain.tail, slot->chain.count);
  }
  slot->page = NULL;
  heap->outbox_occupied &= ~((uint64_t)1 << index);
  if (unlikely(to_serve != NULL)) heap_serve(to_serve);
}

/* A medium block of a class this thread allocates too goes to its owner
 * with others of the owner's, whatever their page: a page holds a few
 * medium blocks, so a chain by page was one CAS on the page's remote list
 * a block, the list's line moving between the freeing core and the
 * owner's, which took it back to collect (rptest, 2 threads: those two
 * were 29 % of shoal's samples). A thread that does not allocate the class
 * sends by page, so that its chains may go to the depot. */
static bool outbox_goes_by_owner(const shoal_heap_t *heap, uint8_t size_class) {
  return size_class >= DIRECT_CLASSES && size_class < CLASS_COUNT && !heap->outbox_home_only &&
         heap->queues[size_class].first != NULL;
}

_Static_assert(offsetof(parcel_t, key) == offsetof(shoal_block_t, key), "a parcel is a free block");
_Static_assert(sizeof(parcel_t) + 8 * sizeof(shoal_block_t *) <= DIRECT_MAX,
               "a medium block holds a parcel of several");

/* Into the owner's parcel: the first block freed for it since the last
 * send carries the addresses of the next ones. */
static void outbox_push_for_owner(shoal_heap_t *heap, shoal_heap_t *owner, shoal_block_t *block,
                                  uint32_t block_size) {
  size_t index = outbox_index(owner);
  outbox_slot_t *slot = &heap->outbox[index];
  uint64_t bit = (uint64_t)1 << index;
  if ((heap->outbox_occupied & bit) != 0 && (slot->page != NULL || slot->mail.owner != owner))
    outbox_send(heap, index);
  if ((heap->outbox_occupied & bit) == 0) {
    parcel_t *parcel = (parcel_t *)block;
    parcel->count = 0;
    parcel->room = (uint32_t)((block_size - sizeof(parcel_t)) / sizeof(shoal_block_t *));
    slot->page = NULL;
    slot->mail.owner = owner;
    slot->mail.parcel = parcel;
    slot->mail.bytes = block_size;
    heap->outbox_occupied |= bit;
    return;
  }
  parcel_t *parcel = slot->mail.parcel;
  parcel->blocks[parcel->count++] = block;
  slot->mail.bytes += block_size;
  if (parcel->count == parcel->room || slot->mail.bytes >= OUTBOX_OWNER_BYTES)
    outbox_send(heap, index);
}

/* Sends the pages' chains that no block joined since the last sweep, so
 * that the ones filling stay to fill (xmalloc, 64 pairs: sending all of
 * them at 8 KiB was 1.7 times as slow, a batch's blocks scattered over
 * small chains); when every one did, all of them once they hold twice the
 * share. A medium parcel is not counted: it waits at most
 * OUTBOX_OWNER_BYTES, and only in a thread that allocates its class. */
static void outbox_sweep(shoal_heap_t *heap, size_t share) {
  uint64_t chains = 0;
  for (uint64_t occupied = heap->outbox_occupied; occupied != 0; occupied &= occupied - 1) {
    size_t index = (size_t)__builtin_ctzll(occupied);
    if (heap->outbox[index].page != NULL) chains |= (uint64_t)1 << index;
  }
  uint64_t send = chains & ~heap->outbox_touched;
  heap->outbox_touched = 0;
  if (send == 0 && heap->outbox_bytes > 2 * share) send = chains;
  for (; send != 0; send &= send - 1) {
    size_t index = (size_t)__builtin_ctzll(send);
    if (((heap->outbox_occupied >> index) & 1) != 0 && heap->outbox[index].page != NULL)
      outbox_send(heap, index);
  }
}

static void outbox_push_for_page(shoal_heap_t *heap, shoal_page_t *page, shoal_block_t *block) {
  size_t index = outbox_index(page);
  outbox_slot_t *slot = &heap->outbox[index];
  uint64_t bit = (uint64_t)1 << index;
  if ((heap->outbox_occupied & bit) == 0 || slot->page != page) {
    if ((heap->outbox_occupied & bit) != 0) outbox_send(heap, index);
    slot->page = page;
    slot->chain = (chain_t){NULL, block, 0};
    heap->outbox_occupied |= bit;
  }
  block->next = slot->chain.head;
  slot->chain.head = block;
  heap->outbox_bytes += page->shared_block_size;
  heap->outbox_touched |= bit;
  if (++slot->chain.count * page->shared_block_size >= OUTBOX_BYTES) outbox_send(heap, index);
  /* Past this thread's share of OUTBOX_BUDGET_BYTES among the live heaps
   * (one full chain at least). */
  if (unlikely(heap->outbox_bytes > OUTBOX_BYTES)) {
    size_t live = arena_heaps_live();
    if (live == 0) live = 1; /* in a fork child, its thread's heap not yet counted */
    if (heap->outbox_bytes * live > OUTBOX_BUDGET_BYTES)
      outbox_sweep(heap, OUTBOX_BUDGET_BYTES / live);
  }
}

void heap_outbox_push(shoal_heap_t *heap, shoal_page_t *page, shoal_block_t *block) {
  shoal_heap_t *owner = (shoal_heap_t *)atomic_load_explicit(&page->owner, memory_order_relaxed);
  if (outbox_goes_by_owner(heap, page->shared_class) && owner != NULL)
    outbox_push_for_owner(heap, owner, block, page->shared_block_size);
  else
    outbox_push_for_page(heap, page, block);
  if (unlikely(heap->depot_drain_due)) heap_depot_drain_due(heap);
}

/* ---- the mailbox: an owner's medium blocks, from other threads ---- */

/* A parcel into the owner's mailbox: one CAS for all it carries. The owner
 * delivers it at its next slow path; a sender delivers it itself when the
 * owner has left (its thread gone: seq_cst, against heap_abandon's store
 * of the state and its delivery after) or lets it grow past
 * MAILBOX_DELIVER_BYTES (blocked or descheduled: delivered, the blocks of
 * its parked pages notify it, and may bring a thread to serve it; from
 * many senders, into the depot, unless this thread sends home only:
 * mailbox_overflow). */
static void mailbox_overflow(shoal_heap_t *heap, shoal_heap_t *owner);

static void mailbox_post(shoal_heap_t *heap, shoal_heap_t *owner, parcel_t *parcel, size_t bytes) {
  parcel_t *head = atomic_load_explicit(&owner->mailbox, memory_order_relaxed);
  do {
    parcel->next = head;
  } while (!atomic_compare_exchange_weak_explicit(&owner->mailbox, &head, parcel,
                                                  memory_order_seq_cst, memory_order_relaxed));
  size_t pending = atomic_fetch_add_explicit(&owner->mailbox_bytes, bytes, memory_order_relaxed);
  uint32_t changes = atomic_load_explicit(&owner->mailbox_sender_changes, memory_order_relaxed);
  if (atomic_load_explicit(&owner->mailbox_sender, memory_order_relaxed) != heap) {
    atomic_store_explicit(&owner->mailbox_sender, heap, memory_order_relaxed);
    atomic_store_explicit(&owner->mailbox_sender_changes, ++changes, memory_order_relaxed);
  }
  if (atomic_load_explicit(&owner->state, memory_order_seq_cst) != HEAP_LIVE)
    heap_mailbox_deliver(owner);
  else if (pending + bytes >= MAILBOX_DELIVER_BYTES)
    changes >= MAILBOX_MANY_SENDERS && !heap->outbox_home_only ? mailbox_overflow(heap, owner)
                                                               : heap_mailbox_deliver(owner);
}

/* A new mailbox's count and senders. */
static void mailbox_restart(shoal_heap_t *heap) {
  atomic_store_explicit(&heap->mailbox_bytes, 0, memory_order_relaxed);
  atomic_store_explicit(&heap->mailbox_sender, NULL, memory_order_relaxed);
  atomic_store_explicit(&heap->mailbox_sender_changes, 0, memory_order_relaxed);
}

static shoal_page_t *page_of_block(const void *p) {
  return segment_page_of(segment_of(p), p);
}

/* Whether the owner may put a delivered block of `page` straight on the
 * page's own list, as its own free would: a page of its class queues (not
 * parked, not a guest) that keeps a block out after it. Else the block
 * goes onto the page's remote list, where every case is handled. */
static bool page_takes_delivery(const shoal_heap_t *heap, shoal_page_t *page,
                                shoal_segment_t *segment) {
  /* The segment's heap, not the page's owner: that is on the line that
   * only others' frees read, the segment's on the line just read. A page
   * of the heap's own segment that is no guest is the heap's. */
  return atomic_load_explicit(&segment->heap, memory_order_relaxed) == heap && page->flags == 0 &&
         page->used > 1 && page->size_class < CLASS_COUNT &&
         atomic_load_explicit(&page->guest, memory_order_relaxed) == 0;
}

/* A block of the mailbox home. The owner puts it on its page's list with
 * plain stores: the block's line is still in the sender's cache, and
 * stores wait for it without holding up what follows, where a CAS (onto
 * the page's remote list, then the collect's exchange) waited each time
 * for every store before it, the program's too (rptest, 2 threads: those
 * two were 29 % of shoal's samples with a CAS a block). Counted free by
 * its sender, as a remote free collected is. */
static void mail_deliver_block(shoal_heap_t *heap, shoal_block_t *block, bool by_owner) {
  shoal_segment_t *segment = segment_of(block);
  shoal_page_t *page = segment_page_of(segment, block);
  if (by_owner && page_takes_delivery(heap, page, segment)) {
    block->next = page->free;
    page->free = block;
    page->used--;
    page->used_at_fold--;
    page->is_zero = 0;
    return;
  }
  shoal_heap_t *to_serve = page_push_remote(page, block, block, 1);
  /* The owner drains its own notified pages next. */
  if (unlikely(to_serve != NULL) && to_serve != thread_heap) heap_serve(to_serve);
}

void heap_mailbox_deliver(shoal_heap_t *heap) {
  parcel_t *parcel = atomic_exchange_explicit(&heap->mailbox, NULL, memory_order_seq_cst);
  if (parcel == NULL) return;
  mailbox_restart(heap);
  /* The owner reads its pages' flags: under its slow lock, which a thread
   * serving the heap holds while it changes parked pages (TSan, mailbox). */
  bool by_owner = heap == thread_heap;
  if (by_owner) heap_slow_enter(heap);
  while (parcel != NULL) {
    parcel_t *next = parcel->next;
    uint32_t count = parcel->count;
    for (uint32_t i = 0; i < count; i++) {
      if (i + 1 < count) /* the next block's page descriptor, while this one's waits */
        __builtin_prefetch(&page_of_block(parcel->blocks[i + 1])->free, 1);
      mail_deliver_block(heap, parcel->blocks[i], by_owner);
    }
    mail_deliver_block(heap, (shoal_block_t *)parcel, by_owner); /* last: read until then */
    parcel = next;
  }
  if (by_owner) heap_slow_exit(heap);
}

/* The owner let MAILBOX_DELIVER_BYTES pile up from many senders (the
 * sender changed MAILBOX_MANY_SENDERS times): it has not run a slow path
 * for a while (more threads than cores, or blocked), and its blocks are
 * freed all over. Home, they would wait for it on its pages' lists while
 * every other thread that needs their classes carves anew; so the sender
 * puts them into their classes' depots (where someone wanted one
 * lately), for whichever thread allocates the class next, and sends home
 * only the rest. larson, 64 threads on 2 cores, each freeing random
 * threads' blocks: the mailboxes and the pages' lists they fed held 24 of
 * the 75-88 MB at the peak (a mailbox's sender changed 39-45 times before
 * it filled). Not a few senders' batches (rptest's handovers, 8.5
 * changes): they go home to their producer, which allocates the same
 * again; handed round instead, every thread's own frees of them turned
 * remote (rptest, 64 threads: +20 % time). */
static void mailbox_overflow(shoal_heap_t *heap, shoal_heap_t *owner) {
  parcel_t *parcel = atomic_exchange_explicit(&owner->mailbox, NULL, memory_order_seq_cst);
  if (parcel == NULL) return;
  mailbox_restart(owner);
  chain_t chains[CLASS_COUNT - DIRECT_CLASSES] = {{NULL, NULL, 0}};
  int64_t now = os_now_ms();
  for (parcel_t *next; parcel != NULL; parcel = next) {
    next = parcel->next;
    /* Read once: the parcel's own block goes last, and once delivered it is
     * its owner's to hand out again, so the loop must not read its count
     * after it. Read again, it ran on over what the next holder wrote there
     * (another sender's parcel of blocks in flight: each delivered twice, a
     * page's list made a cycle, a block handed out to two callers). */
    uint32_t count = parcel->count;
    for (uint32_t i = 0; i <= count; i++) {
      shoal_block_t *block = i < count ? parcel->blocks[i] : (shoal_block_t *)(void *)parcel;
      uint8_t size_class = page_of_block(block)->shared_class;
      if (size_class < DIRECT_CLASSES || size_class >= CLASS_COUNT ||
          !depot_is_wanted(size_class, now)) {
        mail_deliver_block(owner, block, false);
        continue;
      }
      chain_t *chain = &chains[size_class - DIRECT_CLASSES];
      if (chain->head == NULL) chain->tail = block;
      block->next = chain->head;
      chain->head = block;
      chain->count++;
    }
  }
  unsigned home = heap_depot_home(heap);
  for (uint8_t size_class = DIRECT_CLASSES; size_class < CLASS_COUNT; size_class++) {
    chain_t chain = chains[size_class - DIRECT_CLASSES];
    if (chain.head == NULL) continue;
    if (depot_put(size_class, chain, now, home)) {
      depot_check_note(depot_active_until(size_class));
      continue;
    }
    for (shoal_block_t *block = chain.head, *next; block != NULL; block = next) {
      next = block->next; /* the chain ends in NULL: its first block's link */
      mail_deliver_block(owner, block, false);
    }
  }
}

void heap_outbox_flush(shoal_heap_t *heap) {
  while (heap->outbox_occupied != 0)
    outbox_send(heap, (size_t)__builtin_ctzll(heap->outbox_occupied));
  if (unlikely(heap->depot_drain_due)) heap_depot_drain_due(heap);
}

/* Blocks home to their pages, through the outbox (home only). */
static void blocks_send_home(shoal_heap_t *heap, shoal_block_t *block) {
  while (block != NULL) {
    shoal_block_t *next = block->next;
    heap_outbox_push(heap, page_of_block(block), block);
    block = next;
  }
}

/* Every class's chains home (or only those nobody took one of for a purge
 * delay), with the outbox: home only meanwhile, and after it as before (a
 * drain may start inside another, or inside a flush of the class caches,
 * through the outbox's flush: the outer one goes on home only). */
static void heap_depot_drain(shoal_heap_t *heap, bool stale_only, int64_t now) {
  bool home_only_before = heap->outbox_home_only;
  heap->outbox_home_only = true;
  heap_outbox_flush(heap);
  for (uint8_t size_class = DEPOT_FIRST_CLASS; size_class < CLASS_COUNT; size_class++) {
    int64_t stale_at = depot_stale_at(size_class);
    if (stale_at == 0) continue;
    if (stale_only && now < stale_at) {
      depot_check_note(stale_at);
      continue;
    }
    for (chain_t chain; (chain = depot_take(size_class, 0, 0)).head != NULL;)
      blocks_send_home(heap, chain.head);
  }
  heap_outbox_flush(heap);
  heap->outbox_home_only = home_only_before;
}

/* A depot this thread found stale while sending a chain: its chains go
 * home now, not at the next malloc slow path (a thread that only frees,
 * while the owners wait, may run none: their pages would empty only after
 * it). */
static void heap_depot_drain_due(shoal_heap_t *heap) {
  heap->depot_drain_due = false;
  heap_depot_drain(heap, true, os_now_ms());
}

/* Any malloc slow path of a thread with a heap, once a check is due. */
static void heap_depot_check(shoal_heap_t *heap) {
  int64_t due = atomic_load_explicit(&depot_check_at_ms, memory_order_relaxed);
  int64_t now = os_now_ms();
  if (now < due || !atomic_compare_exchange_strong_explicit(
                       &depot_check_at_ms, &due, 0, memory_order_relaxed, memory_order_relaxed))
    return;
  heap_depot_drain(heap, true, now);
}

/* Send every cached block home, e.g. when the thread ends. */
void heap_class_cache_flush(shoal_heap_t *heap) {
  bool home_only_before = heap->outbox_home_only;
  heap->outbox_home_only = true;
  for (uint8_t size_class = 0; size_class < CLASS_COUNT; size_class++) {
    if (!class_cache_marked(heap, size_class)) continue; /* its cache was never used */
    shoal_page_t *cache = &heap->class_cache[size_class];
    shoal_block_t *block = cache->free;
    class_cache_reset(heap, size_class);
    heap_direct_update(heap, size_class);
    blocks_send_home(heap, block);
  }
  heap_outbox_flush(heap);
  heap->outbox_home_only = home_only_before;
}

static slow_path void *out_of_memory(void) {
  errno = ENOMEM;
  return NULL;
}

void *heap_malloc_medium(shoal_heap_t *heap, size_t size, bool may_borrow) {
  uint8_t size_class = size_class_of(size);
  shoal_page_t *page = heap->queues[size_class].first;
  /* A small class gets here when its direct page ran dry: find_page also
   * re-points the direct slots. */
  if (size_class < DIRECT_CLASSES || page == NULL || page->free == NULL) {
    if (page != NULL) page_fold_counters(heap, page);
    page = heap_find_page(heap, size_class, may_borrow);
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

/* A large block's or a pool page of `slices` slices, shaped by `shape`:
 * a lender's resident ones when this heap has none of its own, else its
 * segments' (or a new segment's). NULL: out of memory. */
static shoal_page_t *heap_shaped_page(shoal_heap_t *heap, size_t slices, page_shape_t *shape,
                                      const void *how) {
  heap_retire_remotely_emptied(heap);
  if (heap->segments == NULL) heap_reuse_others_memory(heap);
  shoal_page_t *page = heap_lacks_resident_slices(heap, slices)
                           ? heap_borrow_slices(heap, slices, shape, how)
                           : NULL;
  if (page == NULL) {
    page = segment_page_alloc(heap, slices, CLASS_NONE);
    if (page != NULL) shape(heap, page, how);
  }
  return page;
}

typedef struct large_request_s {
  size_t size, alignment;
} large_request_t;

static uint8_t *large_block_start(const shoal_page_t *page, size_t alignment) {
  if (alignment <= SLICE_SIZE) return page->start;
  return (uint8_t *)(((uintptr_t)page->start + alignment - 1) & ~(uintptr_t)(alignment - 1));
}

static void large_page_shape(shoal_heap_t *heap, shoal_page_t *page, const void *how) {
  const large_request_t *request = how;
  size_t offset = (size_t)(large_block_start(page, request->alignment) - page->start);
  page_init(page, heap, large_block_bytes(page, offset + request->size), CLASS_LARGE,
            page->is_zero);
  page->has_aligned = offset != 0;
  page->capacity = page->reserved = 1;
  page->used = page->used_at_fold = 1; /* counted below, not by a pop */
  page_publish_extent(page);
}

/* A block of its own: slices of a segment up to LARGE_MAX, a huge segment
 * beyond. The page is parked from the start so a remote free reaches us. */
void *heap_malloc_large(shoal_heap_t *heap, size_t size, size_t alignment) {
  size_t extra = alignment > SLICE_SIZE ? alignment - SLICE_SIZE : 0;
  if (size > LARGE_MAX || size + extra > LARGE_MAX)
    return heap_malloc_huge(heap, size, alignment, false);
  heap_slow_enter(heap);
  heap_drain_notified(heap);
  heap_maybe_purge(heap);
  size_t slices = slices_spanned(size + extra);
  large_request_t request = {size, alignment};
  shoal_page_t *page = heap_shaped_page(heap, slices, large_page_shape, &request);
  if (page == NULL) {
    heap_slow_exit(heap);
    return out_of_memory();
  }
  uint8_t *block = large_block_start(page, alignment);
  heap_park(heap, page);
  /* Dirty slices may hold a free key; the key of an aligned block is kept
   * at the page start, where free looks for it. */
  ((shoal_block_t *)page->start)->key = 0;
  counter_add(&heap->counters.allocated[CLASS_LARGE], 1);
  counter_add(&heap->counters.outsized_allocated_bytes, page->block_size);
  heap_slow_exit(heap);
  return block;
}

/* ---- the medium pool: its pages, their remote frees, their purge ---- */

/* Pool frees between two looks at the purge clock (a few ns each, but
 * frees come every few dozen ns). */
#define POOL_FREES_PER_CLOCK 64
/* Free bytes in a pool page that make a purge worth scheduling. */
#define POOL_PURGE_MIN_FREE (64 * 1024)

/* Another thread's frees of the page's blocks, into its pool. */
static void heap_pool_collect(shoal_page_t *page) {
  for (shoal_block_t *block = page_take_remote_armed(page), *next; block != NULL; block = next) {
    next = block->next;
    pool_give(page, block);
  }
}

/* An empty pool page back to its segment; the heap's last one stays
 * (`keep_last`) against thrash at a page's edge, as a class's last page. */
static void heap_pool_page_emptied(shoal_heap_t *heap, shoal_page_t *page, bool keep_last) {
  if (keep_last && heap->pool.first == page && heap->pool.last == page) return;
  if (!page_unpark(page)) return; /* not empty after all: a remote free is on its way */
  list_remove(&heap->pool, page);
  heap_page_give_back(heap, page);
}

static void pool_page_shape(shoal_heap_t *heap, shoal_page_t *page, const void *how) {
  (void)how;
  page_init(page, heap, POOL_NOMINAL_BLOCK, CLASS_POOL, false);
  pool_page_init(page);
}

static shoal_page_t *heap_pool_open_page(shoal_heap_t *heap) {
  shoal_page_t *page = heap_shaped_page(heap, POOL_SLICES, pool_page_shape, NULL);
  if (page == NULL) return NULL;
  page_mark_parked(page);
  page_park_full(page);
  list_push_front(&heap->pool, page);
  return page;
}

/* The owner's pool changes without the slow lock (a thread serving the
 * heap leaves pool pages to the owner, heap_drain; a live heap's segment
 * with pool pages is never lent): the lock is taken only to drain, to
 * open or give back a page, and to purge. */
void *heap_pool_malloc(shoal_heap_t *heap, size_t size) {
  size_t need = pool_block_bytes(size);
  uint8_t size_class = size_class_of_large(size);
  if (unlikely(atomic_load_explicit(&heap->notified, memory_order_relaxed) != NULL)) {
    heap_slow_enter(heap);
    heap_drain_notified(heap);
    heap_slow_exit(heap);
  }
  void *block = NULL;
  shoal_page_t *page;
  for (page = heap->pool.first; page != NULL; page = page->next)
    if ((block = pool_take(page, need, size_class)) != NULL) break;
  if (block == NULL) {
    heap_slow_enter(heap);
    page = heap_pool_open_page(heap);
    heap_slow_exit(heap);
    if (page == NULL) return out_of_memory();
    block = pool_take(page, need, size_class);
  } else if (page != heap->pool.first) {
    list_remove(&heap->pool, page);
    list_push_front(&heap->pool, page);
  }
  counter_add(&heap->counters.allocated[size_class], 1);
  return block;
}

/* A free of the heap's own pool block. A purge is due when a page holds
 * enough free bytes; the clock is read every POOL_FREES_PER_CLOCK frees. */
void heap_pool_free(shoal_heap_t *heap, shoal_page_t *page, void *p, uint8_t size_class) {
  counter_add(&heap->counters.freed[size_class], 1);
  pool_give(page, p);
  if (page->used == 0) {
    heap_slow_enter(heap);
    heap_pool_page_emptied(heap, page, true);
    heap_slow_exit(heap);
  } else if (unlikely(++heap->pool_frees_unchecked >= POOL_FREES_PER_CLOCK)) {
    heap->pool_frees_unchecked = 0;
    heap_slow_enter(heap); /* a thread serving the heap may purge it too */
    if (atomic_load_explicit(&heap->purge_at_ms, memory_order_relaxed) != 0)
      heap_maybe_purge(heap);
    else if (pool_free_bytes(page) >= POOL_PURGE_MIN_FREE)
      purge_deadline_push(&heap->purge_at_ms, &heap->purge_latest_ms, os_now_ms(), purge_delay());
    heap_slow_exit(heap);
  }
}

bool heap_pool_grow(shoal_heap_t *heap, shoal_page_t *page, void *p, size_t size) {
  if (size > POOL_MAX) return false;
  uint8_t old_class = pool_block_of(page, p).size_class, size_class = size_class_of_large(size);
  bool grown = pool_grow(page, p, pool_block_bytes(size), size_class);
  if (grown) { /* counted as the size it has now */
    counter_add(&heap->counters.freed[old_class], 1);
    counter_add(&heap->counters.allocated[size_class], 1);
  }
  return grown;
}

static void *heap_malloc_slow_as(shoal_heap_t *heap, size_t size, bool may_borrow) {
  if (unlikely(heap == &heap_empty)) {
    heap = heap_get_or_create();
    if (heap == NULL) return out_of_memory();
  }
  counter_add(&heap->counters.slow_paths, 1);
  if (heap->outbox_occupied != 0) heap_outbox_flush(heap); /* a quiet moment to send them */
  if (atomic_load_explicit(&heap->mailbox, memory_order_relaxed) != NULL)
    heap_mailbox_deliver(heap);
  if (unlikely(atomic_load_explicit(&depot_check_at_ms, memory_order_relaxed) != 0))
    heap_depot_check(heap);
  heap_slow_enter(heap);
  if (unlikely(atomic_load_explicit(&others_purge_at_ms, memory_order_relaxed) != 0))
    heap_maybe_purge(heap);
  void *block = may_borrow && size_is_pooled(heap, size) ? heap_pool_malloc(heap, size)
                : size <= MEDIUM_MAX ? heap_malloc_medium(heap, size, may_borrow)
                : size > PTRDIFF_MAX ? out_of_memory()
                                     : heap_malloc_large(heap, size, 0);
  heap_slow_exit(heap);
  return block;
}

void *heap_malloc_slow(shoal_heap_t *heap, size_t size) {
  return heap_malloc_slow_as(heap, size, true);
}

void *heap_malloc_slow_exact(shoal_heap_t *heap, size_t size) {
  return heap_malloc_slow_as(heap, size, false);
}

/* ---- thread start and exit ---- */

/* A heap adopted from a dead thread: its non-large parked pages may still
 * have free blocks, so move them back to their queues. */
static void heap_take_over(shoal_heap_t *heap) {
  heap_slow_enter(heap);
  heap_mailbox_deliver(heap);
  shoal_page_t *page = heap->full.first;
  while (page != NULL) {
    shoal_page_t *next = page->next;
    if (page->size_class != CLASS_LARGE && !(page->flags & PAGE_BORROWED) && page_unpark(page)) {
      heap_unpark_listed(heap, page);
      page_collect(page);
      heap_queue_push_back(heap, page);
    }
    page = next;
  }
  heap_drain(heap, DRAIN_BY_OWNER);
  heap_take_reparked(heap);
  segment_purge_restart(heap);
  /* The new thread's usage counts from zero, as the dead one's did. */
  heap->usage_at_return = (os_thread_usage_t){0, 0, 0};
  atomic_store_explicit(&heap->owner_was_preempted, false, memory_order_relaxed);
  atomic_store_explicit(&heap->owner_thread_id, 0, memory_order_relaxed);
  /* Whose blocks the new thread frees is its own story. Written only where
   * set: these lie in the heap's sparse part, which a thread that freed no
   * other thread's blocks left unwritten. */
  if (heap->remote_owner_last != NULL || heap->chains_in_window != 0 ||
      heap->frees_for_many_heaps) {
    heap->remote_owner_last = NULL;
    heap->chains_in_window = heap->owner_changes_in_window = 0;
    heap->frees_for_many_heaps = false;
  }
  /* And whether other threads free its pool blocks: the dead thread's,
   * freed by others from now on, turn the pool off again. */
  atomic_store_explicit(&heap->pool_shunned, false, memory_order_relaxed);
  heap_slow_exit(heap);
}

/* A heap the arena has just carved: zeroed, registered. */
static void heap_init_new(shoal_heap_t *heap) {
  heap->free_key = free_key;
  for (size_t i = 0; i < DIRECT_SLOTS; i++) heap->direct_page[i] = &page_empty;
  /* The class caches stay zero, untouched until used (class_cache_fold
   * names each one's class): a heap a thread, 6 KiB less resident. */
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
  heap_slow_enter(heap);
  for (int size_class = 0; size_class < CLASS_COUNT; size_class++)
    for (shoal_page_t *page = heap->queues[size_class].first; page != NULL; page = page->next)
      page_fold_counters(heap, page);
  for (shoal_page_t *page = heap->full.first; page != NULL; page = page->next)
    page_fold_counters(heap, page);
  for (shoal_page_t *page = heap->reparked.first; page != NULL; page = page->next)
    page_fold_counters(heap, page);
  for (uint8_t size_class = 0; size_class < CLASS_COUNT; size_class++)
    if (class_cache_marked(heap, size_class)) class_cache_fold(heap, size_class);
  heap_slow_exit(heap);
}

/* Give every page the thread still holds to the arena: empty pages go back
 * to their segments now, the rest are parked so that the first remote free
 * into each brings a servicing thread, or an adopter finds them. */
void heap_abandon(shoal_heap_t *heap) {
  heap_slow_enter(heap);
  heap_fold_counters(heap);
  heap_class_cache_flush(heap);
  heap_mailbox_deliver(heap);
  heap_drain(heap, DRAIN_BY_OWNER);
  heap_take_reparked(heap); /* those notified meanwhile wait in the list for the drain */
  for (int size_class = 0; size_class < CLASS_COUNT; size_class++) {
    page_queue_t *queue = &heap->queues[size_class];
    while (queue->first != NULL) {
      shoal_page_t *page = queue->first;
      list_remove(queue, page);
      for (;;) {
        page_collect(page);
        if (page->used == 0) {
          heap_page_give_back(heap, page);
          break;
        }
        if (heap_park(heap, page)) break;
      }
    }
    heap_direct_update(heap, (uint8_t)size_class);
  }
  for (shoal_page_t *page = heap->pool.first, *next; page != NULL; page = next) {
    next = page->next;
    if (page->used == 0) heap_pool_page_emptied(heap, page, false);
  }
  /* Warm for the thread that adopts this heap next, up to the purge limit
   * (beyond it, lazily purged now), until its purge is due. */
  if (heap->purge_pending_bytes > (size_t)option(SHOAL_OPTION_PURGE_LIMIT))
    segment_purge_heap_lazy(heap);
  heap->abandoned_ms = os_now_ms();
  int64_t purge_at = atomic_load_explicit(&heap->purge_at_ms, memory_order_relaxed);
  if (purge_at != 0) {
    purge_at = heap_dead_purge_at(heap);
    atomic_store_explicit(&heap->purge_at_ms, purge_at, memory_order_relaxed);
    others_purge_note(purge_at);
  }
  atomic_store_explicit(&heap->state, HEAP_ABANDONED, memory_order_seq_cst);
  heap_slow_exit(heap); /* before an adopter may find it */
  arena_heap_abandoned(heap);
  heap_mailbox_deliver(heap); /* what was posted before the senders saw the state */
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
    heap_mailbox_deliver(heap);
    heap_drain(heap, DRAIN_ABANDONED);
    heap_maybe_purge(heap);
    int64_t purge_at = atomic_load_explicit(&heap->purge_at_ms, memory_order_relaxed);
    if (purge_at != 0) others_purge_note(purge_at);
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
  heap_slow_enter(heap);
  heap_fold_counters(heap);
  if (force) {
    heap_class_cache_flush(heap);
    heap_depot_drain(heap, false, 0);
  }
  heap_outbox_flush(heap);
  heap_mailbox_deliver(heap);
  heap_drain_notified(heap);
  for (int size_class = 0; size_class < CLASS_COUNT; size_class++) {
    shoal_page_t *page = heap->queues[size_class].first;
    while (page != NULL) {
      shoal_page_t *next = page->next;
      page_collect(page);
      if (force && page->used == 0) {
        queue_remove(heap, page);
        heap_page_give_back(heap, page);
      }
      page = next;
    }
  }
  for (shoal_page_t *page = force ? heap->pool.first : NULL, *next; page != NULL; page = next) {
    next = page->next;
    if (page->used == 0)
      heap_pool_page_emptied(heap, page, false);
    else
      pool_purge(page, true);
  }
  if (force) {
    heap_purge_untouched_tails(heap, false);
    segment_purge_heap(heap);
    huge_cache_trim(true);
  } else {
    heap_maybe_purge(heap);
  }
  heap_slow_exit(heap);
}
