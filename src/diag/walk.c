/* walk.c — call sites: the stack walked from an allocation to the program's
 * own frames, through code with or without unwind tables.
 *
 * Leak tracking, checked mode and the contention log record where each
 * block came from (site_capture) and name it when they report
 * (site_format, with lines.c). The walk must go through whatever the
 * program is made of: C and C++ with unwind tables (libgcc's unwinder),
 * C without them but with frame pointers, and Free Pascal's code, which on
 * Linux x86-64 has neither tables nor frame pointers; and it must never
 * crash the program, whatever its stack holds. It runs at every tracked
 * allocation, so it names nothing: reports do, once per address. */
#define _GNU_SOURCE
#include "diag/diag.h"

#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unwind.h>

/* The unwinder is libgcc's. Bound here when the program has it (C++ does);
 * otherwise loaded when a diagnostic that names call sites starts
 * (diag_load_unwinder): linking libgcc_s into every process cost 100 KiB of
 * resident memory. Without it, call sites have one frame. */
#pragma weak _Unwind_Backtrace
#pragma weak _Unwind_GetIPInfo
#pragma weak _Unwind_GetCFA
#pragma weak _Unwind_GetGR
#pragma weak _Unwind_Find_FDE
typedef _Unwind_Reason_Code (*unwind_backtrace_fn)(_Unwind_Trace_Fn, void *);
typedef _Unwind_Ptr (*unwind_get_ip_info_fn)(struct _Unwind_Context *, int *);
typedef _Unwind_Word (*unwind_get_word_fn)(struct _Unwind_Context *);
typedef _Unwind_Word (*unwind_get_gr_fn)(struct _Unwind_Context *, int);
/* libgcc's lookup of the unwind table entry covering pc (bases: three
 * pointers it fills in). */
typedef const void *(*unwind_find_fde_fn)(void *pc, void *bases);
extern const void *_Unwind_Find_FDE(void *pc, void *bases);
typedef struct unwinder_s {
  unwind_backtrace_fn backtrace;
  unwind_get_ip_info_fn get_ip_info;
  unwind_get_word_fn get_cfa;
  unwind_get_gr_fn get_gr;
  unwind_find_fde_fn find_fde;
} unwinder_t;
static unwinder_t unwinder; /* written once, before unwinder_ready */
static _Atomic(bool) unwinder_ready;
static _Atomic(bool) unwinder_tried;  /* by the constructor, or by the first call site */
static _Atomic(bool) unwinder_failed; /* libgcc_s could not be loaded */
size_t unwinder_live[SHOAL_STATS_SIZE_CLASSES];

/* ---- the walk ----
 *
 * site_capture, from here outwards:
 *
 *   unwind_step     libgcc's unwinder, through shoal's frames (left out up
 *                   to the return address the entry point saw) and on
 *                   through every frame with unwind tables: C and C++ as
 *                   gcc and clang build them by default, libc, signal
 *                   trampolines. Where it stops at a frame that has no
 *                   table entry (_Unwind_Find_FDE), or cannot start at all
 *                   (an executable without .eh_frame_hdr: Free Pascal's),
 *   stack_walk      goes on from that frame's stack pointer (or from the
 *                   stack word that holds the caller's return address):
 *     stack_step    the frame's caller, found in this order:
 *                   - its frame pointer, when the function's prologue keeps
 *                     one (push %rbp; mov %rsp,%rbp) and the word above the
 *                     saved one is a return address;
 *                   - the size its prologue gives the frame (pushes, sub or
 *                     lea of %rsp: how Free Pascal and gcc without frame
 *                     pointers write it), when the word there is one;
 *                   - the nearest word above the stack pointer that is a
 *                     return address into a call of this very function (a
 *                     direct call's target, or the pointer a call through
 *                     %rip reads, is its start), else the nearest that
 *                     returns after any call (signal_return: past a signal
 *                     handler, from the kernel's saved registers).
 *                   A word is a return address when the bytes before it in
 *                   an executable segment of a loaded object are a call
 *                   instruction (return_address_kind). A function's start
 *                   and extent come from the program's .symtab, read when
 *                   the diagnostics start (program_functions).
 *   site_keep       leaves out the leading frames of ShoalMM and of the Free
 *                   Pascal RTL (GetMem, fpc_ansistr_*, fpc_dynarray_*,
 *                   TObject.NewInstance, TStringList.Create...; skip_ranges)
 *                   so frames[0] is the program's own line.
 *
 * Every stack word read lies between a frame's stack pointer and the top of
 * this thread's stack (pthread_getattr_np, asked once per thread), every
 * code byte in an executable segment, and stack pointers only increase: a
 * corrupt frame pointer or a stray word ends the walk or costs a frame,
 * never the program. Nothing is named here: frame_name does that once per
 * address when a report is written. */

