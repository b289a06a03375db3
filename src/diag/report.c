/* report.c — the SHOAL_STATS report at exit: the core's figures
 * (stats_fill) as a table or as JSON.
 *
 * Both printers come from the X-macro lists in shoal.h, so a figure added
 * there appears in the struct, the table and the JSON at once. The report
 * runs from a destructor, so it comes after main returns or exit() is
 * called (not after _exit or a crash), under LD_PRELOAD and when linked
 * alike. It must not allocate: a malloc from here would change the figures
 * being printed and could run into a heap being torn down. So lines are
 * formatted with text_format into a buffer on the stack and written with
 * os_write_stderr, as message() does, and SHOAL_STATS is read with getenv. */
#include "core/internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- the report: text gathered on the stack, written in a few calls ---- */

typedef struct report_s {
  char text[4096];
  size_t length;
} report_t;

static void report_flush(report_t *report) {
  os_write_stderr(report->text, report->length);
  report->length = 0;
}

/* Lines are far shorter than the buffer: one that does not fit in what is
 * left goes into an emptied buffer, cut if it still does not fit. */
__attribute__((format(printf, 2, 3))) static void report_printf(report_t *report,
                                                                const char *format, ...) {
  for (int attempt = 0; attempt < 2; attempt++) {
    size_t room = sizeof report->text - report->length;
    va_list args;
    va_start(args, format);
    int written = text_vformat(report->text + report->length, room, format, args);
    va_end(args);
    if (written < 0) return;
    if ((size_t)written < room) {
      report->length += (size_t)written;
      return;
    }
    if (report->length == 0) {
      report->length = sizeof report->text - 1;
      return;
    }
    report_flush(report);
  }
}

/* "812 B", "3.1 KiB", "12.0 MiB": integer arithmetic, because printf of a
 * double may allocate. */
static const char *bytes_readable(char *out, size_t out_size, size_t bytes) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0, scale = 1;
  while (unit + 1 < sizeof units / sizeof units[0] && bytes / scale >= 1024) {
    scale *= 1024;
    unit++;
  }
  if (unit == 0)
    text_format(out, out_size, "%zu B", bytes);
  else
    text_format(out, out_size, "%zu.%zu %s", bytes / scale, bytes % scale * 10 / scale,
                units[unit]);
  return out;
}

enum { KIND_COUNT, KIND_BYTES }; /* the kinds of the lists in shoal.h */
#define STATS_KIND(kind) KIND_##kind

static void table_figure(report_t *report, const char *name, int kind, size_t value,
                         const char *description) {
  char readable[32] = "";
  if (kind == KIND_BYTES && value >= 1024) bytes_readable(readable, sizeof readable, value);
  report_printf(report, "  %-24s %14zu %10s  %s\n", name, value, readable, description);
}

static void table_class_row(report_t *report, const char *label, const shoal_class_stats_t *row) {
  report_printf(report, "  %10s", label);
#define CLASS_CELL(name, kind, description) report_printf(report, " %14zu", row->name);
  SHOAL_CLASS_STATS_FIELDS(CLASS_CELL)
#undef CLASS_CELL
  report_printf(report, "\n");
}

static void table_print(report_t *report, const shoal_stats_t *stats) {
  report_printf(report, "shoal: statistics of process %ld at exit\n", os_process_id());
#define FIGURE_LINE(name, kind, description)                                                       \
  table_figure(report, #name, STATS_KIND(kind), stats->name, description);
  SHOAL_STATS_FIELDS(FIGURE_LINE)
#undef FIGURE_LINE
  report_printf(report, "  %10s", "size class");
#define CLASS_HEADER(name, kind, description) report_printf(report, " %14s", #name);
  SHOAL_CLASS_STATS_FIELDS(CLASS_HEADER)
#undef CLASS_HEADER
  report_printf(report, "\n");
  for (int size_class = 0; size_class < CLASS_COUNT; size_class++) {
    if (stats->classes[size_class].allocated == 0) continue; /* 80 rows of zeros help nobody */
    char label[16];
    text_format(label, sizeof label, "%d", size_class);
    table_class_row(report, label, &stats->classes[size_class]);
  }
  table_class_row(report, "large", &stats->large);
  table_class_row(report, "huge", &stats->huge);
  report_printf(report, "  (size classes that never held a block are left out)\n");
}

/* Every field of one row, as the members of a JSON object. */
static void json_class_members(report_t *report, const shoal_class_stats_t *row) {
  const char *separator = "";
#define CLASS_MEMBER(name, kind, description)                                                      \
  report_printf(report, "%s\"" #name "\": %zu", separator, row->name);                             \
  separator = ", ";
  SHOAL_CLASS_STATS_FIELDS(CLASS_MEMBER)
#undef CLASS_MEMBER
}

static void json_print(report_t *report, const shoal_stats_t *stats) {
  report_printf(report, "{\n  \"pid\": %ld,\n", os_process_id());
#define FIGURE_MEMBER(name, kind, description)                                                     \
  report_printf(report, "  \"" #name "\": %zu,\n", stats->name);
  SHOAL_STATS_FIELDS(FIGURE_MEMBER)
#undef FIGURE_MEMBER
  report_printf(report, "  \"classes\": [\n");
  for (int size_class = 0; size_class < CLASS_COUNT; size_class++) {
    report_printf(report, "    {\"class\": %d, ", size_class);
    json_class_members(report, &stats->classes[size_class]);
    report_printf(report, "}%s\n", size_class + 1 < CLASS_COUNT ? "," : "");
  }
  report_printf(report, "  ],\n  \"large\": {");
  json_class_members(report, &stats->large);
  report_printf(report, "},\n  \"huge\": {");
  json_class_members(report, &stats->huge);
  report_printf(report, "}\n}\n");
}

/* ---- SHOAL_STATS: read at start, acted on at exit ---- */

typedef enum report_format_e {
  REPORT_UNREAD, /* the constructor has not run (a host that skips them) */
  REPORT_NONE,
  REPORT_TABLE,
  REPORT_JSON,
} report_format_t;

static report_format_t report_format;

/* The spellings of the options' booleans (options.c), plus table and json. */
static report_format_t report_format_read(void) {
  const char *text = getenv("SHOAL_STATS");
  long on;
  if (text == NULL || *text == '\0') return REPORT_NONE;
  if (strcasecmp(text, "json") == 0) return REPORT_JSON;
  if (strcasecmp(text, "table") == 0) return REPORT_TABLE;
  if (option_parse_bool(text, &on)) return on ? REPORT_TABLE : REPORT_NONE;
  message("warning: SHOAL_STATS=%s is not a valid value (expected 0, 1 or json); using 0", text);
  return REPORT_NONE;
}

/* At start, like the options, so that a bad value is reported at once and
 * a program's own setenv later changes nothing. */
__attribute__((constructor)) static void stats_report_init(void) {
  report_format = report_format_read();
  if (report_format != REPORT_NONE) os_keep_stderr();
}

__attribute__((destructor)) void stats_report_at_exit(void) {
  if (report_format == REPORT_UNREAD) report_format = report_format_read();
  if (report_format == REPORT_NONE) return;
  report_format_t format = report_format;
  report_format = REPORT_NONE; /* once */
  shoal_stats_t stats;
  stats_fill(&stats);
  report_t report;
  report.length = 0;
  if (format == REPORT_JSON)
    json_print(&report, &stats);
  else
    table_print(&report, &stats);
  report_flush(&report);
}
