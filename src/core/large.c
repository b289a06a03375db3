/* large.c — huge blocks: beyond LARGE_MAX, each block is a segment of its own.
 *
 * The mapping starts with a segment header (so a pointer still finds its
 * page by masking) and the block follows at HUGE_BLOCK_OFFSET, or at the
 * requested alignment. Growth moves into a cached block that holds the new
 * size, or else uses mremap, which moves page tables instead of bytes, and
 * grows by a quarter at least; a shrink to half the mapping or more keeps
 * it (huge_realloc). Freed blocks
 * wait in a cache (huge_free says how much it keeps) so a program that
 * frees and re-allocates big buffers does not fault them in again each
 * time; what has waited a second or more is unmapped at a thread's next
 * due purge, or at a collect.
 *
 * Blocks from malloc ask for transparent huge pages (SHOAL_HUGE_PAGES): a
 * program writing big buffers then takes one fault per 2 MiB instead of 512
 * (bench largeblk ran 40 % faster, its peak memory unchanged). calloc's are
 * left to small pages, since big zeroed arrays are the ones programs touch
 * sparsely, and so is the tail of a block that realloc grows (huge_realloc). */
#include "core/internal.h"

#include <string.h>

#define HUGE_CACHE_SLOTS      64
#define HUGE_CACHE_MIN_AGE_MS 1000 /* never unmap a cached block younger than this */
#define HUGE_GROWTH_DIVISOR   4    /* a huge block that grows, grows by a quarter at least */

/* The cache of freed huge blocks takes no lock: a slot is a word, the
 * block's address (aligned to SEGMENT_SIZE) with its mapping's size in OS
 * pages in the bits below, so that a thread choosing a block reads the
 * slots alone, never the header of a block that another thread may take
 * and unmap meanwhile. A block is filled into a slot and taken out of it
 * with one atomic each. With a lock, each huge malloc and free held
 * signals off around it (lock.c says why), two system calls that were 13 %
 * of largemix t=1's time on this virtual machine; without one, a signal
 * handler or a fork finds every slot whole. A freed block goes into the
 * first empty slot from the ring's next one on, so that the slots after the
 * last filled hold the older blocks, which go first when the cache is over
 * its limit. (Evicting whatever the ring came round to threw out the big
 * blocks that wait longest for a request their size: largemix grew smaller
 * ones to serve it instead, 78 resizes against 11, and faulted in three
 * times the memory.) */
#define SLOT_SIZE_BITS 20 /* a mapping's OS pages (4 GiB of 4 KiB); the address keeps the rest */
#define SLOT_SIZE_MASK (((uint64_t)1 << SLOT_SIZE_BITS) - 1)
_Static_assert(SEGMENT_SIZE >= ((size_t)1 << SLOT_SIZE_BITS), "a slot's size bits are free");

_Atomic(size_t) stat_huge_blocks;
static struct {
  _Atomic(uint64_t) slots[HUGE_CACHE_SLOTS]; /* 0: empty */
  _Atomic(size_t) next_slot;                 /* the ring's next slot to fill */
  _Atomic(size_t) bytes;                     /* mapped by the blocks in the slots */
  _Atomic(size_t) footprint_peak;            /* the most committed outside the cache lately */
} cache;

static uint64_t slot_word(const shoal_segment_t *segment) {
  return (uint64_t)(uintptr_t)segment | (uint64_t)(segment->size / os_page_size());
}

static shoal_segment_t *slot_segment(uint64_t word) {
  return (shoal_segment_t *)(uintptr_t)(word & ~SLOT_SIZE_MASK);
}

static size_t slot_size(uint64_t word) {
  return (size_t)(word & SLOT_SIZE_MASK) * os_page_size();
}

/* What shoal holds outside the cache. A block taken is counted out of the
 * cache before its mapping is, so a thread reading both meanwhile may find
 * the cache the larger. */
static size_t huge_footprint(void) {
  size_t cached = atomic_load_explicit(&cache.bytes, memory_order_relaxed);
  size_t committed = os_committed_bytes();
  return committed > cached ? committed - cached : 0;
}

/* The slot's block, taken: its header is ours to read from here. */
static bool slot_take(size_t index, uint64_t word) {
  if (!atomic_compare_exchange_strong_explicit(&cache.slots[index], &word, 0, memory_order_acquire,
                                               memory_order_relaxed))
    return false;
  atomic_fetch_sub_explicit(&cache.bytes, slot_size(word), memory_order_relaxed);
  return true;
}

