/* accounting.c — the figures of os.h that do not depend on the platform:
 * bytes reserved, committed (and their peak), purges and purged bytes,
 * counted with relaxed atomics. linux.c and windows.c call account_* where
 * they map, unmap and purge; the layers above note commits. */
#include "os/accounting.h"

#include "os/os.h"

static _Atomic(size_t) reserved_bytes, committed_bytes, peak_committed_bytes;
static _Atomic(size_t) purge_count, purged_bytes;

void account_map(size_t size) {
  atomic_fetch_add_explicit(&reserved_bytes, size, memory_order_relaxed);
}

void account_unmap(size_t size) {
  atomic_fetch_sub_explicit(&reserved_bytes, size, memory_order_relaxed);
}

void account_purge(size_t size) {
  atomic_fetch_add_explicit(&purge_count, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&purged_bytes, size, memory_order_relaxed);
}

/* Committed bytes are noted by the layers above, which know what they
 * touched (a segment's dirty slices, a huge block's mapping) and purged. */
void os_commit_note(ptrdiff_t bytes) {
  if (bytes == 0) return; /* a reused slice: no store to a line every thread writes */
  size_t now = atomic_fetch_add_explicit(&committed_bytes, (size_t)bytes, memory_order_relaxed) +
               (size_t)bytes;
  size_t peak = atomic_load_explicit(&peak_committed_bytes, memory_order_relaxed);
  while (bytes > 0 && now > peak &&
         !atomic_compare_exchange_weak_explicit(&peak_committed_bytes, &peak, now,
                                                memory_order_relaxed, memory_order_relaxed)) {
  }
}

size_t os_reserved_bytes(void) {
  return atomic_load_explicit(&reserved_bytes, memory_order_relaxed);
}
size_t os_committed_bytes(void) {
  return atomic_load_explicit(&committed_bytes, memory_order_relaxed);
}
size_t os_peak_committed_bytes(void) {
  return atomic_load_explicit(&peak_committed_bytes, memory_order_relaxed);
}
size_t os_purge_count(void) {
  return atomic_load_explicit(&purge_count, memory_order_relaxed);
}
size_t os_purged_bytes(void) {
  return atomic_load_explicit(&purged_bytes, memory_order_relaxed);
}