#define WALK_SKIP_MAX   32                    /* shoal's own frames, a signal trampoline */
#define FUNCTION_REACH  ((uintptr_t)1 << 16)  /* a direct call's target to the frame's pc */
#define SCAN_REACH      ((uintptr_t)16 << 10) /* a frame's stack searched for its caller */
#define CODE_RANGES_MAX 128

static _Atomic(int) site_notes;

void site_note(int note) {
  if ((atomic_load_explicit(&site_notes, memory_order_relaxed) & note) != note)
    atomic_fetch_or_explicit(&site_notes, note, memory_order_relaxed);
}

/* The leading frames left out: sorted, disjoint; set before unwinder_ready. */
static code_range_t *skip_ranges;
static size_t skip_count;

static bool code_in(const code_range_t *ranges, size_t count, uintptr_t address) {
  size_t low = 0, high = count;
  while (low < high) {
    size_t middle = low + (high - low) / 2;
    if (address < ranges[middle].start)
      high = middle;
    else if (address >= ranges[middle].end)
      low = middle + 1;
    else
      return true;
  }
  return false;
}

typedef struct frame_state_s {
  uintptr_t pc; /* a return address (or a signal frame's pc + 1) */
  uintptr_t sp; /* the stack pointer in that frame after the call returned */
  uintptr_t fp; /* rbp there: a frame pointer, or anything */
} frame_state_t;

typedef struct site_walk_s {
  site_t *site;
  caller_t caller;
  int seen;           /* frames the unwinder gave */
  int stored;         /* frames kept in site */
  bool matched;       /* the caller's frame was reached */
  bool full;          /* site has SITE_FRAMES frames */
  bool in_signal;     /* a signal frame was crossed: this is a handler */
  uintptr_t first_pc; /* the unwinder's first frame (site_capture's own) */
  frame_state_t last; /* the unwinder's last frame */
} site_walk_t;

/* A frame, unless one of the leading ones left out. False once full. */
static bool site_keep(site_walk_t *walk, uintptr_t pc) {
  if (walk->stored == 0 && code_in(skip_ranges, skip_count, pc - 1)) return true;
  walk->site->frames[walk->stored++] = (const void *)pc;
  walk->full = walk->stored == SITE_FRAMES;
  return !walk->full;
}

static _Unwind_Reason_Code unwind_step(struct _Unwind_Context *context, void *argument) {
  site_walk_t *walk = argument;
  int before_instruction = 0;
  uintptr_t pc = (uintptr_t)unwinder.get_ip_info(context, &before_instruction);
  if (walk->seen++ == 0) walk->first_pc = pc;
  if (before_instruction) walk->in_signal = true;
  if (!walk->matched) {
    if (pc != (uintptr_t)walk->caller)
      return walk->seen > WALK_SKIP_MAX ? _URC_END_OF_STACK : _URC_NO_REASON;
    walk->matched = true;
  }
  /* A signal frame's pc is the interrupted instruction itself; named as a
   * return address, it is one byte further. */
  if (before_instruction) pc++;
  walk->last.pc = pc;
  walk->last.sp = (uintptr_t)unwinder.get_cfa(context);
  walk->last.fp = (uintptr_t)unwinder.get_gr(context, 6); /* DWARF register 6: rbp */
  return site_keep(walk, pc) ? _URC_NO_REASON : _URC_END_OF_STACK;
}

/* This thread's stack, asked once (os_thread_stack may allocate and read
 * /proc: not from a signal handler). */
static __attribute__((tls_model("initial-exec"))) _Thread_local uintptr_t stack_low, stack_high;
static __attribute__((tls_model("initial-exec"))) _Thread_local bool stack_asked;

static bool thread_stack(bool in_signal, uintptr_t *low, uintptr_t *high) {
  if (!stack_asked && !in_signal) {
    stack_asked = true;
    if (!os_thread_stack(&stack_low, &stack_high)) stack_low = stack_high = 0;
  }
  *low = stack_low;
  *high = stack_high;
  return stack_high != 0;
}

typedef struct code_ranges_s {
  code_range_t ranges[CODE_RANGES_MAX];
  size_t count;
} code_ranges_t;

/* What the walk may read outside the stack: the executable segments of
 * every loaded object (code), and all their loaded segments (image: the
 * function pointers an indirect call reads). Taken once, when the unwinder
 * is loaded (loaded_objects): dl_iterate_phdr takes the loader's lock, and
 * a fork in a signal handler while one thread walked would leave the
 * child's lock held for ever. A library loaded later is not walked
 * through; one unloaded since is caught by object_still_loaded. */