static size_t round_to_os_page(size_t size) {
  return (size + os_page_size() - 1) & ~(os_page_size() - 1);
}

/* Huge mappings up to HUGE_ROUNDED_MAX come in powers of two, so that a
 * freed block serves the next of its size without a resize: a resize
 * faults in what it adds and gives back what it cuts, and blocks of 1-5 MiB
 * replaced at random (bench largemix) ran four times slower with exact
 * sizes. Only what the program touches of the rest is resident (in 2 MiB
 * steps where transparent huge pages back it), and malloc_usable_size says
 * the whole mapping is the block's. */
#define HUGE_ROUNDED_MAX ((size_t)32 << 20)

static size_t huge_mapping_size(size_t bytes) {
  size_t size = round_to_os_page(bytes);
  if (size > HUGE_ROUNDED_MAX) return size;
  size_t power = (size_t)1 << (63 - __builtin_clzll(size));
  return power == size ? size : power << 1;
}

/* The bytes from the segment's start to the last huge-page boundary within
 * its first `bytes`. */
static size_t huge_pages_covered(const shoal_segment_t *segment, size_t bytes) {
  uintptr_t start = (uintptr_t)segment, end = (start + bytes) & ~(os_huge_page_size() - 1);
  return end > start ? end - start : 0;
}

static void huge_set_header(shoal_segment_t *segment, size_t mapped, size_t offset) {
  atomic_store_explicit(&segment->heap, NULL, memory_order_relaxed);
  segment->next = segment->prev = NULL;
  segment->size = mapped;
  segment->kind = SEGMENT_HUGE;
  segment->free_slices = 0;
  for (size_t i = 0; i < SLICES_PER_SEGMENT; i++) segment_slice_set_page(segment, i, 0);
  shoal_page_t *page = &segment->pages[0];
  memset(page, 0, sizeof *page);
  page->size_class = CLASS_HUGE;
  page->start = (uint8_t *)segment + offset;
  page->has_aligned = offset != HUGE_BLOCK_OFFSET;
  page->capacity = page->reserved = page->used = 1;
  page->flags = PAGE_UNUSED; /* never on a fast path: the segment has no heap */
  page_publish_shape(page);
}

static void huge_unmap(shoal_segment_t *segment) {
  segment_map_set(segment, segment->size, 0);
  os_commit_note(-(ptrdiff_t)segment->size);
  os_unmap(segment, segment->size);
}

/* Resize a cached block's mapping; keeps its resident pages. False: unchanged. */
static bool huge_resize_mapping(shoal_segment_t **segment, size_t mapped) {
  shoal_segment_t *old = *segment;
  size_t old_size = old->size;
  /* Advice for the first part only (huge_alloc) left two kernel mappings,
   * which no resize moves: one advice for the whole makes them one. Not
   * huge pages for the whole: the huge pages there stay, and huge_alloc asks
   * again for the whole ones of the block it hands out. */
  if (old->huge_advised != 0 && old->huge_advised < old_size) {
    os_advise_huge_pages(old, old_size, false);
    old->huge_advised = 0;
  }
  /* Clear the map first: once the kernel frees a range another thread may
   * map a segment there and mark it. */
  segment_map_set(old, old_size, 0);
  shoal_segment_t *moved = os_remap_aligned(old, old_size, mapped, SEGMENT_SIZE);
  if (moved == NULL) {
    segment_map_set(old, old_size, 1);
    return false;
  }
  moved->size = mapped;
  if (moved->huge_advised > mapped) moved->huge_advised = mapped; /* a grown tail is asked anew */
  os_commit_note((ptrdiff_t)mapped - (ptrdiff_t)old_size);
  segment_map_set(moved, mapped, 1);
  *segment = moved;
  return true;
}

/* A cached block up to this many times the mapping a request needs serves
 * it whole; a larger one is cut to size. What a cut gives back faults in
 * again when the next big request comes: largemix (1-5 MiB blocks replaced
 * at random) cut 8 MiB blocks for 2 MiB requests and grew 4 MiB ones for
 * the next 4-5 MiB request, and zeroed 580-660 MiB of huge pages for it in
 * 24,000 replacements. Served whole, and with huge pages for a block's
 * whole ones only (huge_alloc), 18 MiB: 17 % less time at full size, and a
 * lower peak. */
