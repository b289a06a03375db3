/* check.c — checked mode (SHOAL_CHECK=1), after FastMM's FullDebugMode.
 *
 * Every block gets a header and guards around what the program sees:
 *
 *   start                                            user
 *   | offset^secret | guard.. | size | magic | guard16 | data (size) | guard.. |
 *
 * The first word leads from the core's block start to the program's
 * address, so a pointer anywhere in the block is recognised; the magic
 * word holds the address and the state. Every block also has a record in
 * the table (leaks.c) with its size and where it was allocated and freed.
 * New data is filled with NEW_FILL; freed data with FREED_FILL, then the
 * block waits in a quarantine (SHOAL_CHECK_QUARANTINE bytes, oldest out
 * first) before the core may reuse it: a write after free is found when it
 * leaves, a double free while it waits. Guards are checked at free, at
 * realloc, when leaving quarantine, and by shoal_check_heap().
 *
 * Blocks no access may touch, after the hardened allocators' guard pages: a
 * freed large or huge block (a core block beyond MEDIUM_MAX, whole OS pages
 * holding nothing else) waits in the quarantine with its pages made
 * inaccessible, and malloc(0) returns an address in a range reserved
 * inaccessible. A read or write there faults, and the fault handler names
 * the block (check_fault); the checks never read such a block.
 *
 * Each fault is one line naming the kind, the call, the block, where it was
 * allocated (and freed) and where the faulty call came from; then abort, or
 * with SHOAL_ABORT_ON_ERROR=0 the call is ignored (the block kept). A fault
 * of the hardware cannot be ignored: the access would only fault again.
 *
 *   check_free    find_block (hidden_user: no read of a protected block),
 *                 inaccessible_reserve for a large block, the record marked,
 *                 quarantine_add: the entry published, then the pages
 *                 protected, under the quarantine lock
 *   release       the record removed, the pages made accessible, the entry
 *                 cleared, then the core's free (which writes in the block)
 *   check_fault   (signal handler) inaccessible_find, lock-free, then the
 *                 report and abort */
#include "diag/diag.h"

#include <errno.h>
#include <string.h>

#define FRONT_BYTES        48 /* offset word, size, magic, 16 guard bytes, 8 spare */
#define BACK_BYTES         16 /* at least this many guard bytes after the data */
#define BACK_MAX           4096
#define GUARD_FILL         0xFD
#define NEW_FILL           0xAA
#define FREED_FILL         0xDD
#define MAGIC_LIVE         0x4C49
#define MAGIC_FREED        0x4644
#define QUARANTINE_SLOTS   ((size_t)1 << 16)
#define INACCESSIBLE_SLOTS (1u << 15) /* entries: freed large blocks and malloc(0)'s */
/* At most this many entries held by quarantined blocks: a protected range
 * may split a mapping in three, and the kernel allows 65530 mappings. */
#define INACCESSIBLE_QUARANTINED 8192
#define ZERO_SPACING             16 /* between malloc(0)'s addresses: a touch goes to the nearest */

static uintptr_t check_secret;

typedef struct header_s {
  size_t size;
  uintptr_t magic;
} header_t;

static inline header_t *header_of(uint8_t *user) {
  return (header_t *)(user - 32);
}

static inline uintptr_t magic_for(const uint8_t *user, uintptr_t state) {
  return (uintptr_t)user ^ check_secret ^ state;
}

/* ---- reports ---- */

static void report_line(const char *kind, const char *function, const void *p,
                        const block_record_t *record, const char *detail, const site_t *site,
                        const char *ending) {
  char allocated[1024] = "", freed[1024] = "", called[1024];
  if (record != NULL) {
    size_t n = (size_t)text_format(allocated, sizeof allocated, "; allocated at ");
    site_format(&record->allocated_at, allocated + n, sizeof allocated - n);
    if (record->state == RECORD_QUARANTINED) {
      n = (size_t)text_format(freed, sizeof freed, "; freed at ");
      site_format(&record->freed_at, freed + n, sizeof freed - n);
    }
  }
  site_format(site, called, sizeof called);
  function = function_as_called(function, site->entry);
  output_error_line("shoal: %s: %s(%p)%s%s%s; called at %s%s", kind, function, p, detail, allocated,
                    freed, called, ending);
}

static void report(const char *kind, const char *function, const void *p,
                   const block_record_t *record, const char *detail, const site_t *site) {
  bool abort_now = option(SHOAL_OPTION_ABORT_ON_ERROR) != 0;
  if (strstr(kind, "overrun") != NULL || strstr(kind, "underrun") != NULL ||
      strcmp(kind, "write after free") == 0)
    frame_names_plain("the heap may be damaged");
  report_line(kind, function, p, record, detail, site, abort_now ? "" : " (ignored)");
  if (abort_now) os_abort();
}

