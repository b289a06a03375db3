/* internal.h — what every layer of shoal shares: attributes, geometry,
 * the core types, and each layer's entry points.
 *
 * Glossary (bottom up):
 *   segment  1 MiB of address space aligned to 1 MiB, owned by one heap.
 *            Slice 0 holds the header (page descriptors); slices 1..15 hold
 *            pages. A pointer finds its segment by masking the low 20 bits.
 *   slice    64 KiB, the unit a segment hands out to pages.
 *   page     a run of slices holding blocks of one size class (or a single
 *            large block). Its descriptor sits in the segment header.
 *   block    what malloc returns. Small blocks carry no header; a free block
 *            stores the free-list link in word 0 and the double-free key in
 *            word 1.
 *   heap     one per thread: per class a queue of pages with free blocks.
 *            Heaps are never unmapped; a dead thread's heap is adopted whole
 *            by a new thread, or serviced by whoever frees into it.
 *   huge     a block beyond LARGE_MAX: a segment of its own, sized to fit,
 *            cached for a while after free against mmap churn.
 *   arena    the shared part: segment cache, heap registry, under a lock
 *            (the huge-block cache in large.c has the only other one).
 *
 * Who writes what is said beside each field: (owner) the heap's thread only,
 * (atomic) any thread with atomics, (arena) under the arena lock. */
#ifndef SHOAL_INTERNAL_H
#define SHOAL_INTERNAL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "os/os.h"
#include "shoal.h"

/* ---- attributes: grep for `slow_path` to find every rare path ---- */
#define likely(x)       __builtin_expect(!!(x), 1)
#define unlikely(x)     __builtin_expect(!!(x), 0)
#define out_of_line     __attribute__((__noinline__))
#define slow_path       __attribute__((__noinline__, __cold__))
#define fast_path       static inline __attribute__((__always_inline__))
#define exported        __attribute__((visibility("default")))
#define CACHE_LINE_SIZE 64
#define cache_aligned   __attribute__((aligned(CACHE_LINE_SIZE)))

/* ---- audits ----
 * A build with SHOAL_AUDIT (CMake option; the sanitizer suites of make test
 * use it) checks every free list where it changes hands: a block handed out
 * must be free (its key set), a chain pushed or taken must hold the blocks
 * it counts, a page given back must have every block it carved free. A
 * block on two lists, or freed while live, is then caught where it
 * happens, not where the program next reads it. Release builds compile the
 * checks away. page.c reports. */
#ifndef SHOAL_AUDIT
#define SHOAL_AUDIT 0
#endif
void audit_failed(const char *what, const void *block, long first, long second)
    __attribute__((__noreturn__, __cold__));
#define AUDIT(condition, what, block, first, second)                                               \
  do {                                                                                             \
    if (SHOAL_AUDIT && unlikely(!(condition)))                                                     \
      audit_failed(what, block, (long)(first), (long)(second));                                    \
  } while (0)

/* Addresses in messages: "0x" and hex on every platform (%p prints no 0x
 * with some C runtimes, Windows' among them). */
#define ADDRESS_FORMAT "0x%" PRIxPTR
#define ADDRESS_ARG(p) ((uintptr_t)(const void *)(p))

/* The call site of an exported function: its return address. Inlined fast
 * paths take it as an argument (caller_t) so that it names the program's
 * code, never shoal's. */
typedef const void *caller_t;
#define CALLER()   ((caller_t)__builtin_return_address(0))
#define OWN_CALLER ((caller_t)0) /* the slow exit reads its own (alloc.h) */

/* ---- geometry ---- */
#define SEGMENT_SHIFT      20
#define SEGMENT_SIZE       ((size_t)1 << SEGMENT_SHIFT)
#define SEGMENT_MASK       (SEGMENT_SIZE - 1)
#define SLICE_SHIFT        16
#define SLICE_SIZE         ((size_t)1 << SLICE_SHIFT)
#define SLICES_PER_SEGMENT (SEGMENT_SIZE / SLICE_SIZE) /* 16: the low bits of a bitmap word */
#define SLICES_ALL         ((uint64_t)-1 >> (64 - SLICES_PER_SEGMENT))
#define SLICE_HEADER_BITS  ((uint64_t)1) /* slice 0: the segment header */

#define WORD_SIZE              8
#define MIN_BLOCK_SIZE         16   /* room for the link and the key */
#define BLOCK_ALIGNMENT        16   /* of every block (size_class.c) */
#define DIRECT_MAX             1024 /* sizes served by heap->direct_page */
#define DIRECT_SLOTS           (DIRECT_MAX / WORD_SIZE + 1)
#define MEDIUM_MAX             (32 * 1024)                 /* largest size class */
#define LARGE_MAX              (SEGMENT_SIZE - SLICE_SIZE) /* 15 slices; larger: a huge segment */
#define PAGE_TARGET_BLOCKS     8          /* a page of blocks up to 8 KiB holds >= this many */
#define BIG_PAGE_TARGET_BLOCKS 4          /* and of blocks above 8 KiB */
#define EXTEND_BYTES           4096       /* carve fresh blocks an OS page at a time */
#define POPULATE_FROM          (8 * 1024) /* a filling page faults in ahead from here (page.c) */
#define POPULATE_MIN_COMMITTED ((size_t)32 << 20) /* in a process that holds this much */
#define POPULATE_MIN_PAGES     32         /* and in a heap that holds this many pages (page.c) */
#define HUGE_BLOCK_OFFSET      SLICE_SIZE /* block of a huge segment starts here */
#define DIRECT_CLASSES         32         /* the classes up to DIRECT_MAX */
#define OUTBOX_SLOT_BITS       6          /* 64 slots: outbox_occupied has a bit per slot */
#define OUTBOX_SLOTS           (1u << OUTBOX_SLOT_BITS) /* pages other threads own, gathered at once */
#define OUTBOX_BYTES           (4 * 1024)  /* a page's gathered blocks go home at this */
#define OUTBOX_OWNER_BYTES     (64 * 1024) /* an owner's gathered medium blocks go at this */
#define MAILBOX_DELIVER_BYTES  ((size_t)256 << 10) /* past this, a sender delivers them itself */
#define MAILBOX_MANY_SENDERS   16 /* sender changes that make those blocks freed all over */
#define PURGE_BURST_DELAYS     10 /* a burst of frees defers a purge this many delays at most */
#define PURGE_DEAD_DELAYS      10 /* a dead thread's heap stays warm this long for an adopter */
#define ARENA_TRIM_DELAYS      10 /* empty segments wait this long for any thread to take them */
#define ARENA_TRIMS_PUT_OFF    10 /* while threads take them back, a trim waits a delay more */
/* The pages' chains of every thread's outbox together, about: each thread
 * holds at most its share, this over the live heaps (heap.c, outbox_sweep).
 * A thread that frees a few blocks of many pages holds a chain for each,
 * up to 64 of them, and with many such threads (prodcons, one producer
 * and 64 consumers) those chains were a third of the peak (12 MB against 8
 * with this bound). Two threads or eight keep whole chains. */
#define OUTBOX_BUDGET_BYTES (1024 * 1024)
/* Empty segments kept for the purge delay (256 MiB), and kept mapped,
 * purged, after it (16 MiB); beyond these, up to 4 GiB of address space
 * retained, purged (arena.c's segment_retire). */
#define ARENA_CACHED_SEGMENTS   (((size_t)256 << 20) / SEGMENT_SIZE)
#define ARENA_CACHED_CLEAN      (((size_t)16 << 20) / SEGMENT_SIZE)
#define ARENA_RETAINED_SEGMENTS (((size_t)4 << 30) / SEGMENT_SIZE)
#define ADDRESS_BITS            47
#define SEGMENT_MAP_ENTRIES     ((size_t)1 << (ADDRESS_BITS - SEGMENT_SHIFT))

