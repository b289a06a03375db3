/* pool.c — a heap's medium blocks (the plain requests SHOAL_MEDIUM_POOL
 * gives it: by default those above POOL_UPPER_MIN up to POOL_MAX of a
 * thread whose pool blocks no other thread frees, internal.h says why),
 * cut to size out of pool pages and joined with their free neighbours when
 * freed. Over every medium size it costs time where it saves memory, and
 * loses both where threads free each other's medium blocks
 * (bench/README.md has the figures).
 *
 * Why not a page per size class, as below DIRECT_MAX: some 40 classes lie
 * in that range, and each class page stays resident to the most blocks its
 * class ever held at once. A thread that keeps a few blocks of each held
 * several times its live bytes (mtalloc 1.7x, rptest 1.5x glibc's peak),
 * the free blocks of one class useless to the next. One pool for every
 * medium size holds what the live blocks need and the holes between them,
 * and a hole serves any size that fits: FastMM's medium blocks (seed 003),
 * one pool per thread as ScaleMM keeps them.
 *
 * A pool page (POOL_SLICES slices, class CLASS_POOL) holds, in order:
 *   control   the free lists (pool_control_t)
 *   blocks    each a 16-byte header, then the program's bytes
 *   end mark  a header of size 0 that reads as live: no block joins past it
 * A header holds the block's size (header included, a multiple of 16), its
 * state bits and the size class of the request (for the statistics), and a
 * check word: a hash of its address and size with the process key. A
 * pointer whose header does not check is no block start: foreign, or
 * inside a block. A free block keeps its list links after its header and
 * its size in its last word (the footer), so that the block after it,
 * marked PREV_FREE, finds where it starts; two free blocks are never
 * neighbours. A live block freed by another thread and not yet home has the
 * free key in its second word, as a class block has (the double-free test).
 *
 * Free lists: two-level segregated fit (Masmano, Ripoll, Crespo, Real:
 * "TLSF: a new dynamic memory allocator for real-time systems", 2004): a
 * bit per power of two, eight lists in each, and a bit per list. A malloc
 * takes the first block of the first non-empty list all of whose blocks
 * fit, found with two bit scans, and splits off what it does not need.
 *
 * Threads: a pool page changes only in its heap's owner, without a lock (a
 * thread that serves an idle owner's heap leaves its pool pages to the
 * owner, heap.c's heap_drain; a dead thread's heap is its servicer's or
 * adopter's alone). Other threads read headers: the check of a remote
 * free, and block_containing for checked mode. So the header words are
 * atomics (plain moves on x86-64); a header's check is written before its
 * size, which publishes both (release). heap.c keeps the pages, their remote
 * frees and their purge; this file is one page's blocks. */
#include <string.h>

#include "core/internal.h"

#define POOL_FREE        ((uint64_t)1)
#define POOL_PREV_FREE   ((uint64_t)2) /* the block before is free: its footer says where */
#define POOL_AGED        ((uint64_t)4) /* free through a due purge already */
#define POOL_PURGED      ((uint64_t)8) /* free, its inner OS pages given back */
#define POOL_KEPT_BITS   (POOL_AGED | POOL_PURGED) /* what a split's remainder inherits */
#define POOL_CLASS_SHIFT 56
#define POOL_SIZE_MASK   ((((uint64_t)1 << POOL_CLASS_SHIFT) - 1) & ~(uint64_t)15)

#define POOL_HEADER    16
#define POOL_MIN_BLOCK 64 /* header, links, footer: a smaller remainder stays with its block */
#define POOL_STEP_BITS 3
#define POOL_STEPS     (1u << POOL_STEP_BITS)
#define POOL_FIRST_BIT 6                                /* 64 bytes: the first list */
#define POOL_LEVELS    (SEGMENT_SHIFT - POOL_FIRST_BIT) /* blocks below 1 MiB */
/* When no list all of whose blocks fit has one, the request's own list is
 * searched first-fit, up to this many blocks. */
#define POOL_OWN_LIST_TRIES 8

typedef struct pool_header_s {
  _Atomic(uint64_t) word; /* size | state | class << POOL_CLASS_SHIFT */
  _Atomic(uint64_t) check;
} pool_header_t;

typedef struct pool_free_s {
  pool_header_t header;
  struct pool_free_s *next, *prev; /* its list */
} pool_free_t;

typedef struct pool_control_s {
  uint32_t level_map;            /* a bit per level with a non-empty list */
  uint8_t step_map[POOL_LEVELS]; /* a bit per non-empty list of the level */
  pool_free_t *lists[POOL_LEVELS][POOL_STEPS];
  size_t free_bytes; /* in free blocks */
} pool_control_t;