/* The first byte in [from, to) that is not `fill`, or NULL. */
static const uint8_t *first_changed(const uint8_t *from, const uint8_t *to, uint8_t fill) {
  for (; from < to; from++)
    if (*from != fill) return from;
  return NULL;
}

/* ---- a block's parts ---- */

typedef struct checked_block_s {
  uint8_t *start, *user;
  size_t usable; /* of the core block, from start */
  record_shard_t *shard;
  block_record_t *record;
} checked_block_t;

static const uint8_t *back_guard_end(const checked_block_t *block, size_t size) {
  const uint8_t *end = block->start + block->usable;
  const uint8_t *data_end = block->user + size;
  return end - data_end > BACK_MAX ? data_end + BACK_MAX : end;
}

/* Guards intact? Reports the first damage found (under the shard lock). */
static bool guards_intact(const checked_block_t *block, const char *function, const site_t *site) {
  char detail[160];
  size_t size = block->record->size;
  header_t *header = header_of(block->user);
  const uint8_t *bad = first_changed(block->user - 16, block->user, GUARD_FILL);
  if (bad == NULL) bad = first_changed(block->start + 8, (uint8_t *)header, GUARD_FILL);
  if (bad != NULL || header->size != size) {
    if (bad == NULL) bad = (const uint8_t *)header;
    text_format(detail, sizeof detail,
                ": byte %td before the start of a %zu-byte block was overwritten",
                block->user - bad, size);
    report("buffer underrun", function, block->user, block->record, detail, site);
    return false;
  }
  bad = first_changed(block->user + size, back_guard_end(block, size), GUARD_FILL);
  if (bad != NULL) {
    text_format(detail, sizeof detail,
                ": byte %td of a %zu-byte block (%td past its end) was overwritten",
                bad - block->user, size, bad - (block->user + size) + 1);
    report("buffer overrun", function, block->user, block->record, detail, site);
    return false;
  }
  return true;
}

/* ---- the table of inaccessible blocks ----
 * The fault handler runs in any thread, perhaps while that thread holds one
 * of our locks: it reads this table only, without a lock. Entries change
 * under the quarantine lock, each as a seqlock (its sequence odd while it
 * changes). An entry is published before its pages are protected and
 * cleared after they are made accessible again: a fault on a protected page
 * always finds its entry. malloc(0)'s block owns the address of its entry
 * in zero_space, so two live ones never share an address. */

typedef struct inaccessible_view_s {
  uintptr_t start; /* the range no access may touch; 0: the entry is unused */
  size_t bytes;
  uintptr_t user; /* the block's address, as the program has it */
  size_t size;    /* the size it asked for */
  bool freed;
  site_t allocated_at, freed_at;
} inaccessible_view_t;

typedef struct inaccessible_entry_s {
  _Atomic(uint32_t) sequence; /* odd while the entry changes */
  uint32_t next_unused;       /* (quarantine lock) the next unused entry's id */
  _Atomic(uintptr_t) start, bytes, user, size, freed;
  _Atomic(uintptr_t) frames[2 * SITE_FRAMES]; /* allocated at, then freed at */
} inaccessible_entry_t;

static shoal_lock_t quarantine_lock;        /* the quarantine, and every write to this table */
static inaccessible_entry_t *inaccessible;  /* INACCESSIBLE_SLOTS entries; id = index + 1 */
static _Atomic(uint32_t) inaccessible_used; /* ids handed out so far: what a lookup scans */
static uint32_t inaccessible_unused;        /* (quarantine lock) a free list of ids, 0: empty */
static uint8_t *zero_space; /* malloc(0)'s addresses, inaccessible: id's at id * ZERO_SPACING */
static const inaccessible_view_t unused_view;

/* Under the quarantine lock, the one writer: entry `id` becomes `view`. */
static void inaccessible_write(uint32_t id, const inaccessible_view_t *view) {
  inaccessible_entry_t *entry = &inaccessible[id - 1];
  uint32_t sequence = atomic_load_explicit(&entry->sequence, memory_order_relaxed);
  atomic_store_explicit(&entry->sequence, sequence + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&entry->start, view->start, memory_order_relaxed);
  atomic_store_explicit(&entry->bytes, view->bytes, memory_order_relaxed);
  atomic_store_explicit(&entry->user, view->user, memory_order_relaxed);
  atomic_store_explicit(&entry->size, view->size, memory_order_relaxed);
  atomic_store_explicit(&entry->freed, view->freed, memory_order_relaxed);
  for (size_t i = 0; i < SITE_FRAMES; i++) {
    atomic_store_explicit(&entry->frames[i], (uintptr_t)view->allocated_at.frames[i],
                          memory_order_relaxed);
    atomic_store_explicit(&entry->frames[SITE_FRAMES + i], (uintptr_t)view->freed_at.frames[i],
                          memory_order_relaxed);
  }
  atomic_store_explicit(&entry->sequence, sequence + 2, memory_order_release);
}