typedef struct loaded_s {
  code_ranges_t code, image;
  code_ranges_t program; /* the code of the program itself (the first object) */
  bool program_seen;
} loaded_t;

static void ranges_add(code_ranges_t *ranges, uintptr_t start, size_t size) {
  if (ranges->count == CODE_RANGES_MAX || size == 0) return;
  ranges->ranges[ranges->count].start = start;
  ranges->ranges[ranges->count++].end = start + size;
}

static int collect_loaded(struct dl_phdr_info *info, size_t size, void *argument) {
  (void)size;
  loaded_t *loaded = argument;
  for (size_t i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *segment = &info->dlpi_phdr[i];
    if (segment->p_type != PT_LOAD) continue;
    uintptr_t start = (uintptr_t)info->dlpi_addr + segment->p_vaddr;
    if (segment->p_flags & PF_X) ranges_add(&loaded->code, start, segment->p_memsz);
    if ((segment->p_flags & PF_X) && !loaded->program_seen)
      ranges_add(&loaded->program, start, segment->p_memsz);
    if (segment->p_flags & PF_R) ranges_add(&loaded->image, start, segment->p_filesz);
  }
  return 0;
}

static int range_compare(const void *a, const void *b) {
  uintptr_t x = ((const code_range_t *)a)->start, y = ((const code_range_t *)b)->start;
  return x < y ? -1 : x > y;
}

/* Sorts ranges by start in place (insertion: they are few, or come nearly
 * sorted) and merges those that touch; returns the count kept. */
static size_t ranges_normalise(code_range_t *ranges, size_t count) {
  for (size_t i = 1; i < count; i++) {
    code_range_t moved = ranges[i];
    size_t j = i;
    for (; j > 0 && range_compare(&ranges[j - 1], &moved) > 0; j--) ranges[j] = ranges[j - 1];
    ranges[j] = moved;
  }
  size_t kept = 0;
  for (size_t i = 0; i < count; i++) {
    if (kept > 0 && ranges[i].start <= ranges[kept - 1].end) {
      if (ranges[i].end > ranges[kept - 1].end) ranges[kept - 1].end = ranges[i].end;
    } else {
      ranges[kept++] = ranges[i];
    }
  }
  return kept;
}

static loaded_t *loaded_objects; /* set before unwinder_ready */

/* glibc 2.35's lock-free lookup: whether an address is still inside a
 * loaded object (a range of the snapshot may have been unloaded). */
#pragma weak _dl_find_object
static bool object_still_loaded(uintptr_t address) {
  struct dl_find_object found;
  return _dl_find_object == NULL || _dl_find_object((void *)address, &found) == 0;
}

/* Whether [from, to) is code of one loaded object. */
static bool code_holds(const code_ranges_t *code, uintptr_t from, uintptr_t to) {
  size_t low = 0, high = code->count;
  while (low < high) {
    size_t middle = low + (high - low) / 2;
    const code_range_t *range = &code->ranges[middle];
    if (from < range->start)
      high = middle;
    else if (from >= range->end)
      low = middle + 1;
    else
      return to <= range->end;
  }
  return false;
}

/* The program's functions, sorted by start, for the start of the function
 * a frame is in (set before unwinder_ready). */
static code_range_t *program_functions;
static size_t program_function_count;

static uintptr_t function_start_of(uintptr_t pc) {
  size_t low = 0, high = program_function_count;
  while (low < high) { /* the last function starting at or before pc */
    size_t middle = low + (high - low) / 2;
    if (program_functions[middle].start <= pc)
      low = middle + 1;
    else
      high = middle;
  }
  if (low == 0 || pc >= program_functions[low - 1].end) return 0;
  return program_functions[low - 1].start;
}

typedef enum return_kind_e {
  RETURN_NONE,       /* not after a call instruction, or after one to another function */
  RETURN_VERIFIED,   /* after a call whose target is the callee's function */
  RETURN_UNVERIFIED, /* after a call whose target cannot be known */
} return_kind_t;

/* Bytes of an x86-64 ModRM operand (ModRM, SIB, displacement). */
static size_t operand_length(const uint8_t *modrm) {
  unsigned mod = modrm[0] >> 6, rm = modrm[0] & 7;
  if (mod == 3) return 1;
  size_t length = 1;
  if (rm == 4) {
    length++;
    if (mod == 0 && (modrm[1] & 7) == 5) length += 4;
  } else if (mod == 0 && rm == 5) {
    length += 4; /* rip-relative */
  }
  return length + (mod == 1 ? 1 : mod == 2 ? 4 : 0);
}