#define HUGE_SERVE_WHOLE_FACTOR 4

/* Best fit from the cache. Missing that, and with `or_largest`, the
 * largest cached block grows to size: its resident pages need no fault,
 * only the new tail does. */
static shoal_segment_t *huge_cache_take(size_t mapped, bool or_largest) {
  if (atomic_load_explicit(&cache.bytes, memory_order_relaxed) == 0) return NULL;
  shoal_segment_t *segment = NULL;
  for (int attempt = 0; attempt < 4 && segment == NULL; attempt++) { /* others take too */
    size_t best = HUGE_CACHE_SLOTS, largest = HUGE_CACHE_SLOTS;
    uint64_t words[HUGE_CACHE_SLOTS];
    for (size_t i = 0; i < HUGE_CACHE_SLOTS; i++) {
      words[i] = atomic_load_explicit(&cache.slots[i], memory_order_relaxed);
      if (words[i] == 0) continue;
      size_t size = slot_size(words[i]);
      if (size >= mapped && (best == HUGE_CACHE_SLOTS || size < slot_size(words[best]))) best = i;
      if (largest == HUGE_CACHE_SLOTS || size > slot_size(words[largest])) largest = i;
    }
    if (best == HUGE_CACHE_SLOTS && or_largest) best = largest;
    if (best == HUGE_CACHE_SLOTS) return NULL;
    if (slot_take(best, words[best])) segment = slot_segment(words[best]);
  }
  if (segment == NULL) return NULL;
  if (segment->size < mapped || segment->size / HUGE_SERVE_WHOLE_FACTOR > mapped) {
    if (!huge_resize_mapping(&segment, mapped) && segment->size < mapped) {
      huge_unmap(segment);
      return NULL;
    }
  }
  return segment;
}

void *huge_alloc(size_t size, size_t alignment, bool zero) {
  size_t offset = alignment > HUGE_BLOCK_OFFSET ? alignment : HUGE_BLOCK_OFFSET;
  if (size > PTRDIFF_MAX - offset - SEGMENT_SIZE) return NULL;
  size_t mapped = offset == HUGE_BLOCK_OFFSET ? huge_mapping_size(offset + size)
                                              : round_to_os_page(offset + size);
  shoal_segment_t *segment = NULL;
  bool fresh = false;
  if (offset == HUGE_BLOCK_OFFSET) segment = huge_cache_take(mapped, true);
  if (segment == NULL) {
    /* A block of a huge page or more starts on one, so that its first
     * bytes get huge pages too and a move keeps them whole (os.h). */
    size_t align = mapped >= os_huge_page_size() ? os_huge_page_size() : SEGMENT_SIZE;
    if (alignment > align) align = alignment;
    segment = os_map_aligned(mapped, align);
    if (segment == NULL) {
      huge_cache_trim(true); /* cached blocks may be what stands in the way */
      segment = os_map_aligned(mapped, align);
      if (segment == NULL) return NULL;
    }
    segment_map_set(segment, mapped, 1);
    os_commit_note((ptrdiff_t)mapped);
    fresh = true;
  }
  huge_set_header(segment, fresh ? mapped : segment->size, offset);
  /* Huge pages for the block's whole ones only: its last, partly used one
   * would hold up to 2 MiB resident that the program never asked for (14 of
   * largemix's 97 MiB peak), and faults in small pages instead. The header
   * is written first, so that the advice's two kernel mappings become one
   * again when a resize asks for the rest (huge_resize_mapping). A cached
   * block that calloc takes is cleared below, all of it written. A cached
   * block asked already (madvise was one system call per huge malloc of
   * largemix's) is not asked again. */
  size_t advise = huge_pages_covered(segment, offset + size);
  if ((!zero || !fresh) && option(SHOAL_OPTION_HUGE_PAGES) && segment->huge_advised < advise) {
    os_advise_huge_pages(segment, advise, true);
    segment->huge_advised = advise;
  }
  atomic_fetch_add_explicit(&stat_huge_blocks, 1, memory_order_relaxed);
  uint8_t *block = segment->pages[0].start;
  ((shoal_block_t *)block)->key = 0; /* a cached block still holds the free key */
  segment->pages[0].is_zero = fresh;
  if (zero && !fresh) memset(block, 0, size);
  return block;
}