/* A consistent copy of entry `id`, without a lock; false when the entry is
 * unused or kept changing while we read. */
static bool inaccessible_read(uint32_t id, inaccessible_view_t *view) {
  inaccessible_entry_t *entry = &inaccessible[id - 1];
  for (int attempt = 0; attempt < 64; attempt++) {
    uint32_t before = atomic_load_explicit(&entry->sequence, memory_order_acquire);
    if ((before & 1) != 0) continue;
    view->start = atomic_load_explicit(&entry->start, memory_order_relaxed);
    view->bytes = atomic_load_explicit(&entry->bytes, memory_order_relaxed);
    view->user = atomic_load_explicit(&entry->user, memory_order_relaxed);
    view->size = atomic_load_explicit(&entry->size, memory_order_relaxed);
    view->freed = atomic_load_explicit(&entry->freed, memory_order_relaxed) != 0;
    for (size_t i = 0; i < SITE_FRAMES; i++) {
      view->allocated_at.frames[i] =
          (const void *)atomic_load_explicit(&entry->frames[i], memory_order_relaxed);
      view->freed_at.frames[i] =
          (const void *)atomic_load_explicit(&entry->frames[SITE_FRAMES + i], memory_order_relaxed);
    }
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&entry->sequence, memory_order_relaxed) == before)
      return view->start != 0;
  }
  return false;
}

static bool zero_space_holds(const void *p) {
  uintptr_t offset = (uintptr_t)p - (uintptr_t)zero_space;
  return zero_space != NULL && offset < SEGMENT_SIZE - SLICE_SIZE;
}

/* The entry whose malloc(0) address is nearest to p (in zero_space). */
static uint32_t zero_id_of(const void *p) {
  return (uint32_t)(((uintptr_t)p - (uintptr_t)zero_space + ZERO_SPACING / 2) / ZERO_SPACING);
}

static uint8_t *zero_address(uint32_t id) {
  return zero_space + (size_t)id * ZERO_SPACING;
}

static bool zero_id_was_used(uint32_t id) {
  return id != 0 && id <= atomic_load_explicit(&inaccessible_used, memory_order_acquire);
}

/* The entry whose range holds `address`, without a lock (the fault
 * handler's way): its id and a copy, or 0. */
static uint32_t inaccessible_find(uintptr_t address, inaccessible_view_t *view) {
  if (zero_space_holds((const void *)address)) { /* the entry of that malloc(0) address */
    uint32_t id = zero_id_of((const void *)address);
    bool zero = zero_id_was_used(id) && inaccessible_read(id, view) &&
                view->user == (uintptr_t)zero_address(id); /* not a large block's now */
    return zero ? id : 0;
  }
  uint32_t used =
      inaccessible == NULL ? 0 : atomic_load_explicit(&inaccessible_used, memory_order_acquire);
  for (uint32_t id = 1; id <= used; id++)
    if (inaccessible_read(id, view) && address - view->start < view->bytes) return id;
  return 0;
}

/* Under the quarantine lock: an unused entry's id, or 0 when all are used. */
static uint32_t inaccessible_take(void) {
  uint32_t id = inaccessible_unused;
  if (id != 0) {
    inaccessible_unused = inaccessible[id - 1].next_unused;
    return id;
  }
  uint32_t used = atomic_load_explicit(&inaccessible_used, memory_order_relaxed);
  if (inaccessible == NULL || used == INACCESSIBLE_SLOTS) return 0;
  atomic_store_explicit(&inaccessible_used, used + 1, memory_order_release);
  return used + 1;
}

/* Under the quarantine lock: the entry is cleared and can be taken again. */
static void inaccessible_put(uint32_t id) {
  inaccessible_write(id, &unused_view);
  inaccessible[id - 1].next_unused = inaccessible_unused;
  inaccessible_unused = id;
}

/* The address of an inaccessible (quarantined) block that holds p, which is
 * in the core block at start, found without reading the block; NULL when
 * it is not one. A block the program still has is accessible. */