/* Whether a call to `target` fits a callee whose function starts at
 * callee_start (0: unknown, then only near below its pc). */
static bool target_fits(uintptr_t target, uintptr_t callee_start, uintptr_t callee_pc) {
  if (callee_start != 0) return target == callee_start;
  return target <= callee_pc && callee_pc - target < FUNCTION_REACH;
}

/* Whether `address` could be where a call returns to, from the function
 * that callee_pc lies in; *target gets a direct call's target. */
static return_kind_t return_address_kind(const loaded_t *loaded, uintptr_t address,
                                         uintptr_t callee_start, uintptr_t callee_pc,
                                         uintptr_t *target) {
  if (address < 8 || !code_holds(&loaded->code, address - 7, address) ||
      !object_still_loaded(address - 7))
    return RETURN_NONE;
  const uint8_t *end = (const uint8_t *)address;
  if (end[-5] == 0xE8) { /* call rel32 */
    int32_t relative;
    memcpy(&relative, end - 4, sizeof relative);
    *target = address + (uintptr_t)(intptr_t)relative;
    if (target_fits(*target, callee_start, callee_pc) &&
        code_holds(&loaded->code, *target, *target + 1))
      return callee_start != 0 ? RETURN_VERIFIED : RETURN_UNVERIFIED;
  }
  if (end[-6] == 0xFF && end[-5] == 0x15) { /* call *disp32(%rip): a pointer in the image */
    int32_t relative;
    memcpy(&relative, end - 4, sizeof relative);
    uintptr_t slot = address + (uintptr_t)(intptr_t)relative, pointer;
    if (slot % sizeof pointer == 0 && code_holds(&loaded->image, slot, slot + sizeof pointer) &&
        object_still_loaded(slot)) {
      memcpy(&pointer, (const void *)slot, sizeof pointer);
      if (callee_start != 0 && pointer == callee_start) return RETURN_VERIFIED;
      if (callee_start != 0) return RETURN_NONE;
    }
  }
  for (size_t length = 2; length <= 7; length++) { /* call *operand: FF /2, maybe after REX */
    const uint8_t *call = end - length;
    if (call[0] >= 0x40 && call[0] <= 0x4F) call++;
    if (call[0] == 0xFF && ((call[1] >> 3) & 7) == 2 &&
        (size_t)(end - call) == 1 + operand_length(call + 1))
      return RETURN_UNVERIFIED;
  }
  return RETURN_NONE;
}

/* Whether the function at `start` keeps a frame pointer: its prologue is
 * push %rbp; mov %rsp,%rbp (after endbr64, when built for CET). */
static bool keeps_frame_pointer(const loaded_t *loaded, uintptr_t start) {
  static const uint8_t endbr64[] = {0xF3, 0x0F, 0x1E, 0xFA};
  static const uint8_t prologue[] = {0x55, 0x48, 0x89, 0xE5};
  if (start == 0 || !code_holds(&loaded->code, start, start + sizeof endbr64 + sizeof prologue))
    return false;
  const uint8_t *bytes = (const uint8_t *)start;
  if (memcmp(bytes, endbr64, sizeof endbr64) == 0) bytes += sizeof endbr64;
  return memcmp(bytes, prologue, sizeof prologue) == 0;
}

/* The bytes a function's prologue puts on the stack below its return
 * address: pushes, then sub or lea of %rsp, as compilers without a frame
 * pointer write it (Free Pascal's always so). False when the prologue is of
 * another form, or pc is inside it. */
