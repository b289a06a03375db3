/* memory-at-peak — where a process's resident memory sits when its RSS
 * peaks, read from shoal's own structures: a library preloaded after
 * libshoal (tools/memory-at-peak.sh builds and runs it).
 *
 * A thread reads the process's RSS every MEMORY_AT_PEAK_MS milliseconds
 * (default 20) and, at each new peak 3 % above the last one it walked (or
 * at any new peak, ten samples after the last walk), walks every segment:
 * each 1 MiB-aligned stretch of the anonymous mappings whose header names
 * itself as one (kind, size, and the header slice's page offset). One
 * mincore per segment gives its resident OS pages; the page descriptors say
 * what each run of slices holds. At exit it prints the last walk: class
 * pages (resident, carved, handed out), large blocks, free slices (freed
 * since their heap's last purge, older, purged lazily), segment headers,
 * huge blocks, the rest of the process. The blocks handed out split into
 * those the program holds (or the depot: it is not read) and those freed
 * but not yet back on their page's free list: on the page's list of other
 * threads' frees (its count), in the heaps' class caches, in their
 * outboxes and in their owners' mailboxes (read from the heap structs of
 * the segments' owners, their resident OS pages only: a thread that only
 * frees owns no segment, and what its outbox holds counts as with the
 * program; prodcons 1:64 held 2.5 MB so).
 *
 * A developer's probe, not a diagnostic of the library: it reads another
 * thread's structures without their locks, so a figure may be off by a
 * page in flux; a segment unmapped under the walk is skipped (SIGSEGV is
 * caught for the walking thread only). It allocates nothing while it
 * walks. It is compiled against the tree's src/core/internal.h: build it
 * from the same tree as the library it watches.
 *
 * MEMORY_AT_PEAK_CLASSES=1 adds a row per class, MEMORY_AT_PEAK_HEAPS=N the
 * N heaps holding the most. A program may call memory_at_peak_now (dlsym)
 * to have the report show the moment it chooses. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"

#define OS_PAGE          4096
#define MAX_HEAPS        1024
#define ROWS             (CLASS_NONE + 1)
#define WALK_RISE_PCT    3  /* a new peak this far above the last walk is walked at once, */
#define WALK_LAG_PERIODS 10 /* a smaller one after this many samples */
#define MAPS_BUFFER      (1 << 20)

typedef struct {
  long pages, resident, carved, in_use;
  long remote_pending; /* of in_use: freed by other threads, on the page's list */
  long freed_resident; /* free slices this class's pages gave back, still resident */
  uint32_t block_size;
} class_row_t;

typedef struct {
  const void *heap;
  long segments, resident_in_pages, resident_free;
} heap_row_t;

enum { FREE_RECENT, FREE_AGED, FREE_LAZY, FREE_KINDS };

typedef struct {
  long rss_kb, at_ms;
  long heap_segments, cached_segments, huge_segments;
  long headers, huge_resident;
  long free_resident[FREE_KINDS];
  long in_caches, in_outboxes, in_mailboxes; /* of the blocks handed out: held by heaps */
  class_row_t rows[ROWS];
  heap_row_t heaps[MAX_HEAPS];
  int heap_count;
} walk_t;

static walk_t current, kept;
static long peak_rss_kb, start_ms;
static _Atomic(bool) reporting,
    walking; /* the exit report and the watcher keep out of each other's way */
static struct sigaction program_segv, program_bus;
static char maps_text[MAPS_BUFFER];
static __thread sigjmp_buf *skip_segment;

static long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The whole of a small /proc file, without stdio (which would allocate). */
static size_t read_text(const char *path, char *out, size_t capacity) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t length = 0;
  ssize_t got;
  while (length + 1 < capacity && (got = read(fd, out + length, capacity - 1 - length)) > 0)
    length += (size_t)got;
  close(fd);
  out[length] = '\0';
  return length;
}

static long rss_kb(void) {
  char text[128];
  if (read_text("/proc/self/statm", text, sizeof text) == 0) return 0;
  char *field = strchr(text, ' ');
  return field != NULL ? strtol(field + 1, NULL, 10) * (OS_PAGE / 1024) : 0;
}