static uint8_t *hidden_user(const void *p, const uint8_t *start, size_t usable) {
  if (usable <= MEDIUM_MAX) return NULL;
  record_shard_t *shard = records_lock((uintptr_t)p);
  const block_record_t *record = records_find(shard, (uintptr_t)p);
  bool known = record != NULL, hidden = known && record->inaccessible != 0;
  records_unlock(shard);
  if (hidden) return (uint8_t *)p;
  inaccessible_view_t view;
  if (known || inaccessible_find((uintptr_t)start, &view) == 0) return NULL;
  return (uint8_t *)view.user; /* p is inside a hidden block */
}

/* The program's address of the block that holds p, or NULL after reporting
 * a pointer that is in none. A malloc(0) block has no core block (start). */
static uint8_t *block_user(const void *p, const char *function, const site_t *site, bool free_call,
                           checked_block_t *block) {
  block->start = NULL;
  block->usable = 0;
  if (zero_space_holds(p)) {
    if (zero_id_was_used(zero_id_of(p))) return zero_address(zero_id_of(p));
    report("invalid pointer", function, p, NULL, ": not a block shoal allocated", site);
    return NULL;
  }
  uint8_t *start = block_containing(p, &block->usable);
  if (start == NULL) {
    report("invalid pointer", function, p, NULL, ": not a block shoal allocated", site);
    return NULL;
  }
  block->start = start;
  uint8_t *hidden = hidden_user(p, start, block->usable);
  if (hidden != NULL) return hidden;
  if (((shoal_block_t *)start)->key == free_key) {
    report(free_call ? "double free" : "use after free", function, p, NULL,
           ": the block was already freed and has left the quarantine", site);
    return NULL;
  }
  size_t offset = *(uintptr_t *)start ^ check_secret;
  if (offset < FRONT_BYTES || offset + BACK_BYTES > block->usable || (offset & 15) != 0) {
    report("invalid pointer", function, p, NULL, ": not a block shoal allocated", site);
    return NULL;
  }
  return start + offset;
}

/* Find the block p designates. On success its shard is locked and the
 * record found; on a fault, report it and return false, nothing locked.
 * A freed block is a fault for every caller but the quarantine. */
static bool find_block(const void *p, const char *function, const site_t *site, bool free_call,
                       checked_block_t *block) {
  char detail[160] = "";
  block->user = block_user(p, function, site, free_call, block);
  if (block->user == NULL) return false;
  block->shard = records_lock((uintptr_t)block->user);
  block->record = records_find(block->shard, (uintptr_t)block->user);
  const block_record_t *record = block->record;
  if (record == NULL) {
    records_unlock(block->shard);
    if (block->start == NULL) /* malloc(0)'s address, its record gone */
      report(free_call ? "double free" : "use after free", function, p, NULL,
             ": the 0-byte block was already freed and has left the quarantine", site);
    else
      report("invalid pointer", function, p, NULL, ": not a block shoal allocated", site);
    return false;
  }
  /* These two leave the heap as it was: reported with the shard unlocked
   * (from a copy of the record), so that frames get their files and lines. */
  if (p != block->user) {
    bool misaligned = ((uintptr_t)p & 15) != 0;
    text_format(detail, sizeof detail, ": %s%td bytes into a %zu-byte block at %p",
                misaligned ? "not 16-byte aligned, " : "points ", (const uint8_t *)p - block->user,
                record->size, (void *)block->user);
    block_record_t copy = *record;
    records_unlock(block->shard);
    report(misaligned ? "misaligned pointer" : "pointer inside a block", function, p, &copy, detail,
           site);
    return false;
  }
  if (record->state == RECORD_QUARANTINED) {
    text_format(detail, sizeof detail, ": the %zu-byte block was already freed", record->size);
    block_record_t copy = *record;
    records_unlock(block->shard);
    report(free_call ? "double free" : "use after free", function, p, &copy, detail, site);
    return false;
  }
  if (record->inaccessible != 0) return true; /* malloc(0)'s: no header, no guards */
  bool intact = header_of(block->user)->magic == magic_for(block->user, MAGIC_LIVE);
  if (!intact)
    report("buffer underrun", function, p, record, ": the block's header was overwritten", site);
  else
    intact = guards_intact(block, function, site);
  if (!intact) records_unlock(block->shard);
  return intact;
}

/* ---- the quarantine ---- */

typedef struct quarantined_s {
  uint8_t *user;
  size_t bytes;
  bool inaccessible; /* it holds an entry of the table */
} quarantined_t;

static quarantined_t *quarantine; /* a ring of QUARANTINE_SLOTS */
static size_t quarantine_head, quarantine_count, quarantine_bytes;
static size_t quarantine_inaccessible; /* of them, those holding an entry */