/* A class above 128 bytes that has no free block of its own (one page of
 * it, carved to the end or with never-used blocks left, no remote frees on
 * their way) takes one from the next BORROW_CLASSES classes before it
 * carves or opens a page: a block up to four classes larger wastes at most
 * 38.5 % of itself while it lives (a request one byte over the class below).
 * A thread's classes each hold a few blocks whose counts wander on their
 * own; each carved to its own high-water mark, mtalloc's medium pages were
 * carved to 4.6 times their live bytes while the neighbours' free blocks
 * sat resident. Four classes rather than two (quick sizes, medians of 5,
 * times level): peak RSS mtalloc t=2 / t=8 -5 / -5 %, rptest t=2 -2 %,
 * scaling t=2 -2 %, the gcc replay +3 %; six: that replay +13 %. Never for
 * an aligned request: a larger class is not a multiple of every alignment
 * the class is (size_class.c). alloc.h (medium_borrow) and heap.c
 * (heap_lender_page). */
#define BORROW_CLASSES    4u
#define BORROW_FROM_CLASS 8 /* the first class above 128 bytes */
/* From 2304 bytes (class 40) up, the next eight classes, one doubling: a
 * borrowed block wastes at most 55.5 % of itself while it lives. There a
 * thread's classes hold the fewest blocks each, so the sum of their
 * high-water marks is furthest above the most the thread held at once
 * (mtalloc's quick run, a thread's blocks simulated: the per-class maxima
 * add up to 3.2 MB, the most live at once 1.1 MB). Quick sizes, medians of
 * 3-5, two batches: peak RSS mtalloc t=2 -4.6 and -3.6 %, t=8 -6.4 and
 * -2.3 %, rptest t=2 -3.1 and -3.8 %; larson, mstress, mtrealloc, prodcons
 * and the replays level; times level, the gcc replay's +3 % in some batches
 * (bench/README.md). From 4608 bytes up instead, the gcc replay +3 %
 * memory; the whole range above for classes from 2304 bytes, mtalloc t=8 no
 * better.
 * Past DIRECT_MAX only: the direct slots that queue_remove keeps are lent
 * within BORROW_CLASSES. */
#define BORROW_WIDE_FROM_CLASS 40
#define BORROW_WIDE_CLASSES    8u
_Static_assert(BORROW_WIDE_FROM_CLASS >= DIRECT_CLASSES, "no direct slot is lent wide");
static inline unsigned borrow_reach(unsigned size_class) {
  return size_class >= BORROW_WIDE_FROM_CLASS ? BORROW_WIDE_CLASSES : BORROW_CLASSES;
}

/* Pages after a class's spent first page that its malloc looks at without
 * the slow lock (heap.c, heap_queue_rotate): the locked walks of rptest and
 * mstress found their medium page second or third 92 % and 66 % of the
 * time, fourth or later almost never. */
#define QUEUE_ROTATE_TRIES 2

/* Bytes per class of other threads' blocks a thread's remote cache keeps
 * (alloc.h, remote_cache_push). Kept at all, a block freed for an owner
 * that does not run (more threads than cores) serves the freeing thread
 * instead of waiting for its owner (larson, 16 to 64 threads on 2 cores:
 * peak RSS -15 % to -30 %). Kept in plenty, they cost twice: blocks handed
 * along a ring of threads never go home, and every owner carves anew
 * (rptest, 8 threads: +35 % at 32 KiB a medium class, +13 % at this); and
 * a thread that frees as often as it allocates, of random classes, holds
 * each cache half full on average, so a thread holds about half this for
 * every class it uses (larson, 8 / 16 / 64 threads, small classes at 32
 * KiB: peak RSS +10 / +10 / +8 %, times level). */
#define REMOTE_CACHE_BYTES (8 * 1024)
/* Bytes per medium class of the thread's own freed blocks its class cache
 * keeps (alloc.h, free_own_larger). rptest, 2 threads: 16 / 32 / 64 KiB
 * -5 / -7 / -13 % time; but mtalloc's peak RSS level / level / +4-7 %
 * (its classes hold a few blocks each: a cache of many keeps its pages
 * from emptying), and the gcc replay's -6 / -16 / -16 %. */
#define OWN_CACHE_MEDIUM (32 * 1024)

/* The depot (depot.c): the outbox's chains (OUTBOX_BYTES of one page's
 * blocks) of a thread that frees for several heaps blocks of a class it
 * does not allocate (or of any small class), up to DEPOT_MAX_BYTES a
 * class, for any thread that allocates the class, which takes chains up to
 * DEPOT_TAKE_BYTES at once.
 * A thread's owners are counted over DEPOT_OWNER_WINDOW chains. Classes
 * from DEPOT_FIRST_CLASS: a group of chains' first block carries the group
 * below and the group's tail in words 2 and 3. */
#define DEPOT_TAKE_BYTES (16 * 1024)
#define DEPOT_MAX_BYTES  ((size_t)32 << 20)
/* Stacks a class's depot keeps, each under its own lock, and what each may
 * hold: a thread puts and takes at its own first (heap_depot_home). */
#define DEPOT_SHARDS          8
#define DEPOT_SHARD_MAX_BYTES (DEPOT_MAX_BYTES / DEPOT_SHARDS)
#define DEPOT_OWNER_WINDOW    64
/* Purge delays (the option's) a class's depot may go untaken before its
 * chains go home. One: producers that all wait on a full queue for 10 ms
 * (2 cores, 16 threads) saw their depot drained to their own pools
 * (xmalloc 8:8 39 MB against 30); longer, blocks freed for owners that
 * never allocate again wait longer to go home. */
#define DEPOT_STALE_DELAYS 4
#define DEPOT_FIRST_CLASS  1 /* 32-byte blocks */

/* Size classes: 16..128 in steps of 16, then 8 classes per doubling up to
 * MEDIUM_MAX; every block 16-byte aligned (size_class.c says why). */
#define CLASS_COUNT   72
#define CLASS_LARGE   CLASS_COUNT       /* single-block page of slices */
#define CLASS_HUGE    (CLASS_COUNT + 1) /* the page of a huge segment */
#define CLASS_NONE    (CLASS_COUNT + 2) /* descriptor of a free slice or a header */
#define COUNTER_SLOTS (CLASS_COUNT + 3) /* counters are kept per class */
/* A page of the heap's medium pool (pool.c). Its blocks count in the
 * classes of their requests; the page itself in no counter slot. */
#define CLASS_POOL (CLASS_COUNT + 3)
/* Slices of a pool page: room for three of the largest pooled blocks and
 * for the holes between a thread's blocks of every medium size. One, not
 * four: a page's holes reach as far as its blocks ever did, and a thread's
 * few medium blocks spread over a big page's holes (quick bench with the
 * pool, peak RSS: mtalloc, mstress, larson, prodcons 1:1 7-16 % lower). */
#define POOL_SLICES 1
/* The largest plain request the pool serves. */
#define POOL_MAX MEDIUM_MAX
/* SHOAL_MEDIUM_POOL's values. By default (POOL_UPPER) the pool serves the
 * plain requests above POOL_UPPER_MIN of a thread whose pool blocks no
 * other thread has freed. Above 8 KiB a class page holds only a few
 * blocks, and a thread with a handful of them in each of the 16 classes up
 * to 32 KiB kept every class at its own highest count (mtalloc, full, peak
 * RSS: the pool takes 9-12 % off at 2-32 threads, times level). Below, the
 * pool's own work per block costs more than the classes' pop (mtalloc's
 * 4-8 KiB blocks alone: +25 % time), and a block freed by another thread
 * makes the pool's slower paths the common ones (rptest, whose frees are
 * all remote: +20-30 % time): such a heap goes back to the classes for
 * the rest of its thread's life (its pool_shunned). POOL_ALL pools every
 * medium request, always. */
enum { POOL_OFF = 0, POOL_ALL = 1, POOL_UPPER = 2 };
#define POOL_UPPER_MIN (8 * 1024)
/* A pool page's nominal block size, for the outbox, which sends a page's
 * gathered blocks home once they count OUTBOX_BYTES. */
#define POOL_NOMINAL_BLOCK DIRECT_MAX

/* Bits set in a slice bitmap. Portable arithmetic rather than the builtin,
 * which without -mpopcnt calls into libgcc: libshoal.a must link with a
 * bare `ld` (Free Pascal links that way). Slow paths only. */
static inline size_t bit_count(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return (size_t)((x * 0x0101010101010101ull) >> 56);
}

/* ---- core types ---- */
typedef struct shoal_block_s {
  struct shoal_block_s *next; /* word 0: free-list link */
  uintptr_t key;              /* word 1: process key while free, 0 while live */
} shoal_block_t;

struct shoal_heap_s;