static bool prologue_frame_size(const loaded_t *loaded, uintptr_t start, uintptr_t pc,
                                size_t *size) {
  if (start == 0 || pc <= start || !code_holds(&loaded->code, start, pc)) return false;
  const uint8_t *at = (const uint8_t *)start, *end = (const uint8_t *)pc;
  size_t total = 0;
  for (int instructions = 0; instructions < 16 && end - at >= 8; instructions++) {
    int32_t displacement;
    if (at[0] == 0xF3 && at[1] == 0x0F && at[2] == 0x1E && at[3] == 0xFA) { /* endbr64 */
      at += 4;
    } else if (at[0] >= 0x50 && at[0] <= 0x57) { /* push */
      total += 8, at += 1;
    } else if (at[0] == 0x41 && at[1] >= 0x50 && at[1] <= 0x57) {
      total += 8, at += 2;
    } else if (at[0] == 0x48 && at[1] == 0x83 && at[2] == 0xEC) { /* sub $imm8,%rsp */
      if ((int8_t)at[3] < 0) return false;
      total += at[3], at += 4;
    } else if (at[0] == 0x48 && at[1] == 0x81 && at[2] == 0xEC) { /* sub $imm32,%rsp */
      memcpy(&displacement, at + 3, sizeof displacement);
      if (displacement < 0) return false;
      total += (size_t)displacement, at += 7;
    } else if (at[0] == 0x48 && at[1] == 0x8D && at[2] == 0x64 && at[3] == 0x24) {
      if ((int8_t)at[4] > 0) return false; /* lea -imm8(%rsp),%rsp */
      total += (size_t)(-(int8_t)at[4]), at += 5;
    } else if (at[0] == 0x48 && at[1] == 0x8D && at[2] == 0xA4 && at[3] == 0x24) {
      memcpy(&displacement, at + 4, sizeof displacement);
      if (displacement > 0) return false; /* lea -imm32(%rsp),%rsp */
      total += (size_t)(-(int64_t)displacement), at += 8;
    } else {
      break;
    }
  }
  *size = total;
  return at < end;
}

static uintptr_t stack_word(uintptr_t address) {
  return *(const uintptr_t *)address;
}

/* A handler returns to the C library's sigreturn trampoline, "mov
 * $15,%rax; syscall", and the kernel's ucontext follows that return
 * address on the stack: the interrupted frame's registers. */
static bool signal_return(const loaded_t *loaded, uintptr_t address, uintptr_t slot, uintptr_t high,
                          frame_state_t *interrupted) {
#if defined(__x86_64__)
  static const uint8_t sigreturn[] = {0x48, 0xC7, 0xC0, 0x0F, 0x00, 0x00, 0x00, 0x0F, 0x05};
  if (!code_holds(&loaded->code, address, address + sizeof sigreturn) ||
      !object_still_loaded(address) ||
      memcmp((const void *)address, sigreturn, sizeof sigreturn) != 0)
    return false;
  uintptr_t context = slot + sizeof(uintptr_t);
  if (high - context < sizeof(ucontext_t)) return false;
  const ucontext_t *state = (const ucontext_t *)context;
  uintptr_t pc = (uintptr_t)state->uc_mcontext.gregs[REG_RIP];
  uintptr_t sp = (uintptr_t)state->uc_mcontext.gregs[REG_RSP];
  if (sp <= context || sp >= high || sp % sizeof(uintptr_t) != 0 ||
      !code_holds(&loaded->code, pc, pc + 1))
    return false;
  /* Named like a return address: one byte further than the instruction. */
  *interrupted = (frame_state_t){pc + 1, sp, (uintptr_t)state->uc_mcontext.gregs[REG_RBP]};
  return true;
#else
  (void)loaded, (void)address, (void)slot, (void)high, (void)interrupted;
  return false;
#endif
}

/* The caller of `frame`, whose stack lies in [frame->sp, high): the
 * nearest verified return address within SCAN_REACH, else the nearest
 * unverified one. A function known to keep a frame pointer returns from
 * right above the saved one. */
static bool stack_step(const loaded_t *loaded, const frame_state_t *frame, uintptr_t high,
                       frame_state_t *caller) {
  uintptr_t callee_pc = frame->pc - 1, callee_start = function_start_of(callee_pc);
  /* The program stripped of its symbol table (as fpc links without -g):
   * no function's start to hold a return address to, and stale words pass
   * the weaker test; better no callers than made-up ones. */
  if (callee_start == 0 && code_holds(&loaded->program, callee_pc, callee_pc + 1)) return false;
  bool fp_plausible = frame->fp % sizeof(uintptr_t) == 0 && frame->fp >= frame->sp &&
                      frame->fp < high && high - frame->fp >= 2 * sizeof(uintptr_t);
  uintptr_t fp_slot = fp_plausible ? frame->fp + sizeof(uintptr_t) : 0;
  if (fp_plausible && keeps_frame_pointer(loaded, callee_start)) { /* the chain, checked */
    uintptr_t target = 0, address = stack_word(fp_slot);
    if (return_address_kind(loaded, address, callee_start, callee_pc, &target) != RETURN_NONE) {
      *caller = (frame_state_t){address, fp_slot + sizeof(uintptr_t), stack_word(frame->fp)};
      return true;
    }
  }
  size_t frame_size = 0;
  if (prologue_frame_size(loaded, callee_start, callee_pc, &frame_size) &&
      frame_size < high - frame->sp && high - frame->sp - frame_size >= sizeof(uintptr_t)) {
    uintptr_t slot = frame->sp + frame_size, target = 0, address = stack_word(slot);
    if (return_address_kind(loaded, address, callee_start, callee_pc, &target) != RETURN_NONE) {
      *caller = (frame_state_t){address, slot + sizeof(uintptr_t), frame->fp};
      return true;
    }
  }
  uintptr_t limit = high - frame->sp > SCAN_REACH ? frame->sp + SCAN_REACH : high;
  uintptr_t unverified = 0;
  for (uintptr_t slot = frame->sp; slot + sizeof(uintptr_t) <= limit; slot += sizeof(uintptr_t)) {
    uintptr_t target = 0, address = stack_word(slot);
    if (unverified == 0 && signal_return(loaded, address, slot, high, caller)) return true;
    return_kind_t kind = return_address_kind(loaded, address, callee_start, callee_pc, &target);
    if (kind == RETURN_UNVERIFIED && unverified == 0) unverified = slot;
    if (kind != RETURN_VERIFIED) continue;
    unverified = slot;
    break;
  }
  if (unverified == 0) return false;
  caller->pc = stack_word(unverified);
  caller->sp = unverified + sizeof(uintptr_t);
  caller->fp = unverified == fp_slot ? stack_word(frame->fp) : frame->fp;
  return true;
}