static size_t quarantine_limit(void) {
  return quarantine == NULL ? 0 : (size_t)option(SHOAL_OPTION_CHECK_QUARANTINE);
}

/* ---- inaccessible blocks: their entries and pages ---- */

/* An entry for a large or huge block about to be freed, when the quarantine
 * can keep it inaccessible: whole OS pages holding nothing else, no more
 * than the quarantine holds. 0: it waits accessible, filled. */
static uint32_t inaccessible_reserve(const void *p) {
  size_t usable;
  const uint8_t *start = block_containing(p, &usable);
  if (start == NULL || usable <= MEDIUM_MAX || usable > quarantine_limit() ||
      (((uintptr_t)start | usable) & (os_page_size() - 1)) != 0)
    return 0;
  diag_lock(&quarantine_lock);
  uint32_t id = quarantine_inaccessible < INACCESSIBLE_QUARANTINED ? inaccessible_take() : 0;
  diag_unlock(&quarantine_lock);
  return id;
}

static void inaccessible_unreserve(uint32_t id) {
  if (id == 0) return;
  diag_lock(&quarantine_lock);
  inaccessible_put(id);
  diag_unlock(&quarantine_lock);
}

/* A block leaves the quarantine: its pages (start: none for malloc(0)'s)
 * accessible again, before the core writes its free mark in them, then its
 * entry cleared. False when the kernel refused: the block stays as it is. */
static bool inaccessible_end(uint32_t id, uint8_t *start, size_t bytes) {
  if (start != NULL && !os_protect(start, bytes, true)) return false;
  inaccessible_unreserve(id);
  return true;
}

/* malloc(0): an address in zero_space, the block's own while it lives and
 * waits in the quarantine; any touch faults. NULL when no entry is left
 * (the caller then makes a plain 0-byte block). */
static void *zero_alloc(const site_t *site) {
  if (zero_space == NULL) return NULL;
  diag_lock(&quarantine_lock);
  uint32_t id = inaccessible_take();
  uint8_t *user = id == 0 ? NULL : zero_address(id);
  if (id != 0) {
    inaccessible_view_t view = {.start = (uintptr_t)user - ZERO_SPACING / 2,
                                .bytes = ZERO_SPACING,
                                .user = (uintptr_t)user,
                                .allocated_at = *site};
    inaccessible_write(id, &view);
  }
  diag_unlock(&quarantine_lock);
  if (user == NULL) return NULL;
  record_shard_t *shard = records_lock((uintptr_t)user);
  block_record_t *record = records_add(shard, (uintptr_t)user);
  if (record != NULL) {
    record->weight = 1;
    record->state = RECORD_LIVE;
    record->inaccessible = id;
    record->allocated_at = *site;
  }
  records_unlock(shard);
  if (record == NULL) inaccessible_unreserve(id);
  return record == NULL ? NULL : user;
}

/* ---- the quarantine ---- */

/* A quarantined block: its data must still read FREED_FILL, its guards be
 * whole. Reports the first damage found (under the shard lock). */
static bool freed_block_intact(const checked_block_t *block, const char *function,
                               const site_t *site) {
  size_t size = block->record->size;
  const uint8_t *bad = first_changed(block->user, block->user + size, FREED_FILL);
  if (bad == NULL) return guards_intact(block, function, site);
  char detail[160];
  text_format(detail, sizeof detail,
              ": byte %td of the %zu-byte block was written after it was freed", bad - block->user,
              size);
  report("write after free", function, block->user, block->record, detail, site);
  return false;
}

/* A block leaves the quarantine for the core, checked once more; an
 * inaccessible one cannot have changed, and becomes accessible first. */
static void release(uint8_t *user, const site_t *site) {
  checked_block_t block;
  bool zero = zero_space_holds(user);
  block.user = user;
  block.usable = 0;
  block.start = zero ? NULL : block_containing(user, &block.usable);
  block.shard = records_lock((uintptr_t)user);
  block.record = records_find(block.shard, (uintptr_t)user);
  if (block.record == NULL || (block.start == NULL && !zero)) { /* cannot happen: keep it */
    records_unlock(block.shard);
    return;
  }
  uint32_t id = block.record->inaccessible;
  if (id == 0) freed_block_intact(&block, "free", site);
  records_remove(block.shard, block.record);
  records_unlock(block.shard);
  if (id != 0 && !inaccessible_end(id, block.start, block.usable)) return;
  /* Damage was reported; with abort off the block is reused all the same,
   * its guards and fill rewritten by the next check_malloc. */
  if (block.start != NULL) free_fast(block.start, 0, site->frames[0]);
}