#define TAIL_PURGED 2 /* touched_tail of a page whose tail went back (heap.c) */

/* xthread_free's bits from here on count the blocks on its list (user
 * addresses have 47 bits, ADDRESS_BITS). */
#define XTHREAD_COUNT_SHIFT 48

typedef struct shoal_page_s {
  /* Line 1, read-mostly, for other threads: a free from another thread
   * reads only this line (and writes line 3), never the owner's line 2.
   * The shape fields copy line 2's and change only while no block is live. */
  uint64_t shared_divisor;    /* block_divisor(block_size): the block test; 0: no blocks */
  uint8_t *shared_start;      /* copy of start */
  uint32_t shared_block_size; /* copy of block_size */
  uint8_t shared_class;       /* copy of size_class */
  uint8_t slice_count;        /* (owner) slices spanned */
  uint8_t has_aligned;        /* (owner) an aligned block may be freed by an interior pointer */
  uint8_t touched_tail;       /* (owner) made on touched slices: what it has not carved may be
                                 resident (heap.c, heap_purge_untouched_tails); TAIL_PURGED:
                                 given back, watched for a refault */
  _Atomic(uintptr_t) owner;   /* (owner) the heap; 0 while the slice is not a page */
  uint32_t reserved;          /* (owner) blocks the page can hold */
  uint8_t freed_class;        /* (owner) a free slice's: the class of the page that gave it back */
  struct shoal_page_s *next, *prev; /* (owner) class queue or full list */
  _Atomic(uint64_t) shared_limit;   /* (owner, read by all) block_limit of the carved blocks */
  /* Line 2, owner-hot: what the owner's malloc and free touch. */
  shoal_block_t *free cache_aligned; /* blocks to hand out next */
  uint32_t used;                     /* handed out, incl. remote frees not yet collected */
  uint32_t capacity;                 /* blocks carved so far */
  uint64_t free_divisor;             /* copy of shared_divisor */
  uint8_t *start;                    /* first block */
  uint32_t block_size;               /* bytes per block; 0 when the page is free */
  uint8_t size_class;                /* class, CLASS_LARGE/HUGE/NONE */
  uint8_t flags;                     /* PAGE_FULL, PAGE_UNUSED: 0 on the fast path */
  uint8_t is_zero; /* free blocks are zero beyond word 0 (fresh memory); a small class's
                      page: made on fresh slices (its own frees do not clear it) */
  /* GUEST_PAGE: a page of this heap in another heap's segment (heap.c,
   * heap_borrow_page). Its free_limit stays 0 (page_set_free_limit): the
   * segment's heap, whose free takes its blocks for its own, finds no block
   * here and sends them on (free_slow). GUEST_RETURNING: empty, on its way
   * back to the heap that holds the segment, through that heap's notify
   * stack. */
  _Atomic(uint8_t) guest; /* read by the segment's heap's walks (heap_take_segment) */
  /* (owner) What the statistics need, kept where malloc already writes
   * (page_fold_counters): blocks handed out since the counts last went to
   * the heap, and `used` at that time (less the remote frees collected
   * since, which their freeing threads counted). The local frees since are
   * the difference: free counts nothing. */
  uint32_t used_at_fold;
  union {
    /* A page's: free_limit's twin for a medium or large class (a page's
     * limit stays below 2 MiB), whose frees leave the fast path by its
     * block test (free_limit 0) and take this one (alloc.h,
     * free_own_larger). */
    uint32_t larger_limit;
    uint32_t own_frees; /* a class cache's: the heap's own blocks pushed since the last fold */
  };
  uint64_t unfolded_allocs;
  uint64_t free_limit; /* shared_limit while the fast path may free here, else 0 (parked,
                          unused, a guest, or not a small class's) */
  /* Line 3, written by other threads. Blocks they freed (atomic): the list
   * in bits 1..47, its length in bits 48..63. Bit 0 set: the owner parked
   * the page in its full list and wants to be told; the first pusher clears
   * it and queues the page on the owner's notify stack through
   * next_notified. */
  _Atomic(uintptr_t) xthread_free cache_aligned;
  struct shoal_page_s *next_notified;
  /* (owner) capacity at the last look at its touched tail (heap.c,
   * heap_tails_check): written once a purge delay at most, so on this
   * line, which has the room, not on the owner's full ones. */
  uint32_t tail_capacity;
} cache_aligned shoal_page_t;

/* Page flags. PAGE_REPARKED and PAGE_BORROWED go with PAGE_FULL: parked
 * again, with free blocks, by a thread that served the heap for its idle
 * owner (in heap->reparked); come with a segment taken from a live heap,
 * and parked until empty (heap.c, heap_take_notified_kept_parked). */
#define PAGE_FULL     1 /* parked in heap->full (or reparked), not in a class queue */
#define PAGE_UNUSED   2 /* the descriptor of a free slice or a header: no blocks */
#define PAGE_REPARKED 4
#define PAGE_BORROWED 8

/* shoal_page_t.guest */
#define GUEST_PAGE      1
#define GUEST_RETURNING 2

/* The block test: one multiply tells whether p is the start of one of the
 * first `capacity` blocks of a page, i.e. of a block it has handed out at
 * some time. With divisor = ceil(2^64 / size) (one more for a power of two),
 * offset * divisor wraps to k * e for the k-th block start, where
 * e = divisor * size - 2^64 lies in [1, size], and to at least divisor - 1
 * for any other offset (offsets stay below 2^32, sizes below 2^22). So
 * `offset * divisor < capacity * e` holds exactly for the carved blocks:
 * an address past them, or before the page, or inside a block, fails; a
 * limit of 0 fails every address. (Lemire, Kaser, Kurz: "Faster remainder
 * by direct computation", 2019, for the divisibility half.) */
static inline uint64_t block_divisor(uint32_t block_size) {
  if (block_size == 0) return 0;
  bool power_of_two = (block_size & (block_size - 1)) == 0;
  return UINT64_MAX / block_size + 1 + (power_of_two ? 1 : 0);
}
static inline uint64_t block_limit(uint64_t divisor, uint32_t block_size, uint32_t capacity) {
  return (uint64_t)capacity * (divisor * block_size); /* the product wraps to e */
}
/* offset * divisor: below the limit for a carved block's start. */
static inline uint64_t block_place(const uint8_t *start, uint64_t divisor, const void *p) {
  uint32_t offset = (uint32_t)((const uint8_t *)p - start);
  return (uint64_t)offset * divisor;
}
static inline bool is_carved_block(const uint8_t *start, uint64_t divisor, uint64_t limit,
                                   const void *p) {
  return block_place(start, divisor, p) < limit;
}

/* free_limit for a small class's page, larger_limit for a medium or large
 * one's (the other 0), so that the fast path, which reads only free_limit,
 * needs no class test; but a guest's: those stay the 0 its descriptor was
 * cleared to, never written while the segment's heap may read them in a
 * free. */
_Static_assert(2 * SEGMENT_SIZE <= UINT32_MAX, "a page's block limit fits larger_limit");
static inline void page_set_free_limit(shoal_page_t *page, uint64_t limit) {
  if (atomic_load_explicit(&page->guest, memory_order_relaxed) != 0) return;
  bool small = page->size_class < DIRECT_CLASSES;
  page->free_limit = small ? limit : 0;
  page->larger_limit = !small && page->size_class <= CLASS_LARGE ? (uint32_t)limit : 0;
}
/* After carving more blocks, or parking and unparking. A page with flags
 * set (parked, unused) gets no free_limit: every pointer then fails the
 * fast path's block test, which so needs no test of its own for them. */
static inline void page_publish_extent(shoal_page_t *page) {
  uint64_t limit = block_limit(page->shared_divisor, page->block_size, page->capacity);
  atomic_store_explicit(&page->shared_limit, limit, memory_order_relaxed);
  page_set_free_limit(page, page->flags == 0 ? limit : 0);
}
/* After changing start, block_size, size_class or flags. */
static inline void page_publish_shape(shoal_page_t *page) {
  page->shared_divisor = page->free_divisor = block_divisor(page->block_size);
  page->shared_start = page->start;
  page->shared_block_size = page->block_size;
  page->shared_class = page->size_class;
  page_publish_extent(page);
}
static inline void page_mark_parked(shoal_page_t *page) {
  page->flags |= PAGE_FULL;
  page_set_free_limit(page, 0);
}
static inline void page_mark_unparked(shoal_page_t *page) {
  page->flags &= (uint8_t)~PAGE_FULL;
  page_publish_extent(page);
}