#define POOL_CONTROL_BYTES ((sizeof(pool_control_t) + 63) & ~(size_t)63)
#define POOL_PAGE_BYTES    ((size_t)POOL_SLICES << SLICE_SHIFT)
_Static_assert(POOL_PAGE_BYTES < SEGMENT_SIZE, "a pool block's size has a list");
_Static_assert(MEDIUM_MAX + POOL_HEADER + POOL_CONTROL_BYTES + POOL_HEADER <= POOL_PAGE_BYTES,
               "the largest medium block fits an empty pool page");

/* ---- headers ---- */

static inline uint64_t pool_check_of(const pool_header_t *header, uint64_t size) {
  return (((uint64_t)(uintptr_t)header ^ (size << 24)) * 0x9E3779B97F4A7C15ull) ^ free_key;
}

static inline void header_set(pool_header_t *header, uint64_t size, uint64_t state,
                              uint8_t size_class) {
  atomic_store_explicit(&header->check, pool_check_of(header, size), memory_order_relaxed);
  atomic_store_explicit(&header->word, size | state | ((uint64_t)size_class << POOL_CLASS_SHIFT),
                        memory_order_release);
}

static inline uint64_t header_word(const pool_header_t *header) {
  return atomic_load_explicit(&header->word, memory_order_acquire);
}

static inline void header_or(pool_header_t *header, uint64_t bits) {
  atomic_store_explicit(&header->word, header_word(header) | bits, memory_order_relaxed);
}

static inline void header_clear(pool_header_t *header, uint64_t bits) {
  atomic_store_explicit(&header->word, header_word(header) & ~bits, memory_order_relaxed);
}

static inline pool_header_t *header_at(void *at) {
  return (pool_header_t *)at;
}

static inline void footer_set(pool_free_t *block, uint64_t size) {
  ((uint64_t *)((uint8_t *)block + size))[-1] = size;
}

static inline pool_control_t *control_of(const shoal_page_t *page) {
  return (pool_control_t *)page->start;
}

static inline uint8_t *pool_first(const uint8_t *start) {
  return (uint8_t *)start + POOL_CONTROL_BYTES;
}

static inline uint8_t *pool_end_mark(const uint8_t *start, size_t slice_count) {
  return (uint8_t *)start + slice_count * SLICE_SIZE - POOL_HEADER;
}

/* ---- free lists ---- */

static inline void pool_index(uint64_t size, unsigned *level, unsigned *step) {
  unsigned bit = 63u - (unsigned)__builtin_clzll(size);
  *step = (unsigned)(size >> (bit - POOL_STEP_BITS)) & (POOL_STEPS - 1);
  *level = bit - POOL_FIRST_BIT;
}

static void pool_link(pool_control_t *control, pool_free_t *block, uint64_t size) {
  unsigned level, step;
  pool_index(size, &level, &step);
  pool_free_t **list = &control->lists[level][step];
  block->prev = NULL;
  block->next = *list;
  if (*list != NULL) (*list)->prev = block;
  *list = block;
  control->step_map[level] |= (uint8_t)(1u << step);
  control->level_map |= 1u << level;
}

static void pool_unlink(pool_control_t *control, pool_free_t *block, uint64_t size) {
  if (block->next != NULL) block->next->prev = block->prev;
  if (block->prev != NULL) {
    block->prev->next = block->next;
    return;
  }
  unsigned level, step;
  pool_index(size, &level, &step);
  control->lists[level][step] = block->next;
  if (block->next != NULL) return;
  control->step_map[level] &= (uint8_t) ~(1u << step);
  if (control->step_map[level] == 0) control->level_map &= ~(1u << level);
}

/* A free block of at least `need` bytes, or NULL. */
static pool_free_t *pool_find(pool_control_t *control, uint64_t need) {
  unsigned level, step;
  pool_index(need, &level, &step);
  /* The next list up holds only blocks that fit; `need`'s own list may
   * hold some that do not. */
  uint64_t fitting = need + ((uint64_t)1 << (level + POOL_FIRST_BIT - POOL_STEP_BITS)) - 1;
  unsigned fit_level, fit_step;
  pool_index(fitting, &fit_level, &fit_step);
  if (fit_level < POOL_LEVELS) {
    unsigned steps = control->step_map[fit_level] & (0xffu << fit_step) & 0xffu;
    if (steps == 0) {
      uint32_t levels =
          fit_level + 1 < POOL_LEVELS ? control->level_map & (~0u << (fit_level + 1)) : 0;
      if (levels != 0) {
        fit_level = (unsigned)__builtin_ctz(levels);
        steps = control->step_map[fit_level];
      }
    }
    if (steps != 0) return control->lists[fit_level][__builtin_ctz(steps)];
  }
  pool_free_t *block = control->lists[level][step];
  for (unsigned tries = 0; block != NULL && tries < POOL_OWN_LIST_TRIES; tries++) {
    if ((header_word(&block->header) & POOL_SIZE_MASK) >= need) return block;
    block = block->next;
  }
  return NULL;
}