/* Under the quarantine lock: take out the oldest blocks while it holds more
 * than `keep` bytes, has no free slot or holds too many entries; the caller
 * releases them. */
static size_t take_oldest(uint8_t **leaving, size_t most, size_t keep) {
  size_t count = 0;
  while (count < most && quarantine_count > 0 &&
         (quarantine_bytes > keep || quarantine_count == QUARANTINE_SLOTS ||
          quarantine_inaccessible > INACCESSIBLE_QUARANTINED)) {
    quarantined_t *oldest = &quarantine[quarantine_head];
    leaving[count++] = oldest->user;
    quarantine_bytes -= oldest->bytes;
    quarantine_inaccessible -= oldest->inaccessible;
    quarantine_head = (quarantine_head + 1) % QUARANTINE_SLOTS;
    quarantine_count--;
  }
  return count;
}

/* A freed block joins the quarantine. One with an entry (id) becomes
 * inaccessible: the entry published, then its pages protected, under the
 * lock, so that no release comes between. */
static void quarantine_add(uint8_t *user, size_t bytes, uint32_t id,
                           const inaccessible_view_t *view, const site_t *site) {
  size_t limit = quarantine_limit();
  uint8_t *leaving[8];
  size_t count;
  diag_lock(&quarantine_lock);
  if (limit > 0) {
    if (id != 0) {
      inaccessible_write(id, view);
      /* Refused (the kernel's limit of mappings): it waits accessible, unchecked. */
      if (!zero_space_holds(user)) os_protect((void *)view->start, view->bytes, false);
      quarantine_inaccessible++;
    }
    quarantine[(quarantine_head + quarantine_count) % QUARANTINE_SLOTS] =
        (quarantined_t){user, bytes, id != 0};
    quarantine_count++;
    quarantine_bytes += bytes;
    user = NULL;
  }
  count = take_oldest(leaving, 8, limit);
  diag_unlock(&quarantine_lock);
  if (user != NULL) release(user, site);
  for (size_t i = 0; i < count; i++) release(leaving[i], site);
}

void check_quarantine_empty(const site_t *site) {
  for (;;) {
    uint8_t *leaving[64];
    size_t count;
    diag_lock(&quarantine_lock);
    count = take_oldest(leaving, 64, 0);
    diag_unlock(&quarantine_lock);
    if (count == 0) return;
    for (size_t i = 0; i < count; i++) release(leaving[i], site);
  }
}

/* ---- faults: a touch of an inaccessible block ---- */

/* What the line says of the touched byte, `offset` from the block's start. */
static const char *fault_detail(char *detail, size_t capacity, ptrdiff_t offset,
                                const inaccessible_view_t *view) {
  const char *zero = view->size == 0 ? " (malloc(0)'s pointer)" : "";
  if (!view->freed) {
    text_format(detail, capacity, ": byte %td of a 0-byte block (malloc(0)'s pointer has no bytes)",
                offset);
    return offset < 0 ? "buffer underrun" : "buffer overrun";
  }
  if (offset < 0)
    text_format(detail, capacity, ": byte %td before the start of a freed %zu-byte block%s",
                -offset, view->size, zero);
  else if ((size_t)offset >= view->size && view->size != 0)
    text_format(detail, capacity, ": byte %td of a freed %zu-byte block (%td past its end)", offset,
                view->size, offset - (ptrdiff_t)view->size + 1);
  else
    text_format(detail, capacity, ": byte %td of a freed %zu-byte block%s", offset, view->size,
                zero);
  return "use after free";
}

/* The record report_line wants, from an entry's copy. */
static void record_of_view(const inaccessible_view_t *view, block_record_t *record) {
  memset(record, 0, sizeof *record);
  record->size = view->size;
  record->state = view->freed ? RECORD_QUARANTINED : RECORD_LIVE;
  record->allocated_at = view->allocated_at;
  record->freed_at = view->freed_at;
}

/* The fault handler (os_catch_faults), in the faulting thread: when the
 * address is in an inaccessible block, report it and abort; else return.
 * Async-signal-safe as far as it must be: the table is read without a
 * lock, nothing is allocated (text_format never does).
 * Naming the call sites takes the loader's lock (dladdr; recursive), and
 * the unwinder may take its own, which the interrupted code holds only
 * when it is the loader or the unwinder: neither touches the program's
 * blocks. */
