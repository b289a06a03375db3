/* trace.c — SHOAL_TRACE=path: every malloc, free, realloc and aligned call
 * of the program, recorded for bench/replay (format: trace_format.h).
 *
 * Each thread fills a buffer of its own and writes it whole with one
 * write() on a file opened O_APPEND, so threads never wait for each other
 * on the file; a process-wide sequence number (one atomic add a call)
 * restores the order. "%p" in the path becomes the process id, for programs
 * that start others (gcc runs cc1): each process then writes its own file;
 * without it a forked child stops recording. */
#define _GNU_SOURCE
#include "diag/diag.h"
#include "diag/trace_format.h"

#include <string.h>

#define TRACE_BUFFER_RECORDS 1024

typedef struct trace_buffer_s {
  struct trace_buffer_s *next_all;  /* every buffer, for the flush at exit */
  struct trace_buffer_s *next_idle; /* buffers of exited threads, to reuse */
  shoal_lock_t lock;                /* owner's appends against the flush at exit */
  uint32_t thread;
  size_t count;
  shoal_trace_record_t records[TRACE_BUFFER_RECORDS];
} trace_buffer_t;

static int trace_fd = -1;
static char trace_path_pattern[1024];
static _Atomic(uint64_t) trace_sequence;
static _Atomic(uint32_t) trace_threads;
static shoal_lock_t buffers_lock; /* the two lists */
static trace_buffer_t *buffers_all, *buffers_idle;
static _Thread_local trace_buffer_t *thread_buffer;

static int open_trace(void) {
  char path[1100];
  size_t out = 0;
  for (const char *in = trace_path_pattern; *in != '\0' && out + 24 < sizeof path; in++) {
    if (in[0] == '%' && in[1] == 'p') {
      out += (size_t)text_format(path + out, sizeof path - out, "%ld", os_process_id());
      in++;
    } else {
      path[out++] = *in;
    }
  }
  path[out] = '\0';
  int fd = diag_open_output(path);
  if (fd < 0) return -1;
  shoal_trace_header_t header = {.version = SHOAL_TRACE_VERSION,
                                 .record_size = sizeof(shoal_trace_record_t)};
  memcpy(header.magic, SHOAL_TRACE_MAGIC, sizeof header.magic);
  os_write_all(fd, (const char *)&header, sizeof header);
  return fd;
}

bool trace_init(const char *path) {
  if (strlen(path) >= sizeof trace_path_pattern) {
    message("SHOAL_TRACE: path too long");
    return false;
  }
  strcpy(trace_path_pattern, path);
  trace_fd = open_trace();
  return trace_fd >= 0;
}

static void buffer_write(trace_buffer_t *buffer) {
  if (buffer->count != 0 && trace_fd >= 0)
    os_write_all(trace_fd, (const char *)buffer->records,
                 buffer->count * sizeof(shoal_trace_record_t));
  buffer->count = 0;
}

static trace_buffer_t *buffer_for_thread(void) {
  lock_acquire_plain(&buffers_lock);
  trace_buffer_t *buffer = buffers_idle;
  if (buffer != NULL) buffers_idle = buffer->next_idle;
  lock_release_plain(&buffers_lock);
  if (buffer == NULL) {
    size_t bytes = (sizeof *buffer + os_page_size() - 1) & ~(os_page_size() - 1);
    buffer = os_map_aligned(bytes, os_page_size());
    if (buffer == NULL) return NULL;
    lock_acquire_plain(&buffers_lock);
    buffer->next_all = buffers_all;
    buffers_all = buffer;
    lock_release_plain(&buffers_lock);
  }
  buffer->thread = atomic_fetch_add_explicit(&trace_threads, 1, memory_order_relaxed) + 1;
  return buffer;
}

uint64_t trace_next_sequence(void) {
  return atomic_fetch_add_explicit(&trace_sequence, 1, memory_order_relaxed) + 1;
}

void trace_note(int op, const void *block, const void *result, size_t size, size_t alignment,
                uint64_t sequence) {
  trace_buffer_t *buffer = thread_buffer;
  if (buffer == NULL && (buffer = thread_buffer = buffer_for_thread()) == NULL) return;
  lock_acquire_plain(&buffer->lock);
  shoal_trace_record_t *record = &buffer->records[buffer->count++];
  record->sequence = sequence;
  record->block = (uint64_t)(uintptr_t)block;
  record->result = (uint64_t)(uintptr_t)result;
  record->size = size;
  record->thread = buffer->thread;
  record->op = (uint16_t)op;
  record->alignment_log2 = alignment > 1 ? (uint16_t)__builtin_ctzll(alignment) : 0;
  if (buffer->count == TRACE_BUFFER_RECORDS) buffer_write(buffer);
  lock_release_plain(&buffer->lock);
}

void trace_thread_exit(void) {
  trace_buffer_t *buffer = thread_buffer;
  if (buffer == NULL) return;
  thread_buffer = NULL;
  lock_acquire_plain(&buffer->lock);
  buffer_write(buffer);
  lock_release_plain(&buffer->lock);
  lock_acquire_plain(&buffers_lock);
  buffer->next_idle = buffers_idle;
  buffers_idle = buffer;
  lock_release_plain(&buffers_lock);
}

void trace_flush_all(void) {
  lock_acquire_plain(&buffers_lock);
  for (trace_buffer_t *buffer = buffers_all; buffer != NULL; buffer = buffer->next_all) {
    lock_acquire_plain(&buffer->lock);
    buffer_write(buffer);
    lock_release_plain(&buffer->lock);
  }
  lock_release_plain(&buffers_lock);
}

/* The child of a fork: a file of its own with "%p", else no recording. Its
 * buffers hold the parent's records, already the parent's to write. */
void trace_fork_child(void) {
  lock_reset(&buffers_lock);
  for (trace_buffer_t *buffer = buffers_all; buffer != NULL; buffer = buffer->next_all) {
    lock_reset(&buffer->lock);
    buffer->count = 0;
  }
  if (trace_fd >= 0) os_close(trace_fd);
  trace_fd = strstr(trace_path_pattern, "%p") != NULL ? open_trace() : -1;
}