/* The kernel's own peak (VmHWM): samples may miss a short peak. */
static long peak_from_status_kb(void) {
  static char text[8192];
  if (read_text("/proc/self/status", text, sizeof text) == 0) return 0;
  const char *field = strstr(text, "VmHWM:");
  return field != NULL ? strtol(field + 6, NULL, 10) : 0;
}

static void on_segv(int signal, siginfo_t *info, void *context) {
  (void)info, (void)context;
  if (skip_segment != NULL) siglongjmp(*skip_segment, 1);
  /* Not ours: as if this handler had never been there. */
  sigaction(signal, signal == SIGSEGV ? &program_segv : &program_bus, NULL);
  raise(signal);
}

static heap_row_t *heap_row(walk_t *walk, const void *heap) {
  for (int i = 0; i < walk->heap_count; i++)
    if (walk->heaps[i].heap == heap) return &walk->heaps[i];
  if (walk->heap_count == MAX_HEAPS) return &walk->heaps[MAX_HEAPS - 1];
  heap_row_t *row = &walk->heaps[walk->heap_count++];
  row->heap = heap;
  return row;
}

static long resident_bytes(const unsigned char *vector, size_t first_byte, size_t bytes) {
  long pages = 0;
  for (size_t i = first_byte / OS_PAGE; i < (first_byte + bytes) / OS_PAGE; i++)
    pages += vector[i] & 1;
  return pages * OS_PAGE;
}

static bool is_segment(const shoal_segment_t *segment) {
  return (segment->kind == SEGMENT_NORMAL && segment->size == SEGMENT_SIZE &&
          segment->page_offset[0] == offsetof(shoal_segment_t, pages)) ||
         (segment->kind == SEGMENT_HUGE && segment->size > SEGMENT_SIZE);
}

static void walk_slices(walk_t *walk, const shoal_segment_t *segment, const unsigned char *vector) {
  const void *heap = atomic_load_explicit(&segment->heap, memory_order_relaxed);
  heap_row_t *owner = heap != NULL ? heap_row(walk, heap) : NULL;
  if (owner != NULL) {
    walk->heap_segments++;
    owner->segments++;
  } else {
    walk->cached_segments++;
  }
  walk->headers += resident_bytes(vector, 0, SLICE_SIZE);
  uint8_t freed_class = CLASS_NONE; /* the class whose page gave back the free run walked */
  for (size_t slice = 1; slice < SLICES_PER_SEGMENT;) {
    if ((segment->free_slices >> slice) & 1) {
      long resident = resident_bytes(vector, slice * SLICE_SIZE, SLICE_SIZE);
      int kind = (segment->lazy_slices >> slice) & 1     ? FREE_LAZY
                 : (segment->recent_slices >> slice) & 1 ? FREE_RECENT
                                                         : FREE_AGED;
      walk->free_resident[kind] += resident;
      /* A page gave its class to its first slice: the rest of its run follow. */
      if (segment->pages[slice].freed_class != CLASS_NONE)
        freed_class = segment->pages[slice].freed_class;
      walk->rows[freed_class < ROWS ? freed_class : CLASS_NONE].freed_resident += resident;
      if (owner != NULL) owner->resident_free += resident;
      slice++;
      continue;
    }
    freed_class = CLASS_NONE;
    const shoal_page_t *page = &segment->pages[slice];
    size_t count = page->slice_count != 0 ? page->slice_count : 1;
    if (slice + count > SLICES_PER_SEGMENT) count = SLICES_PER_SEGMENT - slice;
    long resident = resident_bytes(vector, slice * SLICE_SIZE, count * SLICE_SIZE);
    class_row_t *row = &walk->rows[page->size_class < ROWS ? page->size_class : CLASS_NONE];
    row->pages++;
    row->resident += resident;
    row->carved += (long)page->capacity * page->block_size;
    row->in_use += (long)page->used * page->block_size;
    uint64_t pending =
        atomic_load_explicit(&page->xthread_free, memory_order_relaxed) >> XTHREAD_COUNT_SHIFT;
    row->remote_pending += (long)pending * page->block_size;
    row->block_size = page->block_size;
    if (owner != NULL) owner->resident_in_pages += resident;
    slice += count;
  }
}

