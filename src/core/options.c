/* options.c — every setting in one table, read once from SHOAL_<NAME>.
 *
 * Values: integers with optional K/M/G suffix (for byte sizes), or
 * 1/true/on/yes and 0/false/off/no. A value that does not parse gets one
 * warning line and the default; nothing here may allocate (it runs inside
 * the first malloc). */
#include "core/internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum option_kind_e { OPTION_BOOL, OPTION_NUMBER, OPTION_BYTES } option_kind_t;

typedef struct option_descriptor_s {
  const char *name; /* SHOAL_<name> */
  long default_value;
  option_kind_t kind;
  const char *help;
} option_descriptor_t;

static const option_descriptor_t descriptors[SHOAL_OPTION_COUNT] = {
    [SHOAL_OPTION_PURGE_DELAY] = {"PURGE_DELAY", 10, OPTION_NUMBER,
                                  "ms without a page freed before free memory goes back to the OS"},
    [SHOAL_OPTION_PURGE_LIMIT] =
        {"PURGE_LIMIT", 1L << 30, OPTION_BYTES,
         "free resident bytes a thread may keep before purging lazily at once"},
    [SHOAL_OPTION_HUGE_CACHE] = {"HUGE_CACHE", 64L << 20, OPTION_BYTES,
                                 "largest freed huge block kept mapped for reuse"},
    [SHOAL_OPTION_ABORT_ON_ERROR] = {"ABORT_ON_ERROR", 1, OPTION_BOOL,
                                     "abort on an invalid or double free (0: warn and ignore it)"},
    [SHOAL_OPTION_VERBOSE] = {"VERBOSE", 0, OPTION_BOOL, "report shoal's decisions on stderr"},
    [SHOAL_OPTION_REALLOC_GROWTH] = {"REALLOC_GROWTH", 1, OPTION_BOOL,
                                     "give a block realloc must move to grow an eighth more room"},
    [SHOAL_OPTION_LEAKS_SAMPLE] = {"LEAKS_SAMPLE", 256L << 10, OPTION_BYTES,
                                   "with SHOAL_LEAKS=1, record the call site of one allocation "
                                   "per this many bytes allocated (on average)"},
    [SHOAL_OPTION_CHECK_QUARANTINE] = {"CHECK_QUARANTINE", 16L << 20, OPTION_BYTES,
                                       "with SHOAL_CHECK=1, bytes of freed blocks kept unusable "
                                       "to catch late writes and double frees"},
    [SHOAL_OPTION_HUGE_PAGES] =
        {"HUGE_PAGES", 1, OPTION_BOOL,
         "back huge blocks (over 960 KiB) that malloc or realloc hands out with "
         "transparent huge pages where the system allows them"},
    [SHOAL_OPTION_MEDIUM_POOL] = {"MEDIUM_POOL", POOL_UPPER, OPTION_NUMBER,
                                  "cut plain requests from a per-thread pool that joins freed "
                                  "neighbours: 0 never, 1 all of 1-32 KiB (leaner, slower), "
                                  "2 those of 8-32 KiB of a thread whose pool blocks no other "
                                  "thread frees"},
};

_Atomic(long) option_values[SHOAL_OPTION_COUNT];
static _Atomic(int) values_loaded;

bool option_parse_bool(const char *text, long *out) {
  static const char *const yes[] = {"1", "true", "on", "yes"};
  static const char *const no[] = {"0", "false", "off", "no"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(text, yes[i]) == 0) return *out = 1, true;
    if (strcasecmp(text, no[i]) == 0) return *out = 0, true;
  }
  return false;
}

static bool parse_number(const char *text, bool allow_suffix, long *out) {
  char *end = NULL;
  long value = strtol(text, &end, 10);
  if (end == text || value < 0) return false;
  if (allow_suffix && *end != '\0') {
    int shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
      shift = 10;
      break;
    case 'm':
    case 'M':
      shift = 20;
      break;
    case 'g':
    case 'G':
      shift = 30;
      break;
    default:
      return false;
    }
    end++;
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (value > (__LONG_MAX__ >> shift)) return false;
    value <<= shift;
  }
  if (*end != '\0') return false;
  *out = value;
  return true;
}

void options_init(void) {
  if (atomic_load_explicit(&values_loaded, memory_order_acquire)) return;
  for (int i = 0; i < SHOAL_OPTION_COUNT; i++) {
    const option_descriptor_t *d = &descriptors[i];
    long value = d->default_value;
    char variable[64];
    text_format(variable, sizeof variable, "SHOAL_%s", d->name);
    const char *text = getenv(variable);
    if (text != NULL && *text != '\0') {
      bool ok = d->kind == OPTION_BOOL ? option_parse_bool(text, &value)
                                       : parse_number(text, d->kind == OPTION_BYTES, &value);
      if (!ok) {
        value = d->default_value;
        message("warning: %s=%s is not a valid value (%s); using %ld", variable, text,
                d->kind == OPTION_BOOL ? "expected 0 or 1" : "expected a number", value);
      }
    }
    atomic_store_explicit(&option_values[i], value, memory_order_relaxed);
  }
  atomic_store_explicit(&values_loaded, 1, memory_order_release);
}

exported long shoal_option_get(shoal_option_t which) {
  if ((unsigned)which >= SHOAL_OPTION_COUNT) return -1;
  options_init();
  return option(which);
}

exported void shoal_option_set(shoal_option_t which, long value) {
  if ((unsigned)which >= SHOAL_OPTION_COUNT || value < 0) return;
  options_init();
  atomic_store_explicit(&option_values[which], value, memory_order_relaxed);
}

exported const char *shoal_option_name(shoal_option_t which) {
  if ((unsigned)which >= SHOAL_OPTION_COUNT) return NULL;
  return descriptors[which].name;
}

static void message_va(const char *format, va_list args) {
  char line[512];
  int n = text_format(line, sizeof line, "shoal: ");
  int m = text_vformat(line + n, sizeof line - (size_t)n - 1, format, args);
  size_t length = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (length > sizeof line - 2) length = sizeof line - 2;
  line[length++] = '\n';
  os_write_stderr(line, length);
}

void message(const char *format, ...) {
  va_list args;
  va_start(args, format);
  message_va(format, args);
  va_end(args);
}

void verbose(const char *format, ...) {
  if (!option(SHOAL_OPTION_VERBOSE)) return;
  va_list args;
  va_start(args, format);
  message_va(format, args);
  va_end(args);
}