typedef enum segment_kind_e { SEGMENT_NORMAL = 1, SEGMENT_HUGE = 2 } segment_kind_t;

typedef struct shoal_segment_s {
  /* Line 1 holds what every free reads: the owner, and where the block's
   * page lies. Each of a program's segments is one more line its frees
   * keep warm; on two lines (page_offset came after the slice masks),
   * smallobj's random frees of 160 MiB missed the first level of cache
   * twice as often as mimalloc's, whose segments are few and large.
   * (owner, read by all) The owning heap: every free compares it with its
   * own. It changes while blocks live only when a live heap takes the
   * segment of a dead one (segment_move); a relaxed load is a plain load. */
  _Atomic(struct shoal_heap_s *) heap;
  /* slice -> byte offset from the segment of the descriptor of the page
   * holding it (that of its first slice), or of its own when free: free
   * finds its page with one add, no multiply. */
  uint16_t page_offset[SLICES_PER_SEGMENT];
  struct shoal_segment_s *next, *prev; /* (owner) heap's list, or arena cache */
  uint64_t free_slices;                /* (owner) 1 = slice not in any page */
  uint64_t dirty_slices;               /* (owner) 1 = slice touched since its last purge */
  uint64_t recent_slices; /* (owner) freed since the heap's last aged purge: spared by it */
  uint64_t lazy_slices;   /* (owner) free slices purged lazily (MADV_FREE): reusable at no
                             cost until the kernel wants the memory; still dirty */
  uint64_t purged_slices; /* (owner) purged for good (by its heap or the arena's trim) and not
                             taken since: taking one soon after is a refault (purge_pace) */
  int64_t purged_ms;      /* (owner) when the last of them was purged */
  size_t size;            /* bytes mapped (SEGMENT_SIZE, or a huge block's mapping) */
  size_t huge_advised;    /* a huge block's: bytes asked for transparent huge pages */
  int64_t cached_ms;      /* a huge block's: when it went into the cache (large.c) */
  segment_kind_t kind;
  shoal_page_t pages[SLICES_PER_SEGMENT]; /* indexed by first slice */
} shoal_segment_t;
_Static_assert(offsetof(shoal_segment_t, page_offset) +
                       sizeof(((shoal_segment_t *)0)->page_offset) <=
                   CACHE_LINE_SIZE,
               "what a free reads of its segment on one cache line");

typedef struct page_queue_s {
  shoal_page_t *first, *last;
} page_queue_t;

/* Free blocks linked from head to tail. */
typedef struct chain_s {
  shoal_block_t *head, *tail;
  uint32_t count;
} chain_t;

/* A medium block of another heap, freed by this thread, that carries the
 * addresses of others of that heap's freed blocks to its owner (heap.c,
 * the mailbox). Words 0 and 1 are every free block's: the link (here, the
 * mailbox's next parcel) and the free key, so that a double free of it is
 * found as of any block. */
typedef struct parcel_s {
  struct parcel_s *next;
  uintptr_t key;
  uint32_t count; /* blocks[] held */
  uint32_t room;  /* blocks[] the parcel's block has room for */
  shoal_block_t *blocks[];
} parcel_t;

/* Blocks of another heap, freed by this thread and not yet sent, with one
 * CAS when they are: one page's (page set: a chain from head to tail onto
 * the page's remote list, page_push_remote) or one owner's medium blocks
 * of any of its pages (page NULL: a parcel into the owner's mailbox). The
 * heap's outbox_occupied says which slots hold blocks. */
typedef struct outbox_slot_s {
  shoal_page_t *page;
  union {
    chain_t chain; /* a page's */
    struct {
      struct shoal_heap_s *owner;
      parcel_t *parcel;
      uint32_t bytes; /* its blocks' sizes, its own included */
    } mail;           /* an owner's */
  };
} outbox_slot_t;

/* lock.c's lock (its functions below). */
enum { LOCK_FREE = 0, LOCK_HELD = 1, LOCK_CONTENDED = 2 /* held, someone may sleep on it */ };
typedef struct shoal_lock_s {
  _Atomic(int) word; /* LOCK_FREE, LOCK_HELD or LOCK_CONTENDED */
} shoal_lock_t;
#define SHOAL_LOCK_INIT                                                                            \
  { 0 }

typedef enum heap_state_e {
  HEAP_LIVE = 0,      /* a thread owns it */
  HEAP_ABANDONED = 1, /* its thread exited; waiting for adoption */
  HEAP_SERVICING = 2, /* a freeing thread briefly acts as its owner */
  HEAP_ORPHAN = 3,    /* in a fork child: its thread did not survive the fork */
} heap_state_t;

/* Counters written by the owner with plain (relaxed) stores and read by
 * anyone: summed over all heaps they give exact process figures. Blocks are
 * counted per size class (the fast paths count in their page, folded in
 * here by page_fold_counters) and bytes follow from the class; large and
 * huge blocks, whose sizes vary, add their bytes too. */
typedef struct heap_counters_s {
  _Atomic(size_t) allocated[COUNTER_SLOTS];
  _Atomic(size_t) freed[COUNTER_SLOTS];
  _Atomic(size_t) outsized_allocated_bytes, outsized_freed_bytes;
  _Atomic(size_t) remote_frees;
  _Atomic(size_t) slow_paths; /* mallocs that had to look beyond the first page */
} heap_counters_t;