static void walk_segment(walk_t *walk, uintptr_t at) {
  static unsigned char vector[SEGMENT_SIZE / OS_PAGE];
  if (mincore((void *)at, SEGMENT_SIZE, vector) != 0 || !(vector[0] & 1)) return;
  sigjmp_buf here;
  if (sigsetjmp(here, 1) != 0) { /* unmapped under us */
    skip_segment = NULL;
    return;
  }
  skip_segment = &here;
  const shoal_segment_t *segment = (const shoal_segment_t *)at;
  if (is_segment(segment)) {
    if (segment->kind == SEGMENT_HUGE) {
      walk->huge_segments++;
      size_t size = segment->size;
      for (size_t done = 0; done < size; done += SEGMENT_SIZE) {
        size_t part = size - done < SEGMENT_SIZE ? size - done : SEGMENT_SIZE;
        if (mincore((uint8_t *)at + done, part, vector) == 0)
          walk->huge_resident += resident_bytes(vector, 0, part & ~(size_t)(OS_PAGE - 1));
      }
    } else {
      walk_slices(walk, segment, vector);
    }
  }
  skip_segment = NULL;
}

/* What a heap holds of other pages' blocks: its class caches (the thread's
 * own medium blocks and other threads' blocks it freed) and its outbox
 * (other threads' blocks on their way home). Only the heap's resident OS
 * pages are read: reading an untouched one would map it. */
static void walk_heap_holdings(walk_t *walk, const shoal_heap_t *heap) {
  static unsigned char vector[sizeof(shoal_heap_t) / OS_PAGE + 2];
  uintptr_t first = (uintptr_t)heap & ~(uintptr_t)(OS_PAGE - 1);
  size_t span = (uintptr_t)heap + sizeof *heap - first;
  if (mincore((void *)first, span, vector) != 0) return;
#define RESIDENT(address) (vector[((uintptr_t)(address)-first) / OS_PAGE] & 1)
  for (int c = 0; c < CLASS_COUNT; c++) {
    const shoal_page_t *cache = &heap->class_cache[c];
    if (!RESIDENT(cache) || !RESIDENT((const char *)(cache + 1) - 1)) continue;
    long held = (long)cache->capacity - (long)cache->used;
    if (held > 0) walk->in_caches += held * walk->rows[c].block_size;
  }
  walk->in_mailboxes += (long)atomic_load_explicit(&heap->mailbox_bytes, memory_order_relaxed);
  if (!RESIDENT(&heap->outbox[0]) || !RESIDENT(&heap->outbox[OUTBOX_SLOTS - 1])) return;
  for (unsigned i = 0; i < OUTBOX_SLOTS; i++) {
    if (!((heap->outbox_occupied >> i) & 1)) continue;
    const outbox_slot_t *slot = &heap->outbox[i];
    if (slot->page != NULL)
      walk->in_outboxes += (long)slot->chain.count * slot->page->block_size;
    else
      walk->in_outboxes += slot->mail.bytes;
  }
#undef RESIDENT
}

static void walk(walk_t *walk, long rss) {
  memset(walk, 0, sizeof *walk);
  walk->rss_kb = rss;
  walk->at_ms = now_ms() - start_ms;
  if (read_text("/proc/self/maps", maps_text, sizeof maps_text) == 0) return;
  for (char *line = maps_text; *line != '\0';) {
    char *end = strchr(line, '\n');
    if (end != NULL) *end = '\0';
    unsigned long low, high, offset, inode;
    char permissions[8], device[16];
    if (sscanf(line, "%lx-%lx %7s %lx %15s %lu", &low, &high, permissions, &offset, device,
               &inode) == 6 &&
        inode == 0 && permissions[0] == 'r')
      for (uintptr_t at = (low + SEGMENT_MASK) & ~SEGMENT_MASK; at + SEGMENT_SIZE <= high;
           at += SEGMENT_SIZE)
        walk_segment(walk, at);
    if (end == NULL) break;
    line = end + 1;
  }
  for (int i = 0; i < walk->heap_count; i++) walk_heap_holdings(walk, walk->heaps[i].heap);
}