/* ---- one page's blocks (the caller holds the heap) ---- */

size_t pool_block_bytes(size_t size) {
  size_t bytes = ((size + 15) & ~(size_t)15) + POOL_HEADER;
  return bytes < POOL_MIN_BLOCK ? POOL_MIN_BLOCK : bytes;
}

void pool_page_init(shoal_page_t *page) {
  pool_control_t *control = control_of(page);
  memset(control, 0, sizeof *control);
  uint8_t *first = pool_first(page->start);
  uint8_t *end = pool_end_mark(page->start, page->slice_count);
  uint64_t size = (uint64_t)(end - first);
  header_set(header_at(end), 0, POOL_PREV_FREE, 0);
  header_set(header_at(first), size, POOL_FREE, 0);
  footer_set((pool_free_t *)first, size);
  pool_link(control, (pool_free_t *)first, size);
  control->free_bytes = size;
}

void *pool_take(shoal_page_t *page, size_t need, uint8_t size_class) {
  pool_control_t *control = control_of(page);
  pool_free_t *block = pool_find(control, need);
  if (block == NULL) return NULL;
  uint64_t word = header_word(&block->header);
  uint64_t size = word & POOL_SIZE_MASK;
  pool_unlink(control, block, size);
  uint64_t rest = size - need;
  if (rest >= POOL_MIN_BLOCK) {
    pool_free_t *remainder = (pool_free_t *)((uint8_t *)block + need);
    header_set(&remainder->header, rest, POOL_FREE | (word & POOL_KEPT_BITS), 0);
    footer_set(remainder, rest);
    pool_link(control, remainder, rest);
  } else {
    need = size;
    header_clear(header_at((uint8_t *)block + size), POOL_PREV_FREE);
  }
  /* Written after the remainder's: a walk that reads the new size finds it. */
  header_set(&block->header, need, 0, size_class);
  control->free_bytes -= need;
  /* The callers count pool blocks in their classes: used_at_fold follows
   * used, so that page_fold_counters finds nothing to count. */
  page->used++;
  page->used_at_fold++;
  shoal_block_t *user = (shoal_block_t *)((uint8_t *)block + POOL_HEADER);
  user->key = 0;
  return user;
}

/* The header of the block that starts at p, or NULL: p is no block start
 * of this page (any thread; a free block's header checks too). */
static pool_header_t *pool_header_checked(const uint8_t *start, size_t slice_count, const void *p) {
  const uint8_t *at = p;
  uint8_t *end = pool_end_mark(start, slice_count);
  if (((uintptr_t)at & 15) != 0 || at < pool_first(start) + POOL_HEADER || at > end) return NULL;
  pool_header_t *header = header_at((uint8_t *)at - POOL_HEADER);
  uint64_t size = header_word(header) & POOL_SIZE_MASK;
  if (size < POOL_MIN_BLOCK || size > (uint64_t)(end - (uint8_t *)header) ||
      atomic_load_explicit(&header->check, memory_order_relaxed) != pool_check_of(header, size))
    return NULL;
  return header;
}

pool_block_t pool_block_of(const shoal_page_t *page, const void *p) {
  pool_header_t *header = pool_header_checked(page->shared_start, page->slice_count, p);
  if (header == NULL) return (pool_block_t){0};
  uint64_t word = header_word(header);
  return (pool_block_t){.usable = (word & POOL_SIZE_MASK) - POOL_HEADER,
                        .size_class = (uint8_t)(word >> POOL_CLASS_SHIFT),
                        .is_free = (word & POOL_FREE) != 0};
}

void pool_give(shoal_page_t *page, void *p) {
  pool_control_t *control = control_of(page);
  pool_free_t *block = (pool_free_t *)((uint8_t *)p - POOL_HEADER);
  uint64_t word = header_word(&block->header);
  uint64_t size = word & POOL_SIZE_MASK;
  control->free_bytes += size;
  page->used--;
  page->used_at_fold--;
  pool_free_t *next = (pool_free_t *)((uint8_t *)block + size);
  uint64_t next_word = header_word(&next->header);
  if (next_word & POOL_FREE) {
    pool_unlink(control, next, next_word & POOL_SIZE_MASK);
    size += next_word & POOL_SIZE_MASK;
  }
  if (word & POOL_PREV_FREE) {
    uint64_t prev_size = ((const uint64_t *)block)[-1];
    block = (pool_free_t *)((uint8_t *)block - prev_size);
    pool_unlink(control, block, prev_size);
    size += prev_size;
  }
  header_set(&block->header, size, POOL_FREE, 0);
  footer_set(block, size);
  header_or(header_at((uint8_t *)block + size), POOL_PREV_FREE);
  pool_link(control, block, size);
}