typedef struct shoal_heap_s {
  uintptr_t free_key; /* free_key's copy, on the line free already reads: one load less */
  shoal_page_t *direct_page[DIRECT_SLOTS]; /* (owner) first page for each 8-byte size step */
  page_queue_t queues[CLASS_COUNT];        /* (owner) pages that may have free blocks */
  page_queue_t full;                       /* (owner) pages parked until notified */
  /* (owner) Pages with free blocks that a thread serving the heap parked
   * again for its owner (heap_serve_idle): the owner's next slow path puts
   * them back in their queues. */
  page_queue_t reparked;
  /* (owner) Its medium pool's pages (pool.c): the one that served last
   * first. Each is always armed, as a parked page is: the first remote
   * free into it queues it on the notify stack. */
  page_queue_t pool;
  uint32_t pool_frees_unchecked; /* (owner) pool frees since the last look at the purge clock */
  /* Held by the owner through its slow paths (slow_depth counts nested
   * entries), or by a thread serving the heap while its owner is idle:
   * everything a slow path changes — parked pages, segments, purge — is
   * under it. The fast paths never take it. */
  shoal_lock_t slow_lock;
  uint32_t slow_depth;         /* (owner) */
  uint32_t serves_while_idle;  /* (under slow_lock) serves since the owner's last drain */
  uint32_t emptied_scan_class; /* (owner) where the next look for remotely emptied pages starts */
  uint32_t emptied_scans_owed; /* (owner) looks left in the round (heap_retire_remotely_emptied) */
  bool emptied_found;          /* (owner) the round found a page other threads emptied */
  bool owner_cpu_noted;        /* (under slow_lock) heap_owner_only_away: */
  int64_t owner_cpu_ms_noted;  /* the owner's CPU time when a serve first saw it runnable */
  shoal_segment_t *segments;   /* (owner) its segments that have a free slice (full ones
                                  aren't listed: a page allocation walks only what may serve) */
  heap_counters_t counters;
  /* (owner) Pages taken from and given back to segments: their difference,
   * summed over the heaps, is the process's page count (a page may be given
   * back by another heap than took it). Kept with or without statistics. */
  _Atomic(size_t) pages_taken, pages_given;
  uint64_t outbox_occupied; /* (owner) a bit per slot holding blocks */
  size_t outbox_bytes;      /* (owner) the blocks its pages' chains hold, in bytes */
  uint64_t outbox_touched;  /* (owner) a bit per slot given a block since the last sweep */
  /* (owner) A bit per class whose cache has been given blocks (a push or
   * a depot chain): only those caches are looked at by the slow paths,
   * folded and flushed, and the others stay untouched, the sparse part of
   * the heap (a medium malloc's first look, alloc_slow_pop, reads its own
   * class's, which the class's first own free writes anyway). Where the
   * kernel backs a read of untouched memory with a page of its own, as
   * some do, a slow path that only looked at each class's cache made a
   * page of them resident (a thread of one class: 8 KiB, not 4). */
  uint64_t classes_cached[(CLASS_COUNT + 63) / 64];
  /* (owner) A depot found stale while a chain was sent: drained once the
   * outbox is whole again. Beside outbox_occupied, which every push writes. */
  bool depot_drain_due;
  /* (owner) Draining or leaving: every chain goes home. Here, not with the
   * outbox: every collect and every thread exit writes it. */
  bool outbox_home_only;
  bool touched_tails;           /* (owner) a page's tail to give back, or one given back to watch */
  int64_t tails_purged_ms;      /* (owner) when the last tails went back (heap.c, TAIL_PURGED) */
  size_t purge_pending_bytes;   /* (owner) free dirty slice bytes not yet purged */
  _Atomic(int64_t) purge_at_ms; /* (owner, read by a free) when to purge them; 0: nothing pending */
  int64_t purge_latest_ms;      /* (owner) frees push purge_at_ms back no later than this */
  int64_t page_freed_ms;        /* (owner) when the heap last gave a page back */
  int64_t tails_purge_at_ms;    /* (owner) when those pages' tails go: a delay after the first */
  os_thread_usage_t purge_usage;     /* (owner) the owner's at the last due purge */
  os_thread_usage_t usage_at_return; /* (owner) the owner's when it last found itself served */
  /* (owner, read by servers) When the owner last came back to a heap
   * served while it was away, and whether it had only waited for a core
   * meanwhile (preempted, never blocked): heap_owner_waits_for_core. */
  _Atomic(int64_t) owner_back_ms;
  _Atomic(bool) owner_was_preempted;
  _Atomic(int) owner_thread_id; /* (owner) os_thread_id once served, for os_thread_state; or 0 */
  int64_t abandoned_ms;         /* (servicer) when its thread exited */
  struct shoal_heap_s *next_registered; /* (arena) every heap */
  struct shoal_heap_s *next_abandoned;  /* (arena) heaps waiting for adoption */
  /* Written by other threads: a line of its own, away from the owner's. */
  _Atomic(shoal_page_t *) notified cache_aligned; /* (atomic) full pages that got remote frees */
  _Atomic(size_t) notified_slices;                /* (atomic) their slices, about: a drain resets */
  _Atomic(int) state;                             /* (atomic) heap_state_t */
  /* (atomic) Set by a push of other threads' blocks onto a page's list
   * (page_push_remote), cleared by the owner after a round of looks for the
   * pages such pushes emptied that found none (heap.c,
   * heap_retire_remotely_emptied): a heap no other thread frees into never
   * looks. A hint: a push that races the clear is found at the next round. */
  _Atomic(bool) remote_pushed;
  /* (atomic) Other threads' parcels of this heap's medium blocks, a stack:
   * the owner puts each block back on its page at its next slow path
   * (heap.c, the mailbox). */
  _Atomic(parcel_t *) mailbox;
  _Atomic(size_t) mailbox_bytes; /* (atomic) about what it holds: a delivery resets */
  /* (atomic) The heap that posted last, and how many times the sender
   * changed since the last delivery: about (racing posts may miss one). */
  _Atomic(struct shoal_heap_s *) mailbox_sender;
  _Atomic(uint32_t) mailbox_sender_changes;
  /* (atomic) Set by another thread freeing one of its pool blocks: from then on
   * POOL_UPPER leaves this heap's requests to the classes (size_is_pooled). */
  _Atomic(bool) pool_shunned;
  /* The sparse part, from the end of the first OS page on (heaps are carved
   * page-aligned, arena.c): a thread writes here only when it frees other threads'
   * blocks or its own medium ones, and then only the entries of their
   * classes; nothing reads an entry the thread never wrote (on a kernel
   * without a shared zero page a read of an untouched page costs a page of
   * memory as a write does). A thread of small blocks, its own or a few of
   * other threads', so holds two pages of its heap resident (the first,
   * and the outbox's with the small classes' caches), not five (cthrash,
   * 64 threads: 20 KiB a thread were resident when every class cache was
   * read at its exit).
   *
   * (owner) Other threads' blocks this thread freed beyond the class cache,
   * gathered by page (a slot per page, by hash) and sent home a chain at a
   * time: one CAS for OUTBOX_BYTES of blocks, not one a block. First, on
   * the page the small classes' caches share. */
  outbox_slot_t outbox[OUTBOX_SLOTS] cache_aligned;
  /* (owner) Whose blocks its outbox sent: a chain goes to the depot for a
   * thread that frees for several heaps (heap.c, outbox_to_depot). */
  struct shoal_heap_s *remote_owner_last;
  uint32_t chains_in_window, owner_changes_in_window;
  bool frees_for_many_heaps;
  /* (owner) The class caches: blocks freed that this thread's next
   * allocations of the class take first, as a pseudo page the fast path
   * pops like any other: other threads' blocks this thread freed
   * (alloc.h, remote_cache_push) and, of a medium class, its own
   * (alloc.h, free_own_larger). Every one stays counted in its page. capacity counts
   * pushes and used pops since it was last empty, reserved the pushes
   * counted as frees, own_frees the own pushes among those not counted yet.
   * Only these and `free` are set: a cache is never found by a free. Only
   * the caches of classes_cached are looked at (classes_cached says which
   * other reads there are). */
  shoal_page_t class_cache[CLASS_COUNT];
} cache_aligned shoal_heap_t;

/* ---- lock.c: spin with pause, then yield, then futex; never a fixed sleep ---- */
void lock_acquire(shoal_lock_t *lock);
/* The same waiting with signals let through, for locks fork never takes
 * (the trace's buffers, reset in the child). */
void lock_acquire_plain(shoal_lock_t *lock);
void lock_release_plain(shoal_lock_t *lock);
/* For a lock that only the releasing thread can be waiting on (a heap's
 * slow lock: other threads only try it): nobody to wake, so a store, not
 * an exchange. An exchange waits for every store before it to reach the
 * cache, and a slow path's carving leaves many in flight (mstress t=2: 6 %
 * of the time in the exchange). Inline: on every malloc slow path. */
static inline void lock_release_unwaited(shoal_lock_t *lock) {
  atomic_store_explicit(&lock->word, LOCK_FREE, memory_order_release);
}
extern _Thread_local size_t lock_waits; /* times this thread found a lock taken */
bool lock_try_acquire(shoal_lock_t *lock);
bool lock_try_acquire_plain(shoal_lock_t *lock); /* signals let through */
/* A bounded wait, signals let through: `pause`s, then a few yields (a
 * holder preempted runs again), never a sleep; false if still held. For
 * locks held a few instructions whose takers have somewhere else to go
 * (the depot's), and which a signal handler may find held by its own
 * thread. */
bool lock_try_acquire_briefly(shoal_lock_t *lock);
void lock_release(shoal_lock_t *lock);
/* The order in which locks are taken, when one is taken while another is
 * held, and by fork, which holds them all: one ranked list, lowest first.
 * The layers above the core take theirs before calling into it. */
typedef enum lock_rank_e {
  LOCK_RANK_ABOVE_CORE = 1, /* the diagnostics' tables */
  LOCK_RANK_ARENA = 2,
} lock_rank_t;
/* fork holds every registered lock, in rank order, also when called from a
 * signal handler (lock.c). */
void lock_register_for_fork(shoal_lock_t *lock, lock_rank_t rank);
void lock_fork_prepare(void);
void lock_fork_parent(void);
void lock_fork_child(void);
void lock_reset(shoal_lock_t *lock); /* in a fork child only */

/* ---- options.c ---- */
void options_init(void);
extern _Atomic(long) option_values[SHOAL_OPTION_COUNT];
static inline long option(shoal_option_t which) {
  return atomic_load_explicit(&option_values[which], memory_order_relaxed);
}
/* format.c: snprintf and vsnprintf for shoal's lines (the conversions
 * d i u x s c p, widths, precisions, the lengths hh h l ll z t j): no
 * allocation, no lock, no C library stdio. */
