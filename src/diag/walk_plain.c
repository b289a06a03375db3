/* walk_plain.c — call sites where shoal walks no stack (Windows, PE
 * programs): one frame each, the return address the exported function saw,
 * named by symbols_plain.c as module+offset (what a debugger, or addr2line
 * with the module's debug file, turns into a line). The ELF side walks the
 * whole stack and names files and lines (walk.c, lines.c); this file gives
 * the same interface, so that nothing above it knows which is in use. */
#include "diag/diag.h"

#include <string.h>

size_t unwinder_live[SHOAL_STATS_SIZE_CLASSES]; /* no unwinder loaded: none kept */
static _Atomic(bool) one_frame_used;

void diag_load_unwinder(void) {}

void site_capture(site_t *site, caller_t caller) {
  memset(site, 0, sizeof *site);
  site->frames[0] = caller;
  site->entry = caller;
  atomic_store_explicit(&one_frame_used, true, memory_order_relaxed);
}

/* A return address points after the call; name the call itself. */
size_t site_format(const site_t *site, char *out, size_t capacity) {
  if (capacity == 0) return 0;
  out[0] = '\0';
  if (site->frames[0] == NULL) return 0;
  return symbol_name((const uint8_t *)site->frames[0] - 1, out, capacity);
}

void site_notes_write(void) {
  if (atomic_load_explicit(&one_frame_used, memory_order_relaxed))
    output_report_line("shoal: call stacks: one frame each, named module+offset: this platform's "
                       "stacks are not walked");
}

void frame_names_plain(const char *why) {
  (void)why; /* names are plain here always */
}

void frame_names_release(void) {}