/* On from walk->last, a frame with no unwind table entry; or, when the
 * unwinder could not reach the program (a Free Pascal executable has no
 * .eh_frame_hdr, so libgcc finds not even shoal's own tables there), from
 * the word on the stack that holds the caller's return address. */
static void stack_walk(site_walk_t *walk, bool from_caller_word) {
#if !defined(__x86_64__)
  (void)from_caller_word;
  site_note(SITE_NOTE_WALK_STOPPED); /* return_address_kind reads x86-64 code */
  return;
#endif
  uintptr_t low, high;
  uintptr_t here = (uintptr_t)__builtin_frame_address(0);
  if (from_caller_word) walk->last.sp = here;
  if (!thread_stack(walk->in_signal, &low, &high) || walk->last.sp < low || walk->last.sp >= high) {
    site_note(SITE_NOTE_STACK_UNKNOWN);
    return;
  }
  if (from_caller_word) {
    uintptr_t limit = high - here > SCAN_REACH ? here + SCAN_REACH : high;
    uintptr_t slot = here & ~(uintptr_t)(sizeof(uintptr_t) - 1);
    while (slot + sizeof(uintptr_t) <= limit && stack_word(slot) != (uintptr_t)walk->caller)
      slot += sizeof(uintptr_t);
    if (slot + sizeof(uintptr_t) > limit) return;
    walk->matched = true;
    walk->last = (frame_state_t){(uintptr_t)walk->caller, slot + sizeof(uintptr_t), 0};
    if (!site_keep(walk, walk->last.pc)) return;
  }
  const loaded_t *loaded = loaded_objects;
  if (loaded == NULL) return;
  frame_state_t frame = walk->last;
  char bases[3 * sizeof(void *)];
  while (!walk->full) {
    frame_state_t caller;
    if (!stack_step(loaded, &frame, high, &caller)) {
      if (high - frame.sp > SCAN_REACH) site_note(SITE_NOTE_WALK_STOPPED);
      return;
    }
    if (!site_keep(walk, caller.pc)) return;
    /* Into a library's code with tables: the C library's start of main or
     * of a thread, where the program's stack ends. */
    if (!code_holds(&loaded->program, caller.pc - 1, caller.pc) &&
        unwinder.find_fde((void *)(caller.pc - 1), bases) != NULL)
      return;
    frame = caller;
  }
}

/* Whether code is the program's own (not a library's, nor the loader's). */
static bool code_of_program(const void *code) {
  Dl_info info;
  void *extra = NULL;
  if (dladdr1(code, &info, &extra, RTLD_DL_LINKMAP) == 0 || extra == NULL) return false;
  const struct link_map *map = extra;
  return map->l_name == NULL || map->l_name[0] == '\0';
}

static void unwinder_load(void);