int text_format(char *out, size_t capacity, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
int text_vformat(char *out, size_t capacity, const char *format, va_list args)
    __attribute__((format(printf, 3, 0)));
void message(const char *format, ...) __attribute__((format(printf, 1, 2)));
/* 1/true/on/yes -> 1, 0/false/off/no -> 0 (any case); false if neither. */
bool option_parse_bool(const char *text, long *out);
void verbose(const char *format, ...) __attribute__((format(printf, 1, 2)));

/* ---- size_class.c ---- */
extern const uint32_t class_block_size[CLASS_COUNT];
extern const uint8_t class_slices[CLASS_COUNT];
/* Above 128 bytes: the highest bit picks the doubling, the next three bits
 * one of its eight classes. */
static inline uint8_t size_class_of_large(size_t size) {
  size_t w = size - 1;
  unsigned bit = 63u - (unsigned)__builtin_clzll(w);
  unsigned step_in_doubling = (unsigned)(w >> (bit - 3)) & 7u;
  return (uint8_t)(8u + (bit - 7u) * 8u + step_in_doubling);
}
extern const uint8_t direct_class[DIRECT_SLOTS];

/* Class of a request: a table below DIRECT_MAX, bit arithmetic above. */
static inline uint8_t size_class_of(size_t size) {
  if (size <= DIRECT_MAX) return direct_class[(size + WORD_SIZE - 1) / WORD_SIZE];
  return size_class_of_large(size);
}

/* ---- segment.c ---- */
extern _Atomic(uint8_t) segment_map[SEGMENT_MAP_ENTRIES];
#define SEGMENT_MAP_HEAD     1 /* a segment starts in this 1 MiB chunk */
#define SEGMENT_MAP_INTERIOR 2 /* a huge segment continues here */

static inline shoal_segment_t *segment_of(const void *p) {
  return (shoal_segment_t *)((uintptr_t)p & ~(uintptr_t)SEGMENT_MASK);
}
/* Masked rather than bounds-checked (one instruction less on every free):
 * an address above the 47-bit user space, which no program can hand out,
 * reads the entry of the chunk it aliases. */
static inline bool segment_map_is_head(const void *p) {
  uintptr_t chunk = ((uintptr_t)p >> SEGMENT_SHIFT) & (SEGMENT_MAP_ENTRIES - 1);
  return atomic_load_explicit(&segment_map[chunk], memory_order_relaxed) == SEGMENT_MAP_HEAD;
}
static inline shoal_page_t *segment_page_of(shoal_segment_t *segment, const void *p) {
  size_t slice = ((uintptr_t)p & SEGMENT_MASK) >> SLICE_SHIFT;
  return (shoal_page_t *)((uint8_t *)segment + segment->page_offset[slice]);
}
/* Slice `slice` now belongs to the page whose first slice is `first`. */
static inline void segment_slice_set_page(shoal_segment_t *segment, size_t slice, size_t first) {
  segment->page_offset[slice] =
      (uint16_t)(offsetof(shoal_segment_t, pages) + first * sizeof(shoal_page_t));
}
shoal_segment_t *segment_find(const void *p); /* any pointer into shoal memory, or NULL */
/* A page of `slices` slices for a page of `size_class` (CLASS_NONE: any):
 * first the resident free slices a page of that class gave back. */
shoal_page_t *segment_page_alloc(struct shoal_heap_s *heap, size_t slices, uint8_t size_class);
/* A page of `slices` resident free slices of `owner`'s segments for another
 * heap (a guest page), or NULL: owner held by the caller. Given back with
 * segment_page_free(owner's heap at that time, page). */
shoal_page_t *segment_page_lend(struct shoal_heap_s *owner, size_t slices);
/* The page's slices back to its segment (its counts the caller folds first). */
void segment_page_free(struct shoal_heap_s *heap, shoal_page_t *page);
bool segment_page_grow(struct shoal_heap_s *heap, shoal_page_t *page, size_t slices);
bool segment_page_shrink(struct shoal_heap_s *heap, shoal_page_t *page, size_t slices);
void segment_map_set(shoal_segment_t *segment, size_t size, uint8_t head);
/* A purge (or trim) made due `delay` from now, pushing back the one already
 * due at *at, though never past PURGE_BURST_DELAYS delays after the first:
 * a program freeing in a burst often allocates it all again when the burst
 * ends, but one that never stops freeing and allocating would otherwise
 * never give back what stays free (largemix t=1 held 80 MiB above its live
 * bytes, never purged). *latest is the caller's, set when *at was 0. */
static inline void purge_deadline_push(_Atomic(int64_t) *at, int64_t *latest, int64_t now,
                                       long delay) {
  if (atomic_load_explicit(at, memory_order_relaxed) == 0)
    *latest = now + PURGE_BURST_DELAYS * delay;
  atomic_store_explicit(at, now + delay < *latest ? now + delay : *latest, memory_order_relaxed);
}

/* Slices just purged for good: taking one of them again soon is a refault
 * (segment.c, segment_take_purged; arena.c, purge pacing). */
static inline void segment_note_purged(shoal_segment_t *segment, uint64_t mask, int64_t now) {
  segment->purged_slices |= mask;
  segment->purged_ms = now;
}

void segment_purge_heap(struct shoal_heap_s *heap);
void segment_purge_heap_aged(struct shoal_heap_s *heap);
void segment_purge_restart(struct shoal_heap_s *heap);
void segment_move(struct shoal_heap_s *from, struct shoal_heap_s *to, shoal_segment_t *segment);
void segment_purge_heap_lazy(struct shoal_heap_s *heap);

/* The slices a block of `bytes` from a slice's start spans. */
static inline size_t slices_spanned(size_t bytes) {
  return (bytes + SLICE_SIZE - 1) / SLICE_SIZE;
}

/* The block size of a large page whose block must reach `bytes` past its
 * start: whole OS pages, not whole slices. The block never touches what
 * lies beyond in its last slice (no memory unless an earlier block of a
 * reused slice did), can grow into it in place (realloc), and a copy moves
 * only its OS pages. */
static inline size_t large_block_bytes(const shoal_page_t *page, size_t bytes) {
  size_t rounded = (bytes + os_page_size() - 1) & ~(os_page_size() - 1);
  size_t capacity = (size_t)page->slice_count * SLICE_SIZE;
  return rounded < capacity ? rounded : capacity;
}

/* ---- page.c ---- */
extern uintptr_t free_key; /* word 1 of every free block: catches double frees */
void page_init(shoal_page_t *page, struct shoal_heap_s *heap, size_t block_size, uint8_t size_class,
               bool is_zero);
bool page_extend(shoal_page_t *page);
size_t page_collect(shoal_page_t *page);
bool page_collect_if_emptied(shoal_page_t *page); /* all out blocks freed remotely: empty now */
bool page_collect_queued(shoal_page_t *page);     /* a queued page's remote frees, lock-free */
bool page_park_full(shoal_page_t *page); /* arm the notify bit; false: it had remote frees */
/* SHOAL_AUDIT: `count` free blocks linked from head (to tail, if not NULL;
 * else to the list's end), each of the class, or of the page if not NULL. */
void audit_chain(const shoal_page_t *page, uint8_t size_class, const shoal_block_t *head,
                 const shoal_block_t *tail, uint32_t count);
void audit_page_empty(const shoal_page_t *page); /* every block a class page carved is free */
shoal_block_t *page_take_remote_armed(shoal_page_t *page); /* a pool page's (pool.c) */
bool page_unpark(shoal_page_t *page); /* disarm; false: a notification is on its way */
/* A chain of `count` blocks of the page, head to tail, freed by another
 * thread: one CAS (may notify the owner). The owner's heap when it needs
 * serving (heap_serve): its thread is gone, or has let notified pages pile
 * up; else NULL. */
struct shoal_heap_s *page_push_remote(shoal_page_t *page, shoal_block_t *head, shoal_block_t *tail,
                                      uint32_t count);
/* Queue a parked page that got remote frees on `heap`'s notify stack; the
 * heap when it needs serving, else NULL. */
struct shoal_heap_s *page_notify(shoal_page_t *page, struct shoal_heap_s *heap);
/* p is at a block boundary of the page, handed out or not (any thread). */
static inline bool page_is_block_start(const shoal_page_t *page, const void *p) {
  uint32_t offset = (uint32_t)((const uint8_t *)p - page->shared_start);
  return page->shared_block_size != 0 && offset % page->shared_block_size == 0;
}
/* A descriptor that holds no blocks: a free slice's, or the header's. A
 * segment fresh from the OS leaves them zero (arena.c), which reads so too:
 * class 0 with no block size is no page. */
static inline bool page_is_unused(const shoal_page_t *page) {
  return page->size_class == CLASS_NONE || (page->size_class == 0 && page->block_size == 0);
}
/* p is a block the page has handed out at some time (any thread). */
static inline bool page_is_carved_block(const shoal_page_t *page, const void *p) {
  return is_carved_block(page->shared_start, page->shared_divisor,
                         atomic_load_explicit(&page->shared_limit, memory_order_relaxed), p);
}

/* ---- pool.c: one pool page's blocks (the caller holds the page's heap,
 * but where said) ---- */
typedef struct pool_block_s {
  size_t usable;      /* 0: no block starts there */
  uint8_t size_class; /* of the request, for the counters */
  bool is_free;
} pool_block_t;
size_t pool_block_bytes(size_t size); /* what a request takes of a pool page */
void pool_page_init(shoal_page_t *page);
/* A block of `need` bytes (pool_block_bytes) out of the page, or NULL. */
void *pool_take(shoal_page_t *page, size_t need, uint8_t size_class);
void pool_give(shoal_page_t *page, void *p); /* a live block back, joined with free neighbours */
/* Grow the live block p in place to `need` bytes, over a free neighbour. */
bool pool_grow(shoal_page_t *page, void *p, size_t need, uint8_t size_class);
/* What starts at p (any thread): usable 0 when p is no block start. */
pool_block_t pool_block_of(const shoal_page_t *page, const void *p);
void *pool_block_containing(const shoal_page_t *page, const void *p, size_t *usable); /* any */
size_t pool_free_bytes(const shoal_page_t *page);
size_t pool_purge(shoal_page_t *page, bool all);

/* ---- depot.c ---- */
bool depot_may_hold(uint8_t size_class); /* a chain may be there to take */
/* A thread looks for a free block of the class (its slow path); whether
 * one did within a purge delay: else a chain would wait for nobody. */
void depot_note_wanted(uint8_t size_class, int64_t now);
bool depot_is_wanted(uint8_t size_class, int64_t now);
/* Keep a chain of free blocks of the class, in shard `home` (modulo
 * DEPOT_SHARDS) or the next one free; false when the depot is full or
 * busy (the chain stays the caller's). */
bool depot_put(uint8_t size_class, chain_t chain, int64_t now, unsigned home);
/* Chains of the class joined into one of up to DEPOT_TAKE_BYTES (more if
 * a single chain is, and up to half as much again), from shard `home` or
 * the next that holds some, or an empty chain. `now` marks the class in
 * use (0: a drain, which does not). */
chain_t depot_take(uint8_t size_class, int64_t now, unsigned home);
/* When the class's chains go home if nobody takes one before; 0: none. */
int64_t depot_stale_at(uint8_t size_class);
/* The same, whether or not the depot holds chains (no read of the line
 * that takes and puts write). */
int64_t depot_active_until(uint8_t size_class);
void depot_fork_child(void); /* a thread that held a depot is gone */

/* ---- heap.c ---- */
extern _Thread_local shoal_heap_t *thread_heap;
extern shoal_heap_t heap_empty;
extern shoal_page_t page_empty;
/* A diagnostic that interposes keeps thread_heap at heap_empty, so that
 * every call leaves the fast paths, and sets the thread's real heap aside
 * here meanwhile; thread exit and statistics look for it here too. */
extern _Thread_local shoal_heap_t *thread_heap_parked;
/* This thread's heap whether or not a diagnostic set it aside. */
static inline shoal_heap_t *thread_heap_own(void) {
  return thread_heap_parked != NULL ? thread_heap_parked : thread_heap;
}
extern _Atomic(int64_t) others_purge_at_ms; /* a dead thread's heap is due for purge then */
/* The calling thread's heap, new or adopted; process_init must have run. */
shoal_heap_t *heap_get_or_create(void);
/* The heap a free should count in: this thread's, made now if it has none
 * yet; heap_empty once the thread's exit hook ran, or out of memory. */
shoal_heap_t *heap_of_freeing_thread(void);
void *heap_malloc_slow(shoal_heap_t *heap, size_t size);
void *heap_malloc_slow_exact(shoal_heap_t *heap, size_t size); /* no borrowing: aligned */
void *heap_malloc_medium(shoal_heap_t *heap, size_t size, bool may_borrow);
/* calloc beyond LARGE_MAX: zeroed (fresh memory as it is, a cached block
 * cleared), and a fresh one not asked to use huge pages. */
void *heap_calloc_huge(shoal_heap_t *heap, size_t size);
void *heap_malloc_large(shoal_heap_t *heap, size_t size, size_t alignment);
void heap_queue_push(shoal_heap_t *heap, shoal_page_t *page);
void heap_queue_push_back(shoal_heap_t *heap, shoal_page_t *page);
/* The first page after a class's spent first one that has a block
 * at hand (up to QUEUE_ROTATE_TRIES pages), now first; NULL: none. The
 * owner, without the slow lock. */
shoal_page_t *heap_queue_rotate(shoal_heap_t *heap, uint8_t size_class);
void heap_page_retire(shoal_heap_t *heap, shoal_page_t *page);
void heap_drain_notified(shoal_heap_t *heap);
/* The medium pool (heap.c, over pool.c): the plain requests that
 * SHOAL_MEDIUM_POOL gives it (POOL_UPPER, above). heap_pool_malloc: NULL
 * with errno ENOMEM; heap_pool_free and heap_pool_grow: the owner's free
 * (of a block of the request class its header gave) and in-place growth of
 * a block whose header checked (false: copy). */
static inline bool size_is_pooled(const shoal_heap_t *heap, size_t size) {
  if (size <= DIRECT_MAX || size > POOL_MAX) return false;
  long mode = option(SHOAL_OPTION_MEDIUM_POOL);
  return mode == POOL_ALL || (mode == POOL_UPPER && size > POOL_UPPER_MIN &&
                              !atomic_load_explicit(&heap->pool_shunned, memory_order_relaxed));
}
void *heap_pool_malloc(shoal_heap_t *heap, size_t size);
void heap_pool_free(shoal_heap_t *heap, shoal_page_t *page, void *p, uint8_t size_class);
bool heap_pool_grow(shoal_heap_t *heap, shoal_page_t *page, void *p, size_t size);
/* Another heap's block, freed by this heap's thread: into the outbox, sent
 * home with others of its page; heap_outbox_flush sends them all now. */
void heap_outbox_push(shoal_heap_t *heap, shoal_page_t *page, shoal_block_t *block);
void heap_outbox_flush(shoal_heap_t *heap);
/* Every block in the heap's mailbox back on its page: the owner onto the
 * page's own list where it may, anyone else onto its remote list. */
void heap_mailbox_deliver(shoal_heap_t *heap);
void heap_class_cache_flush(shoal_heap_t *heap);
void heap_collect(shoal_heap_t *heap, bool force);
void heap_fold_counters(shoal_heap_t *heap);
void heap_abandon(shoal_heap_t *heap);
void heap_service_abandoned(shoal_heap_t *heap);
/* A heap that page_push_remote or page_notify returned: its thread is gone,
 * or idle with parked pages piling up; serve it, if nobody else is. */
void heap_serve(shoal_heap_t *heap);
/* The owner around its slow paths (nested entries count once). It waits
 * only while a thread serving its idle heap finishes; other threads only
 * try the lock (heap.c, heap_hold_other), so the owner, the one thread
 * that may wait on it, has nobody to wake when it lets go. (A thread
 * servicing a dead thread's heap is its owner meanwhile: the heap's state
 * lets one at a time.) */
static inline void heap_slow_enter(shoal_heap_t *heap) {
  if (heap->slow_depth++ == 0) lock_acquire_plain(&heap->slow_lock);
}
static inline void heap_slow_exit(shoal_heap_t *heap) {
  if (--heap->slow_depth == 0) lock_release_unwaited(&heap->slow_lock);
}
/* fork: no thread serves another's heap across it (the child would find
 * that heap half changed). */
void heap_fork_prepare(void);
void heap_fork_after(void);
void heap_fork_child(shoal_heap_t *survivor);
/* A parked page, off its list (full or reparked) and unparked. */
void heap_unpark_listed(shoal_heap_t *heap, shoal_page_t *page);
void heap_release_borrowed(shoal_heap_t *heap, shoal_page_t *page);
void heap_service_all_abandoned(void);
void heap_thread_exit(void *heap);

/* ---- large.c: huge blocks, each a segment of its own ---- */
void *huge_alloc(size_t size, size_t alignment, bool zero);
void huge_free(shoal_segment_t *segment);
void *huge_realloc(shoal_segment_t *segment, size_t new_size);
size_t huge_usable_size(const shoal_segment_t *segment, const void *p);
void huge_cache_trim(bool force);

/* ---- arena.c ---- */
extern shoal_lock_t arena_lock;
extern _Atomic(int64_t) arena_purge_at_ms;
shoal_segment_t *arena_segment_acquire(void);
void arena_segment_release(shoal_segment_t *segment);
bool arena_has_cached(void); /* an empty segment waits in the cache (a hint) */
shoal_heap_t *arena_heap_new_or_adopt(bool *adopted);
void arena_heap_abandoned(shoal_heap_t *heap);
/* A dead thread's heap, now HEAP_SERVICING for the caller, who sets it
 * HEAP_ABANDONED again (it stays adoptable); NULL when there is none. */
shoal_heap_t *arena_abandoned_to_service(void);
void arena_for_each_heap(void (*visit)(shoal_heap_t *heap, void *context), void *context);
void arena_register_for_fork(void);
void arena_fork_child(shoal_heap_t *survivor);
void arena_cache_trim(bool force);
size_t arena_heap_count(size_t *abandoned);
size_t arena_heaps_live(void); /* heaps of running threads, about: read without the lock */
/* The purge delay in force: SHOAL_PURGE_DELAY, lengthened while memory
 * given back is soon wanted again (arena.c says how). Every purge and trim
 * schedules by it. */
long purge_delay(void);
/* `delays` of SHOAL_PURGE_DELAY, or the delay in force if longer: the
 * long waits (a dead heap warm for an adopter, empty segments in the
 * arena) keep their length when pacing lengthens the delay, not ten times
 * it (mstress t=64 held half as much again). */
long purge_wait(long delays);
/* Slices purged for good at `purged_ms` are taken again now: a refault. */
void purge_note_refault(int64_t purged_ms);
/* A purge for good happens now: delays that passed with no refault
 * shorten the delay again. */
void purge_note_purge(int64_t now);

/* ---- init.c: the core's start-up, and its calls up ----
 * process_init (from the layer that takes the first call) reads the
 * options, makes the free key, registers the locks, the thread-exit key and
 * the fork handlers. The core calls the layers above only through these
 * hooks, which they fill in at their own start: a thread about to lose its
 * heap, and the child of a fork. NULL: nobody listens. */
typedef struct core_hooks_s {
  void (*thread_exit)(void); /* called by heap.c */
  void (*fork_child)(void);  /* called by init.c */
} core_hooks_t;
extern core_hooks_t core_hooks; /* in heap.c, the lower of the two */
/* Once per process, `above` (may be NULL) inside, before any heap exists;
 * concurrent callers wait for the first. */
void process_init(void (*above)(void));

/* ---- alloc.c: errors on frees ---- */
void report_bad_pointer(const char *function, const void *p, const char *kind);

/* ---- stats.c ----
 * SHOAL_STATISTICS (CMake option, default on) keeps the per-heap counters.
 * Off, counter_add is empty and the fast paths lose their one add and store;
 * shoal_stats() then reads the counted figures as 0. */
#ifndef SHOAL_STATISTICS
#define SHOAL_STATISTICS 1
#endif

/* A count only its owner writes, read by any thread: no locked add. */
static inline void owner_count_add(_Atomic(size_t) *counter, size_t amount) {
  atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + amount,
                        memory_order_relaxed);
}

