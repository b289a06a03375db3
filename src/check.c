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
 * Each fault is one line naming the kind, the call, the block, where it was
 * allocated (and freed) and where the faulty call came from; then abort, or
 * with SHOAL_ABORT_ON_ERROR=0 the call is ignored (the block kept). */
#include "diag.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define FRONT_BYTES      48 /* offset word, size, magic, 16 guard bytes, 8 spare */
#define BACK_BYTES       16 /* at least this many guard bytes after the data */
#define BACK_MAX         4096
#define GUARD_FILL       0xFD
#define NEW_FILL         0xAA
#define FREED_FILL       0xDD
#define MAGIC_LIVE       0x4C49
#define MAGIC_FREED      0x4644
#define QUARANTINE_SLOTS ((size_t)1 << 16)

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

static void report(const char *kind, const char *function, const void *p,
                   const block_record_t *record, const char *detail, const site_t *site) {
  char allocated[1024] = "", freed[1024] = "", called[1024];
  if (record != NULL) {
    size_t n = (size_t)snprintf(allocated, sizeof allocated, "; allocated at ");
    site_format(&record->allocated_at, allocated + n, sizeof allocated - n);
    if (record->state == RECORD_QUARANTINED) {
      n = (size_t)snprintf(freed, sizeof freed, "; freed at ");
      site_format(&record->freed_at, freed + n, sizeof freed - n);
    }
  }
  site_format(site, called, sizeof called);
  bool abort_now = option(SHOAL_OPTION_ABORT_ON_ERROR) != 0;
  diag_write(2, "shoal: %s: %s(%p)%s%s%s; called at %s%s", kind, function, p, detail, allocated,
             freed, called, abort_now ? "" : " (ignored)");
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
    snprintf(detail, sizeof detail,
             ": byte %td before the start of a %zu-byte block was overwritten", block->user - bad,
             size);
    report("buffer underrun", function, block->user, block->record, detail, site);
    return false;
  }
  bad = first_changed(block->user + size, back_guard_end(block, size), GUARD_FILL);
  if (bad != NULL) {
    snprintf(detail, sizeof detail,
             ": byte %td of a %zu-byte block (%td past its end) was overwritten", bad - block->user,
             size, bad - (block->user + size) + 1);
    report("buffer overrun", function, block->user, block->record, detail, site);
    return false;
  }
  return true;
}

/* Find the block p designates. On success its shard is locked and the
 * record found; on a fault, report it and return false, nothing locked.
 * A freed block is a fault for every caller but the quarantine. */
static bool find_block(const void *p, const char *function, const site_t *site, bool free_call,
                       checked_block_t *block) {
  char detail[160] = "";
  uint8_t *start = block_containing(p, &block->usable);
  if (start == NULL) {
    report("invalid pointer", function, p, NULL, ": not a block shoal allocated", site);
    return false;
  }
  if (((shoal_block_t *)start)->key == free_key) {
    report(free_call ? "double free" : "use after free", function, p, NULL,
           ": the block was already freed and has left the quarantine", site);
    return false;
  }
  size_t offset = *(uintptr_t *)start ^ check_secret;
  if (offset < FRONT_BYTES || offset + BACK_BYTES > block->usable || (offset & 15) != 0) {
    report("invalid pointer", function, p, NULL, ": not a block shoal allocated", site);
    return false;
  }
  block->start = start;
  block->user = start + offset;
  block->shard = records_lock((uintptr_t)block->user);
  block->record = records_find(block->shard, (uintptr_t)block->user);
  const block_record_t *record = block->record;
  if (record == NULL) {
    records_unlock(block->shard);
    report("invalid pointer", function, p, NULL, ": not a block shoal allocated", site);
    return false;
  }
  if (p != block->user) {
    bool misaligned = ((uintptr_t)p & 15) != 0;
    snprintf(detail, sizeof detail, ": %s%td bytes into a %zu-byte block at %p",
             misaligned ? "not 16-byte aligned, " : "points ", (const uint8_t *)p - block->user,
             record->size, (void *)block->user);
    report(misaligned ? "misaligned pointer" : "pointer inside a block", function, p, record,
           detail, site);
    records_unlock(block->shard);
    return false;
  }
  if (record->state == RECORD_QUARANTINED) {
    snprintf(detail, sizeof detail, ": the %zu-byte block was already freed", record->size);
    report(free_call ? "double free" : "use after free", function, p, record, detail, site);
    records_unlock(block->shard);
    return false;
  }
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
} quarantined_t;

static shoal_lock_t quarantine_lock;
static quarantined_t *quarantine; /* a ring of QUARANTINE_SLOTS */
static size_t quarantine_head, quarantine_count, quarantine_bytes;