/* The cache keeps freed blocks while all shoal holds stays under the most
 * it held outside the cache lately (cache.footprint_peak, seen at each huge free,
 * lowered when a cached block ages out), and an eighth more
 * (HUGE_CACHE_SLACK): the cache reuses what the program had in use at its
 * peak. Threads replacing big buffers at random vary the number they hold,
 * and a cache of a fixed 64 MiB mapped and zeroed afresh one block in 27
 * (largemix t=8: 8 threads with 3 blocks of 4-5 MiB each; 0.85 s against
 * 0.50 s). Held to the peak exactly, the cache let go of a block whenever
 * the sizes live summed a little over it, and the next one was mapped and
 * faulted in again; footprint counts whole mappings, of which a block
 * touches only its own size, so the eighth more committed raised no peak
 * resident (largemix quick t=1 / t=2 and full t=1 / t=8: -13 to -20 %
 * time, peak RSS level or lower). No block beyond SHOAL_HUGE_CACHE is kept:
 * one big buffer freed is not kept on the chance of another. */
#define HUGE_CACHE_SLACK 8 /* the cache may go over the peak by 1/this of it */

void huge_free(shoal_segment_t *segment) {
  atomic_fetch_sub_explicit(&stat_huge_blocks, 1, memory_order_relaxed);
  if (segment->pages[0].has_aligned || segment->size > (size_t)option(SHOAL_OPTION_HUGE_CACHE) ||
      segment->size / os_page_size() > SLOT_SIZE_MASK) {
    huge_unmap(segment);
    return;
  }
  size_t footprint = huge_footprint(); /* this block still counted in it */
  size_t peak = atomic_load_explicit(&cache.footprint_peak, memory_order_relaxed);
  while (footprint > peak &&
         !atomic_compare_exchange_weak_explicit(&cache.footprint_peak, &peak, footprint,
                                                memory_order_relaxed, memory_order_relaxed)) {
  }
  if (footprint > peak) peak = footprint;
  size_t limit = peak + peak / HUGE_CACHE_SLACK - footprint + segment->size; /* >= its size */
  segment->cached_ms = os_now_ms();
  atomic_fetch_add_explicit(&cache.bytes, segment->size, memory_order_relaxed);
  uint64_t word = slot_word(segment);
  size_t at =
      atomic_fetch_add_explicit(&cache.next_slot, 1, memory_order_relaxed) % HUGE_CACHE_SLOTS;
  size_t k = 0;
  for (uint64_t empty = 0; k < HUGE_CACHE_SLOTS; k++, empty = 0)
    if (atomic_compare_exchange_strong_explicit(&cache.slots[(at + k) % HUGE_CACHE_SLOTS], &empty,
                                                word, memory_order_release, memory_order_relaxed))
      break;
  if (k == HUGE_CACHE_SLOTS) { /* all full: the block in the ring's next slot goes */
    uint64_t evicted = atomic_exchange_explicit(&cache.slots[at], word, memory_order_acq_rel);
    if (evicted != 0) {
      atomic_fetch_sub_explicit(&cache.bytes, slot_size(evicted), memory_order_relaxed);
      huge_unmap(slot_segment(evicted));
    }
    k = 0;
  }
  at = (at + k) % HUGE_CACHE_SLOTS;
  /* Over the limit: the oldest blocks go, those after ours round the ring. */
  for (size_t step = 1;
       step < HUGE_CACHE_SLOTS && atomic_load_explicit(&cache.bytes, memory_order_relaxed) > limit;
       step++) {
    size_t i = (at + step) % HUGE_CACHE_SLOTS;
    uint64_t older = atomic_load_explicit(&cache.slots[i], memory_order_relaxed);
    if (older != 0 && slot_take(i, older)) huge_unmap(slot_segment(older));
  }
}