static void check_fault(const void *address, const char *access, const void *instruction) {
  inaccessible_view_t view;
  uint32_t id = inaccessible_find((uintptr_t)address, &view);
  if (id == 0 && !(zero_space_holds(address) && zero_id_was_used(zero_id_of(address))))
    return; /* not ours: it ends as it would without shoal */
  char detail[160];
  const char *kind = "use after free";
  const void *user;
  block_record_t record;
  if (id == 0) { /* a malloc(0) address whose entry is gone */
    user = zero_address(zero_id_of(address));
    text_format(
        detail, sizeof detail,
        ": a 0-byte block (malloc(0)'s pointer) that was freed and has left the quarantine");
  } else {
    user = (const void *)view.user;
    kind = fault_detail(detail, sizeof detail, (ptrdiff_t)((uintptr_t)address - view.user), &view);
    record_of_view(&view, &record);
  }
  site_t site;
  site_capture(&site, instruction);
  /* site_format names the byte before a return address; this is the
   * faulting instruction itself. */
  if (instruction != NULL) site.frames[0] = (const uint8_t *)instruction + 1;
  bool abort_on = option(SHOAL_OPTION_ABORT_ON_ERROR) != 0;
  frame_names_plain("in a signal handler");
  report_line(kind, access, user, id == 0 ? NULL : &record, detail, &site,
              abort_on ? "" : " (a fault cannot be ignored)");
  os_abort();
}

/* ---- the checked API ---- */

_Static_assert((INACCESSIBLE_SLOTS + 1) * ZERO_SPACING <= SEGMENT_SIZE - SLICE_SIZE,
               "every entry has its malloc(0) address");

/* The table, and malloc(0)'s addresses: a range shaped like a segment
 * whose header slice reads as zeros (no kind, no heap), since calloc(0, n)
 * looks at the segment header of what it zeroes (core/alloc.c, zero_block); the
 * rest inaccessible. Only once the fault handler is in place. */
static void inaccessible_init(void) {
  inaccessible_entry_t *table =
      os_map_aligned(INACCESSIBLE_SLOTS * sizeof(inaccessible_entry_t), os_page_size());
  uint8_t *zero_segment = table == NULL ? NULL : os_map_aligned(SEGMENT_SIZE, SEGMENT_SIZE);
  if (zero_segment == NULL || !os_catch_faults(check_fault)) {
    message("checked mode: freed large blocks and malloc(0)'s stay accessible");
    return;
  }
  inaccessible = table;
  if (os_protect(zero_segment + SLICE_SIZE, SEGMENT_SIZE - SLICE_SIZE, false))
    zero_space = zero_segment + SLICE_SIZE;
}

void check_init(void) {
  check_secret = free_key * 0x9E3779B97F4A7C15u + 0x5bd1e995u;
  quarantine = os_map_aligned(QUARANTINE_SLOTS * sizeof(quarantined_t), os_page_size());
  if (quarantine == NULL)
    message("checked mode: no memory for the quarantine; frees are immediate");
  inaccessible_init();
}

void *check_malloc(size_t size, size_t alignment, const site_t *site) {
  if (size == 0 && alignment <= 16) {
    void *zero = zero_alloc(site);
    if (zero != NULL) return zero;
  }
  if (alignment < 16) alignment = 16;
  size_t extra = FRONT_BYTES + BACK_BYTES + (alignment > 16 ? alignment : 0);
  if (size > PTRDIFF_MAX - extra) {
    errno = ENOMEM;
    return NULL;
  }
  uint8_t *start = alloc_fast(size + extra, site->frames[0]);
  if (start == NULL) return NULL;
  checked_block_t block;
  block.start = block_containing(start, &block.usable);
  block.user = (uint8_t *)(((uintptr_t)start + FRONT_BYTES + alignment - 1) & ~(alignment - 1));
  record_shard_t *shard = records_lock((uintptr_t)block.user);
  block_record_t *record = records_add(shard, (uintptr_t)block.user);
  if (record != NULL) {
    record->size = size;
    record->weight = 1;
    record->state = RECORD_LIVE;
    record->allocated_at = *site;
  }
  records_unlock(shard);
  if (record == NULL || block.start != start) {
    free_fast(start, 0, site->frames[0]);
    errno = ENOMEM;
    return NULL;
  }
  *(uintptr_t *)start = (uintptr_t)(block.user - start) ^ check_secret;
  header_t *header = header_of(block.user);
  memset(start + 8, GUARD_FILL, (size_t)((uint8_t *)header - (start + 8)));
  header->size = size;
  header->magic = magic_for(block.user, MAGIC_LIVE);
  memset(block.user - 16, GUARD_FILL, 16);
  memset(block.user, NEW_FILL, size);
  memset(block.user + size, GUARD_FILL,
         (size_t)(back_guard_end(&block, size) - (block.user + size)));
  return block.user;
}