bool pool_grow(shoal_page_t *page, void *p, size_t need, uint8_t size_class) {
  pool_control_t *control = control_of(page);
  pool_header_t *header = header_at((uint8_t *)p - POOL_HEADER);
  uint64_t word = header_word(header);
  uint64_t size = word & POOL_SIZE_MASK;
  if (need <= size) return true;
  pool_free_t *next = (pool_free_t *)((uint8_t *)header + size);
  uint64_t next_word = header_word(&next->header);
  uint64_t next_size = next_word & POOL_SIZE_MASK;
  if (!(next_word & POOL_FREE) || size + next_size < need) return false;
  pool_unlink(control, next, next_size);
  uint64_t total = size + next_size, rest = total - need;
  if (rest >= POOL_MIN_BLOCK) {
    pool_free_t *remainder = (pool_free_t *)((uint8_t *)header + need);
    header_set(&remainder->header, rest, POOL_FREE | (next_word & POOL_KEPT_BITS), 0);
    footer_set(remainder, rest);
    pool_link(control, remainder, rest);
    total = need;
  } else {
    header_clear(header_at((uint8_t *)header + total), POOL_PREV_FREE);
  }
  header_set(header, total, word & POOL_PREV_FREE, size_class);
  control->free_bytes -= total - size;
  return true;
}

size_t pool_free_bytes(const shoal_page_t *page) {
  return control_of(page)->free_bytes;
}

/* Each free block that was free at the last call too gives back the OS
 * pages inside it (all, with `all`), but for those of its header, links
 * and footer. Returns the bytes purged. */
size_t pool_purge(shoal_page_t *page, bool all) {
  pool_control_t *control = control_of(page);
  uintptr_t os_page = os_page_size();
  size_t purged = 0;
  for (unsigned level = 0; level < POOL_LEVELS; level++) {
    if (!(control->level_map & (1u << level))) continue;
    for (unsigned step = 0; step < POOL_STEPS; step++) {
      for (pool_free_t *block = control->lists[level][step]; block != NULL; block = block->next) {
        uint64_t word = header_word(&block->header);
        if (word & POOL_PURGED) continue;
        if (!all && !(word & POOL_AGED)) {
          header_or(&block->header, POOL_AGED);
          continue;
        }
        uintptr_t from = ((uintptr_t)(block + 1) + os_page - 1) & ~(os_page - 1);
        uintptr_t to = ((uintptr_t)block + (word & POOL_SIZE_MASK) - 8) & ~(os_page - 1);
        if (from < to) {
          os_purge((void *)from, to - from);
          purged += to - from;
        }
        header_or(&block->header, POOL_AGED | POOL_PURGED);
      }
    }
  }
  return purged;
}

/* The live block that holds p and its usable size, or NULL, for checked
 * mode (any thread). A block starts a few words before the pointers it is
 * asked about: a look back finds it; else a walk of the page's headers.
 * The owner may be splitting or joining free blocks meanwhile: a header
 * that does not check ends the walk, which starts again. */
void *pool_block_containing(const shoal_page_t *page, const void *p, size_t *usable) {
  const uint8_t *start = page->shared_start, *at = p;
  size_t slice_count = page->slice_count;
  const uint8_t *aligned = (const uint8_t *)((uintptr_t)at & ~(uintptr_t)15);
  for (unsigned back = 0; back < 8; back++) {
    const uint8_t *candidate = aligned - back * 16;
    pool_header_t *header = pool_header_checked(start, slice_count, candidate);
    if (header == NULL) continue;
    uint64_t word = header_word(header);
    if (word & POOL_FREE) continue; /* a joined block's old header, or a free block's */
    if (at < candidate + (word & POOL_SIZE_MASK) - POOL_HEADER) {
      *usable = (word & POOL_SIZE_MASK) - POOL_HEADER;
      return (void *)candidate;
    }
    break;
  }
  uint8_t *end = pool_end_mark(start, slice_count);
  for (unsigned attempt = 0; attempt < 4; attempt++) {
    uint8_t *block = pool_first(start);
    while (block < end) {
      pool_header_t *header = header_at(block);
      uint64_t word = header_word(header);
      uint64_t size = word & POOL_SIZE_MASK;
      if (size < POOL_MIN_BLOCK || size > (uint64_t)(end - block) ||
          atomic_load_explicit(&header->check, memory_order_relaxed) != pool_check_of(header, size))
        break;
      if (at < block + size) {
        if ((word & POOL_FREE) || at < block + POOL_HEADER) return NULL;
        *usable = size - POOL_HEADER;
        return block + POOL_HEADER;
      }
      block += size;
    }
    if (block >= end) return NULL;
  }
  return NULL;
}