/* Unmap cached blocks older than the purge delay (all of them with force). */
void huge_cache_trim(bool force) {
  if (atomic_load_explicit(&cache.bytes, memory_order_relaxed) == 0) return;
  int64_t now = os_now_ms();
  long delay = option(SHOAL_OPTION_PURGE_DELAY);
  int64_t max_age = delay > HUGE_CACHE_MIN_AGE_MS ? delay : HUGE_CACHE_MIN_AGE_MS;
  bool expired = false;
  for (size_t i = 0; i < HUGE_CACHE_SLOTS; i++) {
    uint64_t word = atomic_load_explicit(&cache.slots[i], memory_order_relaxed);
    if (word == 0 || !slot_take(i, word)) continue;
    shoal_segment_t *segment = slot_segment(word);
    if (force || now - segment->cached_ms >= max_age) {
      huge_unmap(segment);
      expired = true;
      continue;
    }
    /* Young: back into its slot, unless a free filled it meanwhile. */
    atomic_fetch_add_explicit(&cache.bytes, segment->size, memory_order_relaxed);
    uint64_t empty = 0;
    if (!atomic_compare_exchange_strong_explicit(&cache.slots[i], &empty, word,
                                                 memory_order_release, memory_order_relaxed)) {
      atomic_fetch_sub_explicit(&cache.bytes, segment->size, memory_order_relaxed);
      huge_unmap(segment);
    }
  }
  if (expired) /* the program has needed less for a while: so may the cache */
    atomic_store_explicit(&cache.footprint_peak, huge_footprint(), memory_order_relaxed);
}

/* Resize in place or move the mapping; NULL (old block intact) on failure. */
void *huge_realloc(shoal_segment_t *segment, size_t new_size) {
  size_t offset = (size_t)(segment->pages[0].start - (uint8_t *)segment);
  if (new_size > PTRDIFF_MAX - offset - SEGMENT_SIZE) return NULL;
  size_t old_mapped = segment->size, mapped = round_to_os_page(offset + new_size);
  /* A block shrunk to half its mapping or more keeps the mapping: what a
   * cut gave back faulted in again when the block grew (largeblk: blocks
   * halved one time in eight, grown one in two; 9 % less time, peak RSS
   * level). What it holds beyond its new size goes when it is freed. */
  if (mapped == old_mapped || (mapped < old_mapped && mapped >= old_mapped / 2))
    return segment->pages[0].start;
  /* A buffer that grows a little at a time (a string or an array appended
   * to) would take a remap and an advice per OS page: it grows by a quarter
   * at least, which costs address space only until written (strappend:
   * 21,500 remaps and as many advices, glibc's one remap a page 19,500). */
  if (mapped > old_mapped && mapped < old_mapped + old_mapped / HUGE_GROWTH_DIVISOR)
    mapped = round_to_os_page(old_mapped + old_mapped / HUGE_GROWTH_DIVISOR);
  /* Past its mapping, into a cached block that holds the new size already,
   * by a copy: a remap keeps the block's pages but faults in its new tail,
   * one by one where huge pages are short, at some 6 us a fault on a
   * virtual machine, while the cache's blocks are resident (largeblk full:
   * 13-15 % less time, peak RSS 279 -> 235 MB; quick: 9 % less time, peak
   * RSS +4 %, the copy reading what the old block never had written). */
  if (mapped > old_mapped) {
    shoal_segment_t *cached = huge_cache_take(mapped, false);
    if (cached != NULL) {
      huge_set_header(cached, cached->size, offset);
      memcpy(cached->pages[0].start, segment->pages[0].start, old_mapped - offset);
      atomic_fetch_add_explicit(&stat_huge_blocks, 1, memory_order_relaxed);
      huge_free(segment);
      return cached->pages[0].start;
    }
  }
  shoal_segment_t *moved = segment;
  if (!huge_resize_mapping(&moved, mapped)) return NULL;
  /* A block's grown tail gets small pages: the kernel takes fresh memory
   * for it, and a huge page of fresh memory stalls its fault where 2 MiB
   * must be found and cleared at once, as on a virtual machine whose host
   * took back the guest's free memory (strappend full: 0.30-0.87 s with
   * huge pages, by how long the machine had been idle; 0.37 s every run
   * without; largeblk +7 %; the forty-sixth session). The advice goes for
   * the whole mapping, which so stays one (huge_resize_mapping); the huge
   * pages already faulted in stay. */
  if (mapped > old_mapped && moved->huge_advised != 0) {
    os_advise_huge_pages(moved, mapped, false);
    moved->huge_advised = 0;
  }
  moved->pages[0].start = (uint8_t *)moved + offset;
  page_publish_shape(&moved->pages[0]);
  return moved->pages[0].start;
}

size_t huge_usable_size(const shoal_segment_t *segment, const void *p) {
  return (size_t)((const uint8_t *)segment + segment->size - (const uint8_t *)p);
}
