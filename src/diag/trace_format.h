/* trace_format.h — the file SHOAL_TRACE=path writes and bench/replay reads.
 *
 * A header, then fixed-size records in the order their buffers were
 * written; `sequence` gives the order the calls happened in (a free's is
 * taken before the block is freed, a malloc's after it was allocated, so
 * that a reused address is never seen twice live). Little-endian, as
 * written by the machine that recorded it. */
#ifndef SHOAL_TRACE_FORMAT_H
#define SHOAL_TRACE_FORMAT_H

#include <stdint.h>

#define SHOAL_TRACE_MAGIC   "SHOALTRC"
#define SHOAL_TRACE_VERSION 1

typedef struct shoal_trace_header_s {
  char magic[8];        /* SHOAL_TRACE_MAGIC, no NUL */
  uint32_t version;     /* SHOAL_TRACE_VERSION */
  uint32_t record_size; /* sizeof(shoal_trace_record_t) */
} shoal_trace_header_t;

typedef enum shoal_trace_op_e {
  SHOAL_TRACE_MALLOC = 1,  /* block = result; size (calloc: count*size) */
  SHOAL_TRACE_FREE = 2,    /* block */
  SHOAL_TRACE_REALLOC = 3, /* block (may be 0) -> result (0 if it failed); size */
  SHOAL_TRACE_ALIGNED = 4, /* block = result; size; 1 << alignment_log2 */
} shoal_trace_op_t;

typedef struct shoal_trace_record_s {
  uint64_t sequence;       /* process-wide order of the calls, from 1 */
  uint64_t block;          /* the address allocated, freed, or reallocated */
  uint64_t result;         /* realloc: the new address */
  uint64_t size;           /* bytes asked for */
  uint32_t thread;         /* the calling thread, numbered from 1 by first call */
  uint16_t op;             /* shoal_trace_op_t */
  uint16_t alignment_log2; /* SHOAL_TRACE_ALIGNED */
} shoal_trace_record_t;

#endif /* SHOAL_TRACE_FORMAT_H */