/* Under the shard lock: the entry of a block being freed, as the fault
 * handler will read it. */
static void freed_view(const checked_block_t *block, const site_t *site,
                       inaccessible_view_t *view) {
  bool zero = block->start == NULL;
  view->start = zero ? (uintptr_t)block->user - ZERO_SPACING / 2 : (uintptr_t)block->start;
  view->bytes = zero ? ZERO_SPACING : block->usable;
  view->user = (uintptr_t)block->user;
  view->size = block->record->size;
  view->freed = true;
  view->allocated_at = block->record->allocated_at;
  view->freed_at = *site;
}

void check_free(void *p, size_t size_hint, const char *function, const site_t *site) {
  uint32_t reserved = inaccessible_reserve(p); /* before the shard lock: one lock at a time */
  checked_block_t block;
  if (!find_block(p, function, site, true, &block)) {
    inaccessible_unreserve(reserved);
    return;
  }
  block_record_t *record = block.record;
  if (size_hint != 0 && size_hint != record->size) {
    char detail[160];
    text_format(detail, sizeof detail, ": freed as %zu bytes, but the block has %zu", size_hint,
                record->size);
    report("wrong size", function, p, record, detail, site);
    records_unlock(block.shard);
    inaccessible_unreserve(reserved);
    return;
  }
  record->state = RECORD_QUARANTINED;
  record->freed_at = *site;
  if (record->inaccessible == 0) record->inaccessible = reserved; /* else malloc(0)'s, none */
  uint32_t id = record->inaccessible;
  inaccessible_view_t view;
  if (id != 0) freed_view(&block, site, &view);
  if (block.start != NULL) header_of(block.user)->magic = magic_for(block.user, MAGIC_FREED);
  if (id == 0) memset(block.user, FREED_FILL, record->size);
  records_unlock(block.shard);
  quarantine_add(block.user, block.usable, id, id != 0 ? &view : NULL, site);
}

void *check_realloc(void *p, size_t size, const site_t *site) {
  checked_block_t block;
  if (!find_block(p, "realloc", site, false, &block)) {
    errno = EINVAL;
    return NULL;
  }
  size_t old_size = block.record->size;
  records_unlock(block.shard);
  /* Always move: a stale pointer to the old place is then caught. */
  void *fresh = check_malloc(size, 0, site);
  if (fresh == NULL) return NULL;
  memcpy(fresh, p, old_size < size ? old_size : size);
  check_free(p, 0, "realloc", site);
  return fresh;
}

size_t check_usable_size(const void *p, const char *function, const site_t *site) {
  if (p == NULL) return 0;
  if (strcmp(function, "shoal_block_size") == 0) {
    /* An ownership question before a free (ShoalMM's FreeMem asks it): a
     * freed block is still shoal's, and the free that follows reports the
     * double free under its own name. */
    record_shard_t *shard = records_lock((uintptr_t)p);
    const block_record_t *record = records_find(shard, (uintptr_t)p);
    size_t freed_size = record != NULL && record->state == RECORD_QUARANTINED ? record->size : 0;
    records_unlock(shard);
    if (record != NULL && record->state == RECORD_QUARANTINED)
      return freed_size > 0 ? freed_size : 1;
  }
  checked_block_t block;
  if (!find_block(p, function, site, false, &block)) return 0;
  size_t size = block.record->size;
  records_unlock(block.shard);
  return size;
}

void check_register_for_fork(void) {
  lock_register_for_fork(&quarantine_lock, LOCK_RANK_ABOVE_CORE);
}

/* ---- shoal_check_heap ---- */

typedef struct heap_walk_s {
  site_t site;
  size_t faults;
} heap_walk_t;

static void check_record(block_record_t *record, void *context) {
  heap_walk_t *walk = context;
  if (record->inaccessible != 0) return; /* untouchable, so unchanged */
  checked_block_t block;
  block.record = record;
  block.user = (uint8_t *)record->block;
  block.start = block_containing(block.user, &block.usable);
  if (block.start == NULL) return;
  bool intact = record->state == RECORD_QUARANTINED
                    ? freed_block_intact(&block, "shoal_check_heap", &walk->site)
                    : guards_intact(&block, "shoal_check_heap", &walk->site);
  if (!intact) walk->faults++;
}

exported size_t shoal_check_heap(void) {
  if (!(diag_mode() & DIAG_CHECK)) return 0;
  heap_walk_t walk = {.faults = 0};
  site_capture(&walk.site, CALLER());
  records_for_each(check_record, &walk);
  return walk.faults;
}