static pthread_mutex_t walk_lock = PTHREAD_MUTEX_INITIALIZER; /* a walk at a time */
static bool frozen; /* (walk_lock) memory_at_peak_now walked: the report's walk */
static pthread_once_t catch_once = PTHREAD_ONCE_INIT;

static void catch_faults(void) {
  struct sigaction catch = {.sa_sigaction = on_segv, .sa_flags = SA_SIGINFO | SA_NODEFER};
  sigaction(SIGSEGV, &catch, &program_segv);
  sigaction(SIGBUS, &catch, &program_bus);
}

/* For a program that knows when it holds what it wants seen (the test's,
 * found with dlsym): a walk now, in the caller's thread, which the report
 * shows; the watcher walks no more. On a loaded machine the watcher may
 * not run at the moment that matters, or may walk again later at a peak a
 * few pages higher that the program's frees made. */
void memory_at_peak_now(void);
void memory_at_peak_now(void) {
  pthread_once(&catch_once, catch_faults);
  pthread_mutex_lock(&walk_lock);
  long rss = rss_kb();
  if (rss > peak_rss_kb) peak_rss_kb = rss;
  walk(&current, rss);
  kept = current;
  frozen = true;
  pthread_mutex_unlock(&walk_lock);
}

static void *watch(void *unused) {
  (void)unused;
  const char *period_text = getenv("MEMORY_AT_PEAK_MS");
  long period = period_text != NULL ? atol(period_text) : 20;
  if (period < 1) period = 1;
  pthread_once(&catch_once, catch_faults);
  for (;;) {
    atomic_store(&walking, true);
    if (atomic_load(&reporting)) break;
    pthread_mutex_lock(&walk_lock);
    long rss = rss_kb();
    if (rss > peak_rss_kb) peak_rss_kb = rss;
    bool rose = rss * 100 > current.rss_kb * (100 + WALK_RISE_PCT),
         crept = rss > current.rss_kb &&
                 now_ms() - start_ms - current.at_ms >= WALK_LAG_PERIODS * period;
    if (!frozen && (rose || crept)) {
      walk(&current, rss);
      kept = current; /* the exit report reads only this copy */
    }
    pthread_mutex_unlock(&walk_lock);
    atomic_store(&walking, false);
    struct timespec pause = {period / 1000, (period % 1000) * 1000000};
    nanosleep(&pause, NULL);
  }
  atomic_store(&walking, false);
  return NULL;
}

__attribute__((constructor)) static void start(void) {
  start_ms = now_ms();
  pthread_t thread;
  if (pthread_create(&thread, NULL, watch, NULL) == 0) pthread_detach(thread);
}

static void print_row(const char *what, long bytes, long of_kb) {
  fprintf(stderr, "  %-48s %9ld KB %5.1f %%\n", what, bytes / 1024,
          of_kb > 0 ? 100.0 * (double)(bytes / 1024) / (double)of_kb : 0.0);
}

static int by_resident(const void *a, const void *b) {
  const heap_row_t *x = a, *y = b;
  long left = x->resident_in_pages + x->resident_free,
       right = y->resident_in_pages + y->resident_free;
  return (left < right) - (left > right);
}