/* The pages a heap holds, about: others may give its pages back, so what
 * it gave can exceed what it took. */
static inline size_t heap_pages_held(const shoal_heap_t *heap) {
  size_t taken = atomic_load_explicit(&heap->pages_taken, memory_order_relaxed);
  size_t given = atomic_load_explicit(&heap->pages_given, memory_order_relaxed);
  return taken > given ? taken - given : 0;
}

/* Only the heap's own thread adds, so a relaxed load and store suffice
 * (no locked instruction); the atomic type lets other threads read it. */
static inline void counter_add(_Atomic(size_t) *counter, size_t amount) {
#if SHOAL_STATISTICS
  atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + amount,
                        memory_order_relaxed);
#else
  (void)counter;
  (void)amount;
#endif
}

/* malloc counts in the page it pops from, free not at all (its --used is
 * enough); the counts reach the heap's counters, which other threads read,
 * when the page goes back to its segment, when its class takes the slow
 * path, and when the heap is collected, abandoned or asked for statistics
 * by its own thread. Measured: a count on free, on a page line that a
 * random-order free has just missed, cost 9 % on smallobj; on malloc,
 * whose page stays in cache, nothing measurable. */
static inline void page_count(uint64_t *unfolded) {
#if SHOAL_STATISTICS
  ++*unfolded;
#else
  (void)unfolded;
#endif
}