/* The frames from the exported function's caller outwards. */
void site_capture(site_t *site, caller_t caller) {
  memset(site, 0, sizeof *site);
  site->frames[0] = caller;
  site->entry = caller;
  if (!atomic_load_explicit(&unwinder_ready, memory_order_acquire)) {
    /* A host that runs no constructors (a Free Pascal program linking
     * libshoal.a): the first call from the program's own code loads the
     * unwinder, not one from the loader or the C library starting up. */
    if (atomic_load_explicit(&unwinder_failed, memory_order_relaxed))
      site_note(SITE_NOTE_NO_UNWINDER);
    if (atomic_load_explicit(&unwinder_tried, memory_order_relaxed) || diag_locks_held != 0 ||
        !code_of_program(caller) || atomic_exchange(&unwinder_tried, true))
      return;
    unwinder_load();
    if (!atomic_load_explicit(&unwinder_ready, memory_order_acquire)) return;
  }
  site_walk_t walk;
  memset(&walk, 0, sizeof walk);
  walk.site = site;
  walk.caller = caller;
  unwinder.backtrace(unwind_step, &walk);
  char bases[3 * sizeof(void *)];
  if (!walk.matched && unwinder.find_fde((void *)(walk.first_pc - 1), bases) == NULL)
    stack_walk(&walk, true);
  else if (!walk.full && unwinder.find_fde((void *)(walk.last.pc - 1), bases) == NULL)
    stack_walk(&walk, false);
  if (walk.stored == 0) { /* no frame of the program's found */
    memset(site, 0, sizeof *site);
    site->frames[0] = caller;
    site->entry = caller;
  }
}

static bool names_main(const char *name) {
  return strncmp(name, "main+", 5) == 0 || strncmp(name, "main (", 6) == 0;
}

size_t site_format(const site_t *site, char *out, size_t capacity) {
  size_t length = 0;
  out[0] = '\0';
  for (int i = 0; i < SITE_FRAMES && site->frames[i] != NULL && length + 8 < capacity; i++) {
    if (i > 0) length += (size_t)snprintf(out + length, capacity - length, " <- ");
    if (length >= capacity) break;
    size_t name = length;
    length += frame_name(site->frames[i], out + length, capacity - length);
    if (names_main(out + name)) break; /* what calls main is noise */
  }
  return length < capacity ? length : capacity - 1;
}

void site_notes_write(void) {
  int notes = atomic_load_explicit(&site_notes, memory_order_relaxed);
  if (notes == 0) return;
  char line[1024];
  size_t length = 0;
  static const struct {
    int note;
    const char *text;
  } reasons[] = {
      {SITE_NOTE_NO_UNWINDER, "one frame each: libgcc_s.so.1 could not be loaded"},
      {SITE_NOTE_STACK_UNKNOWN,
       "not followed past code without unwind tables on a stack of unknown bounds"},
      {SITE_NOTE_WALK_STOPPED,
       "some end early: no caller found above a frame without unwind tables"},
      {SITE_NOTE_NO_LIBDW, "no files or lines: libdw.so.1 could not be loaded (Debian: libdw1)"},
      {SITE_NOTE_PLAIN, NULL},
  };
  for (size_t i = 0; i < sizeof reasons / sizeof reasons[0] && length < sizeof line; i++) {
    if (!(notes & reasons[i].note)) continue;
    const char *text = reasons[i].text;
    char plain[256];
    if (text == NULL) {
      frame_names_plain_reason(plain, sizeof plain);
      text = plain;
    }
    length +=
        (size_t)snprintf(line + length, sizeof line - length, "%s%s", length ? "; " : "", text);
  }
  if (notes & (SITE_NOTE_NO_DEBUG_INFO | SITE_NOTE_NO_SYMBOLS) && length < sizeof line)
    length += frame_names_missing_info(line + length, sizeof line - length, length != 0);
  output_report_line("shoal: call stacks: %s", line);
}

/* The leading frames a report leaves out, by their .symtab names: ShoalMM's
 * and the Free Pascal run-time library's (GetMem, the compiler's helpers for
 * strings, dynamic arrays and objects, TObject.NewInstance, and the RTL's
 * classes and routines that allocate for the program: TStringList.Create,
 * IntToStr...), so that the first frame shown is the program's own line.
 * FPC names a routine UNIT_$$_NAME and a method UNIT$_$CLASS_$__$$_NAME. */
static bool is_allocation_entry(const char *name) {
  static const char *const units[] = {
      "SHOALMM",  "SYSTEM",    "OBJPAS",   "SYSUTILS",  "CLASSES",  "TYPES",
      "TYPINFO",  "RTLCONSTS", "SYSCONST", "MATH",      "STRUTILS", "DATEUTILS",
      "VARIANTS", "FGL",       "CONTNRS",  "CTHREADS",  "UNIX",     "BASEUNIX",
      "UNIXUTIL", "SYNCOBJS",  "INIFILES", "CHARACTER", "LAZUTF8",
  };
  if (strncmp(name, "fpc_", 4) == 0 || strncmp(name, "FPC_", 4) == 0) return true;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    size_t length = strlen(units[i]);
    if (strncmp(name, units[i], length) == 0 &&
        (strncmp(name + length, "_$$_", 4) == 0 || strncmp(name + length, "$_$", 3) == 0))
      return true;
  }
  return false;
}