__attribute__((destructor)) static void report(void) {
  atomic_store(&reporting, true);
  for (int waited = 0; atomic_load(&walking) && waited < 1000; waited++) { /* a walk ends in ms */
    struct timespec pause = {0, 1000000};
    nanosleep(&pause, NULL);
  }
  walk_t *walk = &kept;
  long total = walk->rss_kb, peak = peak_from_status_kb();
  fprintf(stderr,
          "\nmemory-at-peak: peak RSS %ld KB (sampled %ld); walked at %ld KB, %ld ms in: %ld "
          "segments of heaps, %ld cached, %ld huge\n",
          peak, peak_rss_kb, total, walk->at_ms, walk->heap_segments, walk->cached_segments,
          walk->huge_segments);
  if (total * 10 < peak * 9)
    fprintf(
        stderr,
        "  (the walk missed the peak by over 10 %%: a shorter MEMORY_AT_PEAK_MS may catch it)\n");
  class_row_t classes = {0};
  for (int c = 0; c < CLASS_COUNT; c++) {
    classes.pages += walk->rows[c].pages;
    classes.resident += walk->rows[c].resident;
    classes.carved += walk->rows[c].carved;
    classes.in_use += walk->rows[c].in_use;
    classes.remote_pending += walk->rows[c].remote_pending;
  }
  const class_row_t *large = &walk->rows[CLASS_LARGE];
  long accounted = classes.resident + large->resident + walk->headers + walk->huge_resident;
  char what[96];
  snprintf(what, sizeof what, "class pages (%ld)", classes.pages);
  print_row(what, classes.resident, total);
  print_row("  of it, blocks handed out (remote frees too)", classes.in_use, total);
  long held = classes.remote_pending + walk->in_caches + walk->in_outboxes + walk->in_mailboxes;
  print_row("    with the program (and in the depot)", classes.in_use - held, total);
  print_row("    freed by others, on their pages' lists", classes.remote_pending, total);
  print_row("    freed, in class caches", walk->in_caches, total);
  print_row("    freed by others, in their outboxes", walk->in_outboxes, total);
  print_row("    freed by others, in owners' mailboxes", walk->in_mailboxes, total);
  print_row("  free blocks carved", classes.carved - classes.in_use, total);
  print_row("  resident, not carved", classes.resident - classes.carved, total);
  snprintf(what, sizeof what, "large blocks (%ld)", large->pages);
  print_row(what, large->resident, total);
  static const char *const free_names[FREE_KINDS] = {"free slices, freed since their heap's purge",
                                                     "free slices, older",
                                                     "free slices, lazily purged"};
  for (int kind = 0; kind < FREE_KINDS; kind++) {
    print_row(free_names[kind], walk->free_resident[kind], total);
    accounted += walk->free_resident[kind];
  }
  print_row("segment headers", walk->headers, total);
  print_row("huge blocks", walk->huge_resident, total);
  print_row("the rest (code, stacks, heaps, other mappings)", total * 1024 - accounted, total);
  if (getenv("MEMORY_AT_PEAK_CLASSES") != NULL)
    for (int c = 0; c < ROWS; c++) {
      const class_row_t *row = &walk->rows[c];
      if (c < CLASS_COUNT && row->pages != 0)
        fprintf(stderr,
                "  class %2d %6u B: %4ld pages, %7ld KB resident, %7ld carved, %7ld handed out, "
                "%7ld in free slices it gave back\n",
                c, row->block_size, row->pages, row->resident / 1024, row->carved / 1024,
                row->in_use / 1024, row->freed_resident / 1024);
      else if (c >= CLASS_COUNT && row->freed_resident != 0)
        fprintf(stderr, "  %-10s: %ld KB in free slices it gave back\n",
                c == CLASS_LARGE  ? "large"
                : c == CLASS_HUGE ? "huge"
                                  : "pool, none",
                row->freed_resident / 1024);
    }
  long heaps_shown =
      getenv("MEMORY_AT_PEAK_HEAPS") != NULL ? atol(getenv("MEMORY_AT_PEAK_HEAPS")) : 0;
  qsort(walk->heaps, (size_t)walk->heap_count, sizeof walk->heaps[0], by_resident);
  for (int i = 0; i < walk->heap_count && i < heaps_shown; i++)
    fprintf(stderr, "  heap %p: %ld segments, %ld KB resident in pages, %ld KB in free slices\n",
            walk->heaps[i].heap, walk->heaps[i].segments, walk->heaps[i].resident_in_pages / 1024,
            walk->heaps[i].resident_free / 1024);
}