static inline void page_fold_counters(shoal_heap_t *heap, shoal_page_t *page) {
#if SHOAL_STATISTICS
  int64_t used_change = (int32_t)(page->used - page->used_at_fold);
  if (used_change == 0 && page->unfolded_allocs == 0) return;
  counter_add(&heap->counters.allocated[page->size_class], page->unfolded_allocs);
  counter_add(&heap->counters.freed[page->size_class],
              (size_t)((int64_t)page->unfolded_allocs - used_change));
  page->used_at_fold = page->used;
  page->unfolded_allocs = 0;
#else
  (void)heap;
  (void)page;
#endif
}

/* The class's cache has been given blocks (classes_cached). */
static inline void class_cache_mark(shoal_heap_t *heap, uint8_t size_class) {
  heap->classes_cached[size_class / 64] |= (uint64_t)1 << (size_class % 64);
}
static inline bool class_cache_marked(const shoal_heap_t *heap, uint8_t size_class) {
  return (heap->classes_cached[size_class / 64] >> (size_class % 64)) & 1;
}

/* Hand out the page's next free block (the page has one): the pop every
 * malloc path ends in. The block after it is fetched now, not when the next
 * malloc of the class needs its link: a block freed a while ago, or by
 * another thread, is out of cache, and the pop that reads it stalls on the
 * miss (parallel, 8 threads: -12 % time; rptest -3 to -5 %, mstress -4 %).
 * A prefetch never faults, so the end of the list (NULL) needs no test. */
static inline void *page_pop(shoal_heap_t *heap, shoal_page_t *page) {
  (void)heap;
  shoal_block_t *block = page->free;
  AUDIT(block->key == free_key, "a block handed out is not free", block, page->size_class, 0);
  shoal_block_t *next = block->next;
  page->free = next;
  __builtin_prefetch(next, 1, 3);
  page->used++;
  block->key = 0;
  page_count(&page->unfolded_allocs);
  return block;
}
/* Hand out the page's next never-used block (it has one): medium blocks
 * are a few to an OS page or span several, so page_extend would thread one
 * or two at a time, each through the slow path (rptest: 5 M of 30 M
 * mallocs). Past `capacity` no free is taken for a block (the block test),
 * so the block needs no key until now. */
static inline void *page_bump(shoal_page_t *page) {
  shoal_block_t *block = (shoal_block_t *)(page->start + (size_t)page->capacity * page->block_size);
  page->capacity++;
  page_publish_extent(page);
  page->used++;
  block->key = 0;
  page_count(&page->unfolded_allocs);
  return block;
}
extern _Atomic(size_t) stat_segments;    /* arena.c */
extern _Atomic(size_t) stat_huge_blocks; /* large.c */
extern heap_counters_t orphan_counters;  /* alloc.c: frees by threads without a heap */
/* The figures of shoal_stats_get; the heaps' counters summed. */
void stats_fill(shoal_stats_t *stats);
/* shoal_collect: this thread's heap collected, dead threads' serviced, the
 * caches trimmed (force: emptied and purged at once). */
void stats_collect(bool force);

#endif /* SHOAL_INTERNAL_H */