#define SKIP_RANGES_MAX       16384
#define PROGRAM_FUNCTIONS_MAX ((size_t)1 << 18)

static bool any_function(const char *name) {
  (void)name;
  return true;
}

/* Sorted by start; aliases stay (the same start twice). */
static void program_functions_load(void) {
  size_t bytes = PROGRAM_FUNCTIONS_MAX * sizeof(code_range_t);
  code_range_t *ranges = os_map_aligned(bytes, os_page_size());
  if (ranges == NULL) return;
  size_t count = symbol_program_ranges(any_function, ranges, PROGRAM_FUNCTIONS_MAX);
  qsort(ranges, count, sizeof ranges[0], range_compare);
  program_functions = ranges;
  program_function_count = count;
}

static void loaded_objects_load(void) {
  size_t bytes = (sizeof(loaded_t) + os_page_size() - 1) & ~(os_page_size() - 1);
  loaded_t *loaded = os_map_aligned(bytes, os_page_size());
  if (loaded == NULL) return;
  dl_iterate_phdr(collect_loaded, loaded);
  loaded->code.count = ranges_normalise(loaded->code.ranges, loaded->code.count);
  loaded->image.count = ranges_normalise(loaded->image.ranges, loaded->image.count);
  loaded->program.count = ranges_normalise(loaded->program.ranges, loaded->program.count);
  loaded_objects = loaded;
}

static void skip_ranges_load(void) {
  size_t bytes = SKIP_RANGES_MAX * sizeof(code_range_t);
  code_range_t *ranges = os_map_aligned(bytes, os_page_size());
  if (ranges == NULL) return;
  size_t count = symbol_program_ranges(is_allocation_entry, ranges, SKIP_RANGES_MAX);
  if (count == 0) {
    os_unmap(ranges, bytes);
    return;
  }
  skip_count = ranges_normalise(ranges, count);
  skip_ranges = ranges;
}

/* Called once the library is initialised (its constructor), not from
 * inside an allocation: dlopen allocates, and takes the loader's lock. */
void diag_load_unwinder(void) {
  if (!(diag_mode() & (DIAG_LEAKS | DIAG_CHECK | DIAG_CONTENTION))) return;
  if (atomic_exchange(&unwinder_tried, true)) return;
  unwinder_load();
}

static void unwinder_load(void) {
  unwinder_t found = {NULL, NULL, NULL, NULL, NULL};
  if (_Unwind_Backtrace != NULL && _Unwind_GetIPInfo != NULL && _Unwind_GetCFA != NULL &&
      _Unwind_GetGR != NULL && _Unwind_Find_FDE != NULL) {
    found.backtrace = _Unwind_Backtrace;
    found.get_ip_info = _Unwind_GetIPInfo;
    found.get_cfa = _Unwind_GetCFA;
    found.get_gr = _Unwind_GetGR;
    found.find_fde = _Unwind_Find_FDE;
  } else {
    /* What the loader keeps of this is the runtime's, not the program's:
     * the sampled leak report leaves it out of its counts. */
    static shoal_stats_t before, after;
    stats_fill(&before);
    void *libgcc = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
    stats_fill(&after);
    for (size_t i = 0; i < SHOAL_STATS_SIZE_CLASSES; i++)
      if (after.classes[i].live > before.classes[i].live)
        unwinder_live[i] = after.classes[i].live - before.classes[i].live;
    if (libgcc == NULL) {
      atomic_store_explicit(&unwinder_failed, true, memory_order_relaxed);
      return;
    }
    *(void **)&found.backtrace = dlsym(libgcc, "_Unwind_Backtrace");
    *(void **)&found.get_ip_info = dlsym(libgcc, "_Unwind_GetIPInfo");
    *(void **)&found.get_cfa = dlsym(libgcc, "_Unwind_GetCFA");
    *(void **)&found.get_gr = dlsym(libgcc, "_Unwind_GetGR");
    *(void **)&found.find_fde = dlsym(libgcc, "_Unwind_Find_FDE");
    if (found.backtrace == NULL || found.get_ip_info == NULL || found.get_cfa == NULL ||
        found.get_gr == NULL || found.find_fde == NULL) {
      atomic_store_explicit(&unwinder_failed, true, memory_order_relaxed);
      return;
    }
  }
  loaded_objects_load();
  if (loaded_objects == NULL) return;
  skip_ranges_load();
  program_functions_load();
  unwinder = found;
  atomic_store_explicit(&unwinder_ready, true, memory_order_release);
}
