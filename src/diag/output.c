/* output.c — where the reports go: stderr, or a report file with a brief
 * summary on stderr, as FastMM writes its event log beside the executable
 * and shows the top of it on screen.
 *
 * One option picks the file: SHOAL_REPORT_FILE=path, or =auto for
 * "<program>_shoal_report.txt" in the executable's folder (ShoalMM asks for
 * auto through shoal_report_file, so a Pascal program gets the file the way
 * a FastMM user does). SHOAL_LEAKS_FILE, the older name, is read when
 * SHOAL_REPORT_FILE is not set. The file is created at the first report
 * line, never before: a run that reports nothing leaves no file behind. Every
 * report of the run (checked-mode errors as they happen, the leak and
 * contention reports at exit) goes into the one file, in order. */
#include "diag/diag.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum { REPORT_PATH_MAX = 1024 };
static const char report_suffix[] = "_shoal_report.txt";

static shoal_lock_t output_lock = SHOAL_LOCK_INIT;
static char report_path[REPORT_PATH_MAX]; /* (output_lock) empty: stderr */
static _Atomic(int) report_fd = -1;       /* open once the first line is written */
static bool report_failed;                /* (output_lock) said why already */
static bool path_from_environment;        /* (output_lock) the user named the file */

/* "auto": the executable's path with the suffix. False when it cannot be
 * read (no /proc) or does not fit. */
static bool path_beside_executable(char *out, size_t capacity) {
  size_t length = os_executable_path(out, capacity);
  if (length == 0 || length + sizeof report_suffix > capacity) return false;
  memcpy(out + length, report_suffix, sizeof report_suffix);
  return true;
}

/* Under output_lock. */
static bool path_choose(const char *path) {
  if (path == NULL || *path == '\0') {
    report_path[0] = '\0';
    return true;
  }
  if (strcmp(path, "auto") == 0) {
    if (path_beside_executable(report_path, sizeof report_path)) return true;
    report_path[0] = '\0';
    message("report file: cannot tell where the executable is; reports go to stderr");
    return false;
  }
  size_t length = strlen(path);
  if (length >= sizeof report_path) {
    report_path[0] = '\0';
    message("report file: path too long (%zu bytes); reports go to stderr", length);
    return false;
  }
  memcpy(report_path, path, length + 1);
  return true;
}

void output_start(void) {
  const char *path = getenv("SHOAL_REPORT_FILE");
  if (path == NULL) path = getenv("SHOAL_LEAKS_FILE");
  output_start_file(path);
}

void output_start_file(const char *path) {
  diag_lock(&output_lock);
  path_from_environment = path_choose(path) && report_path[0] != '\0';
  diag_unlock(&output_lock);
}

bool output_set_file(const char *path) {
  diag_lock(&output_lock);
  bool defer = path != NULL && strcmp(path, "auto") == 0 && path_from_environment;
  bool chosen =
      atomic_load_explicit(&report_fd, memory_order_acquire) < 0 && (defer || path_choose(path));
  diag_unlock(&output_lock);
  return chosen;
}

/* The report file's descriptor, opened at the first call; -1 for stderr. */
static int output_fd(void) {
  int fd = atomic_load_explicit(&report_fd, memory_order_acquire);
  if (fd >= 0) return fd;
  diag_lock(&output_lock);
  fd = atomic_load_explicit(&report_fd, memory_order_relaxed);
  if (fd < 0 && report_path[0] != '\0' && !report_failed) {
    fd = os_open_output(report_path);
    if (fd < 0) {
      report_failed = true;
      message("cannot write %s: %s; reports go to stderr", report_path, strerror(errno));
    } else {
      atomic_store_explicit(&report_fd, fd, memory_order_release);
    }
  }
  diag_unlock(&output_lock);
  return fd;
}

bool output_to_file(void) {
  return output_fd() >= 0;
}

const char *output_file_path(void) {
  return output_to_file() ? report_path : "stderr";
}

static void write_line(int fd, const char *format, va_list args) {
  char line[2048];
  int n = text_vformat(line, sizeof line - 1, format, args);
  size_t length = n < 0 ? 0 : (size_t)n;
  if (length > sizeof line - 2) length = sizeof line - 2;
  line[length++] = '\n';
  if (fd < 0)
    os_write_stderr(line, length); /* the kept copy, if the program closed its own */
  else
    os_write_all(fd, line, length);
}

void output_report_line(const char *format, ...) {
  va_list args;
  va_start(args, format);
  write_line(output_fd(), format, args);
  va_end(args);
}

void output_summary_line(const char *format, ...) {
  if (!output_to_file()) return;
  va_list args;
  va_start(args, format);
  write_line(-1, format, args);
  va_end(args);
}

void output_error_line(const char *format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  write_line(output_fd(), format, args);
  if (output_to_file()) write_line(-1, format, again);
  va_end(again);
  va_end(args);
}