/* A quarantined block: its data must still read FREED_FILL, its guards be
 * whole. Reports the first damage found (under the shard lock). */
static bool freed_block_intact(const checked_block_t *block, const char *function,
                               const site_t *site) {
  size_t size = block->record->size;
  const uint8_t *bad = first_changed(block->user, block->user + size, FREED_FILL);
  if (bad == NULL) return guards_intact(block, function, site);
  char detail[160];
  snprintf(detail, sizeof detail, ": byte %td of the %zu-byte block was written after it was freed",
           bad - block->user, size);
  report("write after free", function, block->user, block->record, detail, site);
  return false;
}

/* A block leaves the quarantine for the core, checked once more. */
static void release(uint8_t *user, const site_t *site) {
  checked_block_t block;
  block.user = user;
  block.start = block_containing(user, &block.usable);
  block.shard = records_lock((uintptr_t)user);
  block.record = records_find(block.shard, (uintptr_t)user);
  if (block.record == NULL || block.start == NULL) { /* cannot happen: keep the block */
    records_unlock(block.shard);
    return;
  }
  freed_block_intact(&block, "free", site);
  records_remove(block.shard, block.record);
  records_unlock(block.shard);
  /* Damage was reported; with abort off the block is reused all the same,
   * its guards and fill rewritten by the next check_malloc. */
  free_fast(block.start, 0, site->frames[0]);
}

/* Under the quarantine lock: take out the oldest blocks while it holds more
 * than `keep` bytes or has no free slot; the caller releases them. */
static size_t take_oldest(uint8_t **leaving, size_t most, size_t keep) {
  size_t count = 0;
  while (count < most && quarantine_count > 0 &&
         (quarantine_bytes > keep || quarantine_count == QUARANTINE_SLOTS)) {
    quarantined_t *oldest = &quarantine[quarantine_head];
    leaving[count++] = oldest->user;
    quarantine_bytes -= oldest->bytes;
    quarantine_head = (quarantine_head + 1) % QUARANTINE_SLOTS;
    quarantine_count--;
  }
  return count;
}

static void quarantine_add(uint8_t *user, size_t bytes, const site_t *site) {
  size_t limit = (size_t)option(SHOAL_OPTION_CHECK_QUARANTINE);
  uint8_t *leaving[8];
  size_t count;
  if (quarantine == NULL) limit = 0;
  diag_lock(&quarantine_lock);
  if (limit > 0) {
    quarantine[(quarantine_head + quarantine_count) % QUARANTINE_SLOTS] =
        (quarantined_t){user, bytes};
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

/* ---- the checked API ---- */

void check_init(void) {
  check_secret = free_key * 0x9E3779B97F4A7C15u + 0x5bd1e995u;
  quarantine = os_map_aligned(QUARANTINE_SLOTS * sizeof(quarantined_t), os_page_size());
  if (quarantine == NULL)
    message("checked mode: no memory for the quarantine; frees are immediate");
}

void *check_malloc(size_t size, size_t alignment, const site_t *site) {
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

void check_free(void *p, size_t size_hint, const char *function, const site_t *site) {
  checked_block_t block;
  if (!find_block(p, function, site, true, &block)) return;
  block_record_t *record = block.record;
  if (size_hint != 0 && size_hint != record->size) {
    char detail[160];
    snprintf(detail, sizeof detail, ": freed as %zu bytes, but the block has %zu", size_hint,
             record->size);
    report("wrong size", function, p, record, detail, site);
    records_unlock(block.shard);
    return;
  }
  record->state = RECORD_QUARANTINED;
  record->freed_at = *site;
  size_t size = record->size;
  header_of(block.user)->magic = magic_for(block.user, MAGIC_FREED);
  memset(block.user, FREED_FILL, size);
  records_unlock(block.shard);
  quarantine_add(block.user, block.usable, site);
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
  checked_block_t block;
  if (!find_block(p, function, site, false, &block)) return 0;
  size_t size = block.record->size;
  records_unlock(block.shard);
  return size;
}

void check_fork_prepare(void) {
  diag_lock_for_fork(&quarantine_lock);
}

void check_fork_parent(void) {
  diag_unlock_after_fork(&quarantine_lock);
}

void check_fork_child(void) {
  lock_reset(&quarantine_lock);
}

/* ---- shoal_check_heap ---- */

typedef struct heap_walk_s {
  site_t site;
  size_t faults;
} heap_walk_t;

static void check_record(block_record_t *record, void *context) {
  heap_walk_t *walk = context;
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
