/* segment, page and heap layers seen from inside: a page serves its blocks
 * at its own addresses, parks when full, is notified by a remote free, and
 * returns to its segment when empty; a dead thread's heap is serviced by a
 * remote free and adopted by the next thread. */
#include "../testhelper.h"
#include "core/internal.h"

#include <pthread.h>

static void *blocks[4096];
static size_t block_count;

static void *allocate_page_worth(void *arg) {
  size_t size = (size_t)(uintptr_t)arg;
  block_count = 0;
  for (size_t i = 0; i < 4096; i++) blocks[block_count++] = shoal_malloc(size);
  return thread_heap;
}

static void *free_all(void *arg) {
  (void)arg;
  for (size_t i = 0; i < block_count; i++) shoal_free(blocks[i]);
  return NULL;
}

int main(void) {
  /* A page: blocks are consecutive in one page until it is full. */
  void *first = shoal_malloc(48);
  shoal_segment_t *segment = segment_of(first);
  CHECK(segment_find(first) == segment && segment->kind == SEGMENT_NORMAL);
  shoal_page_t *page = segment_page_of(segment, first);
  CHECK(page->size_class == size_class_of(48) && page->block_size == 48);
  CHECK(atomic_load(&page->owner) == (uintptr_t)thread_heap);
  CHECK(page_is_block_start(page, first));
  CHECK(!page_is_block_start(page, (uint8_t *)first + 8));
  size_t in_page = page->reserved;
  void **same = malloc(sizeof(void *) * in_page);
  same[0] = first;
  for (size_t i = 1; i < in_page; i++) {
    same[i] = shoal_malloc(48);
    CHECK(segment_page_of(segment_of(same[i]), same[i]) == page);
  }
  CHECK(page->used == in_page && page->capacity == page->reserved);
  void *next = shoal_malloc(48); /* the page is full: parked, a new page serves */
  CHECK(segment_page_of(segment_of(next), next) != page);
  CHECK((page->flags & PAGE_FULL) != 0 && atomic_load(&page->xthread_free) == 1);

  /* A remote free of a parked page notifies the owner, which unparks it. */
  block_count = 0;
  blocks[block_count++] = same[5];
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, free_all, NULL) == 0);
  pthread_join(thread, NULL);
  CHECK(atomic_load(&thread_heap->notified) == page);
  shoal_collect(false); /* drains the notification: the page is back in its queue */
  CHECK((page->flags & PAGE_FULL) == 0);
  /* Behind the page serving the class, so that its one free block does not
   * make every other malloc a slow path. */
  CHECK(thread_heap->queues[page->size_class].last == page);
  CHECK(thread_heap->queues[page->size_class].first != page);
  void *again = shoal_malloc(48);
  CHECK(again != same[5] && segment_page_of(segment_of(again), again) != page);

  /* Freeing every block returns the page's slices to its segment. */
  shoal_stats_t full_pages;
  shoal_stats_get(&full_pages);
  shoal_free(again);
  for (size_t i = 0; i < in_page; i++)
    if (i != 5) shoal_free(same[i]);
  shoal_free(next);
  shoal_collect(true); /* may unmap the segment: no more looks at `page` */
  shoal_stats_t emptied;
  shoal_stats_get(&emptied);
  CHECK(emptied.pages + 2 <= full_pages.pages);

  /* A dead thread's blocks freed here: its heap is serviced and emptied. */
  shoal_heap_t *dead_heap;
  CHECK(pthread_create(&thread, NULL, allocate_page_worth, (void *)(uintptr_t)200) == 0);
  pthread_join(thread, (void **)&dead_heap);
  CHECK(atomic_load(&dead_heap->state) == HEAP_ABANDONED);
  shoal_stats_t before;
  shoal_stats_get(&before);
  free_all(NULL);
  shoal_stats_t after;
  shoal_stats_get(&after);
  CHECK(after.live_blocks == before.live_blocks - block_count);
  shoal_collect(true);                /* sends home what this thread's remote cache kept */
  CHECK(dead_heap->segments == NULL); /* every page went back */

  /* The next thread adopts that heap rather than making a new one. */
  CHECK(pthread_create(&thread, NULL, allocate_page_worth, (void *)(uintptr_t)64) == 0);
  shoal_heap_t *adopted;
  pthread_join(thread, (void **)&adopted);
  CHECK(adopted == dead_heap);
  free_all(NULL);
  free(same);
  printf("segment/page/heap: all checks hold (%zu blocks of 48 per page)\n", in_page);
  return 0;
}
