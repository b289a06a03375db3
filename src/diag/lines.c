/* lines.c — frames named from debug information: "function (file:line)".
 *
 * A report names each return address of its call stacks with frame_name.
 * When the object holding it has DWARF line information, the frame reads
 * `TSpeedTest.Execute (main.pas:130)` (Pascal), `Pool::grow(unsigned long)
 * (pool.cpp:42)` (C++, demangled) or `make_cache (prog.c:17)`; otherwise
 * symbols.c's `function+0xOFF (object)`. DWARF is read by elfutils' libdw,
 * loaded with dlopen("libdw.so.1") when a report first needs it, so that a
 * program with no diagnostic maps nothing more:
 *
 *   frame_name(return address)
 *     cache_slot        once per distinct address: the text kept in memory
 *                       mapped from the OS (names_lock)
 *     libdw_load        dlopen + dlsym, once; the C++ demangler with it
 *     module_for        dladdr1: the object and its load bias; reported to
 *                       libdwfl once (dwfl_report_elf), with its separate
 *                       debug file when one is installed
 *     unit_of           the compile unit holding it (by .debug_aranges, else
 *                       unit by unit: clang writes none)
 *     dwarf_getsrc_die  file and line of the call
 *     function_search   the innermost subprogram or inlined call holding
 *                       the address, inside classes too (Free Pascal puts
 *                       methods there)
 *     pascal_spelling   FPC's DWARF 2 (-gl) spells names in capitals; the
 *                       declaration in the source, when it can be read,
 *                       gives the program's own spelling (-gw3 has it)
 *
 * libdw allocates through malloc, that is through shoal: reports run with
 * diag_inside set, so those blocks come straight from the core and are never
 * tracked as the program's. Where that would be unsafe, names stay plain
 * (symbol tables only, nothing allocated): after frame_names_plain (a
 * damaged heap, a signal handler), while this thread holds a diagnostics
 * lock and libdw is not loaded yet (dlopen takes the loader's lock, and a
 * thread inside dlopen may be waiting on ours), and while another thread
 * holds names_lock (libdwfl is not thread-safe; no waiting in a report).
 * Each reason for a plainer report is noted once for site_notes_write. */
#define _GNU_SOURCE
#include "diag/diag.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>

#if defined(__has_include)
#if __has_include(<elfutils/libdwfl.h>) && __has_include(<dwarf.h>)
#define SHOAL_HAVE_LIBDW 1
#endif
#endif

enum {
  CACHE_SLOTS = 4096,        /* distinct addresses named, a power of two */
  CACHE_TEXT = 512 * 1024,   /* bytes of their names */
  MODULES_MAX = 64,          /* objects reported to libdwfl */
  MISSING_MAX = 4,           /* objects named in the note */
  NAME_MAX_LENGTH = 512,     /* one frame's text */
  SPELLING_LINES_BACK = 300, /* how far above `begin` a declaration may be */
};

static shoal_lock_t names_lock = SHOAL_LOCK_INIT;
static _Atomic(bool) names_plain;
static const char *names_plain_why = "";

/* ---- the cache (names_lock) ---- */

typedef struct cache_slot_s {
  uintptr_t address; /* 0: empty */
  uint32_t text;     /* offset in cache_text */
  uint32_t length;
} cache_slot_t;

static cache_slot_t *cache_slots; /* mapped at first use */
static char *cache_text;
static size_t cache_text_used;

static bool cache_ready(void) {
  if (cache_slots != NULL) return true;
  cache_slot_t *slots = os_map_aligned(CACHE_SLOTS * sizeof(cache_slot_t), os_page_size());
  char *text = slots == NULL ? NULL : os_map_aligned(CACHE_TEXT, os_page_size());
  if (text == NULL) {
    if (slots != NULL) os_unmap(slots, CACHE_SLOTS * sizeof(cache_slot_t));
    return false;
  }
  cache_slots = slots;
  cache_text = text;
  return true;
}

static cache_slot_t *cache_slot(uintptr_t address) {
  size_t start = (size_t)((address * 0x9E3779B97F4A7C15u) >> 52) & (CACHE_SLOTS - 1);
  for (size_t i = 0; i < CACHE_SLOTS; i++) {
    cache_slot_t *slot = &cache_slots[(start + i) & (CACHE_SLOTS - 1)];
    if (slot->address == address || slot->address == 0) return slot;
  }
  return NULL;
}

static void cache_store(cache_slot_t *slot, uintptr_t address, const char *text, size_t length) {
  if (slot == NULL || cache_text_used + length > CACHE_TEXT) return;
  memcpy(cache_text + cache_text_used, text, length);
  slot->address = address;
  slot->text = (uint32_t)cache_text_used;
  slot->length = (uint32_t)length;
  cache_text_used += length;
}

static size_t copy_out(char *out, size_t capacity, const char *text, size_t length) {
  if (capacity == 0) return 0;
  if (length >= capacity) length = capacity - 1;
  memcpy(out, text, length);
  out[length] = '\0';
  return length;
}

/* ---- objects without debug information, for the note ---- */

static char missing_names[MISSING_MAX][64];
static bool missing_stripped[MISSING_MAX];
static size_t missing_count;

/* The system's own libraries come without debug information: not news. */
static bool is_system_object(const char *path) {
  return strncmp(path, "/lib", 4) == 0 || strncmp(path, "/usr/lib", 8) == 0 ||
         strstr(path, "linux-vdso") != NULL;
}

static void note_missing(const char *path, const char *shown, bool stripped) {
  if (is_system_object(path)) return;
  site_note(stripped ? SITE_NOTE_NO_SYMBOLS : SITE_NOTE_NO_DEBUG_INFO);
  for (size_t i = 0; i < missing_count; i++)
    if (strcmp(missing_names[i], shown) == 0) {
      missing_stripped[i] = missing_stripped[i] || stripped;
      return;
    }
  if (missing_count == MISSING_MAX) return;
  copy_out(missing_names[missing_count], sizeof missing_names[0], shown, strlen(shown));
  missing_stripped[missing_count++] = stripped;
}

/* The plain name: symbols.c's, of the call instruction. Names with no
 * symbol ("0x...") say the object was stripped. */
static size_t plain_name(uintptr_t address, char *out, size_t capacity, bool note) {
  size_t length = symbol_name((const void *)address, out, capacity);
  if (note && length > 2 && out[0] == '0' && out[1] == 'x') {
    Dl_info info;
    if (dladdr((const void *)address, &info) != 0 && info.dli_fname != NULL) {
      const char *open = strchr(out, '(');
      char shown[64];
      size_t n = 0;
      for (const char *p = open != NULL ? open + 1 : out;
           *p != '\0' && *p != '+' && *p != ')' && n + 1 < sizeof shown; p++)
        shown[n++] = *p;
      shown[n] = '\0';
      note_missing(info.dli_fname, shown, true);
    }
  }
  return length;
}

#if SHOAL_HAVE_LIBDW
#include <dwarf.h>
#include <elfutils/libdwfl.h>

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

/* ---- libdw, loaded when first needed ---- */

typedef struct libdw_s {
  Dwfl *(*begin)(const Dwfl_Callbacks *);
  void (*end)(Dwfl *);
  void (*report_begin_add)(Dwfl *);
  Dwfl_Module *(*report_elf)(Dwfl *, const char *, const char *, int, GElf_Addr, bool);
  int (*report_end)(Dwfl *, int (*)(Dwfl_Module *, void *, const char *, Dwarf_Addr, void *),
                    void *);
  Dwarf_Die *(*module_addrdie)(Dwfl_Module *, Dwarf_Addr, Dwarf_Addr *);
  int (*child)(Dwarf_Die *, Dwarf_Die *);
  int (*siblingof)(Dwarf_Die *, Dwarf_Die *);
  int (*tag)(Dwarf_Die *);
  int (*haspc)(Dwarf_Die *, Dwarf_Addr);
  int (*lowpc)(Dwarf_Die *, Dwarf_Addr *);
  int (*srclang)(Dwarf_Die *);
  const char *(*diename)(Dwarf_Die *);
  Dwarf_Attribute *(*attr_integrate)(Dwarf_Die *, unsigned int, Dwarf_Attribute *);
  const char *(*formstring)(Dwarf_Attribute *);
  int (*module_build_id)(Dwfl_Module *, const unsigned char **, GElf_Addr *);
  Dwarf *(*module_getdwarf)(Dwfl_Module *, Dwarf_Addr *);
  int (*nextcu)(Dwarf *, Dwarf_Off, Dwarf_Off *, size_t *, Dwarf_Off *, uint8_t *, uint8_t *);
  Dwarf_Die *(*offdie)(Dwarf *, Dwarf_Off, Dwarf_Die *);
  Dwarf_Line *(*getsrc_die)(Dwarf_Die *, Dwarf_Addr);
  int (*lineno)(Dwarf_Line *, int *);
  const char *(*linesrc)(Dwarf_Line *, Dwarf_Word *, Dwarf_Word *);
} libdw_t;

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

static enum { LIBDW_UNTRIED, LIBDW_LOADED, LIBDW_MISSING } libdw_state; /* (names_lock) */
static libdw_t libdw;
static demangle_fn demangle;         /* libstdc++'s, when the program has it */
static void (*process_free)(void *); /* the free that matches the demangler's malloc */
static Dwfl *dwfl;
static Dwfl_Callbacks dwfl_callbacks;
static char *debuginfo_path;

typedef struct module_s {
  uintptr_t bias;
  uint64_t path_hash;
  Dwfl_Module *module; /* NULL: libdwfl could not read it */
} module_t;
static module_t modules[MODULES_MAX];
static size_t module_count;

static bool libdw_ready(void) {
  return libdw_state == LIBDW_LOADED;
}

/* Every object is reported with its file: nothing to find. */
static int no_elf_to_find(Dwfl_Module *module, void **user_data, const char *name, Dwarf_Addr base,
                          char **file_name, Elf **elf) {
  (void)module, (void)user_data, (void)name, (void)base, (void)file_name, (void)elf;
  return -1;
}

/* An object without DWARF may have it in a separate file installed by its
 * build ID (Debian's -dbgsym packages, libc6-dbg). Only there: libdwfl's
 * standard search would also load the debuginfod client (libcurl and
 * TLS libraries, whose blocks outlive the report) to ask the network. */
static int debug_file_by_build_id(Dwfl_Module *module, void **user_data, const char *name,
                                  Dwarf_Addr base, const char *file_name,
                                  const char *debuglink_file, GElf_Word debuglink_crc,
                                  char **debuginfo_file_name) {
  (void)user_data, (void)name, (void)base, (void)file_name, (void)debuglink_file;
  (void)debuglink_crc, (void)debuginfo_file_name;
  const unsigned char *bits = NULL;
  GElf_Addr address = 0;
  int length = libdw.module_build_id(module, &bits, &address);
  static const char prefix[] = "/usr/lib/debug/.build-id/", suffix[] = ".debug";
  char path[sizeof prefix + 2 * 64 + 1 + sizeof suffix];
  if (length < 2 || length > 64) return -1;
  size_t at = copy_out(path, sizeof path, prefix, sizeof prefix - 1);
  for (int i = 0; i < length; i++) {
    path[at++] = "0123456789abcdef"[bits[i] >> 4];
    path[at++] = "0123456789abcdef"[bits[i] & 15];
    if (i == 0) path[at++] = '/';
  }
  copy_out(path + at, sizeof path - at, suffix, sizeof suffix - 1);
  return os_open_read(path);
}

static bool libdw_load(void) {
  if (libdw_state != LIBDW_UNTRIED) return libdw_state == LIBDW_LOADED;
  libdw_state = LIBDW_MISSING;
  void *library = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    site_note(SITE_NOTE_NO_LIBDW);
    return false;
  }
  struct {
    void **slot;
    const char *name;
  } wanted[] = {
      {(void **)&libdw.begin, "dwfl_begin"},
      {(void **)&libdw.end, "dwfl_end"},
      {(void **)&libdw.report_begin_add, "dwfl_report_begin_add"},
      {(void **)&libdw.report_elf, "dwfl_report_elf"},
      {(void **)&libdw.report_end, "dwfl_report_end"},
      {(void **)&libdw.module_addrdie, "dwfl_module_addrdie"},
      {(void **)&libdw.child, "dwarf_child"},
      {(void **)&libdw.siblingof, "dwarf_siblingof"},
      {(void **)&libdw.tag, "dwarf_tag"},
      {(void **)&libdw.haspc, "dwarf_haspc"},
      {(void **)&libdw.lowpc, "dwarf_lowpc"},
      {(void **)&libdw.srclang, "dwarf_srclang"},
      {(void **)&libdw.diename, "dwarf_diename"},
      {(void **)&libdw.attr_integrate, "dwarf_attr_integrate"},
      {(void **)&libdw.formstring, "dwarf_formstring"},
      {(void **)&libdw.module_build_id, "dwfl_module_build_id"},
      {(void **)&libdw.module_getdwarf, "dwfl_module_getdwarf"},
      {(void **)&libdw.nextcu, "dwarf_nextcu"},
      {(void **)&libdw.offdie, "dwarf_offdie"},
      {(void **)&libdw.getsrc_die, "dwarf_getsrc_die"},
      {(void **)&libdw.lineno, "dwarf_lineno"},
      {(void **)&libdw.linesrc, "dwarf_linesrc"},
  };
  for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
    *wanted[i].slot = dlsym(library, wanted[i].name);
    if (*wanted[i].slot == NULL) {
      site_note(SITE_NOTE_NO_LIBDW);
      return false;
    }
  }
  *(void **)&demangle = dlsym(RTLD_DEFAULT, "__cxa_demangle");
  *(void **)&process_free = dlsym(RTLD_DEFAULT, "free");
  if (process_free == NULL) demangle = NULL;
  dwfl_callbacks.find_elf = no_elf_to_find;
  dwfl_callbacks.find_debuginfo = debug_file_by_build_id;
  dwfl_callbacks.debuginfo_path = &debuginfo_path;
  libdw_state = LIBDW_LOADED;
  return true;
}

/* The object holding address, reported to libdwfl once; *path gets the
 * loader's name for it. */
static Dwfl_Module *module_for(uintptr_t address, const char **path) {
  Dl_info info;
  void *extra = NULL;
  if (dladdr1((const void *)address, &info, &extra, RTLD_DL_LINKMAP) == 0 || extra == NULL)
    return NULL;
  const struct link_map *map = extra;
  *path = info.dli_fname != NULL ? info.dli_fname : "";
  /* The program: its file by the kernel's link (the loader's name is
   * argv[0], relative to a directory the program may have left). */
  const char *file = map->l_name == NULL || map->l_name[0] == '\0' ? "/proc/self/exe" : *path;
  uint64_t hash = text_hash(file);
  for (size_t i = 0; i < module_count; i++)
    if (modules[i].bias == map->l_addr && modules[i].path_hash == hash) return modules[i].module;
  if (dwfl == NULL && (dwfl = libdw.begin(&dwfl_callbacks)) == NULL) return NULL;
  libdw.report_begin_add(dwfl);
  Dwfl_Module *module = libdw.report_elf(dwfl, base_name(*path), file, -1, map->l_addr, true);
  const char *started = (const char *)getauxval(AT_EXECFN); /* without /proc */
  if (module == NULL && file != *path && started != NULL)
    module = libdw.report_elf(dwfl, base_name(started), started, -1, map->l_addr, true);
  libdw.report_end(dwfl, NULL, NULL);
  if (module_count < MODULES_MAX)
    modules[module_count++] = (module_t){(uintptr_t)map->l_addr, hash, module};
  return module;
}

/* ---- the function ---- */

typedef struct function_search_s {
  Dwarf_Addr pc;
  Dwarf_Die function; /* innermost subprogram or inlined call holding pc */
  bool found;
  const char *container; /* the class (Pascal) that holds it, or NULL */
} function_search_t;

static bool is_container(int tag) {
  return tag == DW_TAG_class_type || tag == DW_TAG_structure_type || tag == DW_TAG_namespace ||
         tag == DW_TAG_module;
}

static void function_search(Dwarf_Die *parent, function_search_t *search, const char *container,
                            int depth) {
  Dwarf_Die child;
  if (depth > 24 || libdw.child(parent, &child) != 0) return;
  do {
    int tag = libdw.tag(&child);
    if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) {
      if (libdw.haspc(&child, search->pc) == 1) {
        search->function = child;
        search->found = true;
        search->container = container;
        function_search(&child, search, container, depth + 1); /* inlined calls inside */
        return;
      }
    } else if (tag == DW_TAG_lexical_block) {
      if (libdw.haspc(&child, search->pc) == 1) {
        function_search(&child, search, container, depth + 1);
        if (search->found) return;
      }
    } else if (is_container(tag)) {
      const char *name = libdw.diename(&child);
      function_search(&child, search, name != NULL ? name : container, depth + 1);
      if (search->found) return;
    }
  } while (libdw.siblingof(&child, &child) == 0);
}

static bool is_identifier_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static char lower(char c) {
  return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static bool same_ignoring_case(const char *a, const char *b, size_t length) {
  for (size_t i = 0; i < length; i++)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

/* Whether the line [from, to) declares `name` (a dotted name):
 * procedure/function/constructor/destructor, spaces, the name, not more of
 * an identifier. Copies the source's spelling into out. */
static bool line_declares(const char *from, const char *to, const char *name, char *out) {
  static const char *const keywords[] = {"procedure", "function", "constructor", "destructor"};
  size_t name_length = strlen(name);
  for (const char *p = from; p < to; p++) {
    if (p > from && is_identifier_char(p[-1])) continue;
    for (size_t k = 0; k < sizeof keywords / sizeof keywords[0]; k++) {
      size_t keyword_length = strlen(keywords[k]);
      if ((size_t)(to - p) < keyword_length || !same_ignoring_case(p, keywords[k], keyword_length))
        continue;
      const char *q = p + keyword_length;
      if (q >= to || (*q != ' ' && *q != '\t')) continue;
      while (q < to && (*q == ' ' || *q == '\t')) q++;
      if ((size_t)(to - q) < name_length || !same_ignoring_case(q, name, name_length)) continue;
      if (q + name_length < to && is_identifier_char(q[name_length])) continue;
      memcpy(out, q, name_length);
      out[name_length] = '\0';
      return true;
    }
  }
  return false;
}

/* Free Pascal's DWARF 2 names are in capitals: the declaration a few lines
 * above the function's first line gives the program's spelling. */
enum { PATH_JOINED_MAX = 1024 }; /* a source's path, joined to its compile folder */

static void pascal_spelling(const char *source, int first_line, char *name) {
  size_t size = 0;
  const char *text = os_map_file(source, &size);
  if (text == NULL) return;
  const char *lines[SPELLING_LINES_BACK + 1];
  size_t kept = 0, next = 0;
  int number = 1;
  const char *line = text, *end = text + size;
  while (line < end && number <= first_line) { /* the last lines up to first_line, a ring */
    lines[next] = line;
    next = (next + 1) % (SPELLING_LINES_BACK + 1);
    if (kept < SPELLING_LINES_BACK + 1) kept++;
    const char *newline = memchr(line, '\n', (size_t)(end - line));
    line = newline != NULL ? newline + 1 : end;
    number++;
  }
  char spelled[NAME_MAX_LENGTH];
  for (size_t i = 0; i < kept; i++) {
    const char *start = lines[(next + SPELLING_LINES_BACK + 1 - 1 - i) % (SPELLING_LINES_BACK + 1)];
    const char *stop = memchr(start, '\n', (size_t)(end - start));
    if (line_declares(start, stop != NULL ? stop : end, name, spelled)) {
      memcpy(name, spelled, strlen(spelled) + 1);
      break;
    }
  }
  os_unmap_file(text, size);
}

static bool all_capitals(const char *name) {
  bool letter = false;
  for (; *name != '\0'; name++) {
    if (*name >= 'a' && *name <= 'z') return false;
    if (*name >= 'A' && *name <= 'Z') letter = true;
  }
  return letter;
}

/* The compile unit holding pc (a file address): from the address ranges
 * when the object has them, else by looking at each unit (clang writes no
 * .debug_aranges, and this libdw does not make them up). */
static bool unit_of(Dwfl_Module *module, uintptr_t address, Dwarf_Die *unit, Dwarf_Addr *bias) {
  Dwarf_Die *found = libdw.module_addrdie(module, address, bias);
  if (found != NULL) {
    *unit = *found;
    return true;
  }
  Dwarf *dwarf = libdw.module_getdwarf(module, bias);
  if (dwarf == NULL) return false;
  Dwarf_Addr pc = address - *bias;
  Dwarf_Off offset = 0, next = 0;
  size_t header_size = 0;
  while (libdw.nextcu(dwarf, offset, &next, &header_size, NULL, NULL, NULL) == 0) {
    if (libdw.offdie(dwarf, offset + header_size, unit) != NULL && libdw.haspc(unit, pc) == 1)
      return true;
    offset = next;
  }
  return false;
}

/* The function's name for a report, into name (NAME_MAX_LENGTH). */
static bool function_name(Dwarf_Die *unit, Dwarf_Addr pc, char *name) {
  function_search_t search = {.pc = pc, .found = false, .container = NULL};
  function_search(unit, &search, NULL, 0);
  if (!search.found) return false;
  Dwarf_Attribute attribute;
  const char *linkage = NULL;
  if (libdw.attr_integrate(&search.function, DW_AT_linkage_name, &attribute) != NULL ||
      libdw.attr_integrate(&search.function, DW_AT_MIPS_linkage_name, &attribute) != NULL)
    linkage = libdw.formstring(&attribute);
  if (linkage != NULL && strncmp(linkage, "_Z", 2) == 0 && demangle != NULL) {
    int status = -1;
    char *plain = demangle(linkage, NULL, NULL, &status); /* malloc'ed: from the core */
    if (plain != NULL && status == 0) copy_out(name, NAME_MAX_LENGTH, plain, strlen(plain));
    if (plain != NULL) process_free(plain);
    if (status == 0) return true;
  }
  const char *short_name = libdw.diename(&search.function);
  if (short_name == NULL) short_name = linkage;
  if (short_name == NULL) return false;
  bool pascal = libdw.srclang(unit) == DW_LANG_Pascal83;
  size_t length = 0;
  name[0] = '\0';
  if (search.container != NULL && pascal) {
    length = copy_out(name, NAME_MAX_LENGTH, search.container, strlen(search.container));
    length += copy_out(name + length, NAME_MAX_LENGTH - length, ".", 1);
  }
  copy_out(name + length, NAME_MAX_LENGTH - length, short_name, strlen(short_name));
  if (pascal && all_capitals(name)) {
    Dwarf_Addr low = 0;
    int first_line = 0;
    Dwarf_Line *line =
        libdw.lowpc(&search.function, &low) == 0 ? libdw.getsrc_die(unit, low) : NULL;
    const char *source = line != NULL ? libdw.linesrc(line, NULL, NULL) : NULL;
    char joined[PATH_JOINED_MAX];
    Dwarf_Attribute directory;
    const char *compiled_in = NULL;
    if (source != NULL && source[0] != '/' &&
        libdw.attr_integrate(unit, DW_AT_comp_dir, &directory) != NULL)
      compiled_in = libdw.formstring(&directory);
    if (compiled_in != NULL) { /* fpc run elsewhere than the source's folder */
      int written = snprintf(joined, sizeof joined, "%s/%s", compiled_in, source);
      source = written > 0 && (size_t)written < sizeof joined ? joined : NULL;
    }
    if (source != NULL && libdw.lineno(line, &first_line) == 0)
      pascal_spelling(source, first_line, name);
  }
  return true;
}

/* "function (file:line)", or 0 when the object has no line for address. */
static size_t describe(uintptr_t address, char *out, size_t capacity) {
  const char *path = "";
  Dwfl_Module *module = module_for(address, &path);
  Dwarf_Die unit;
  Dwarf_Addr bias = 0;
  Dwarf_Line *line = NULL;
  int number = 0;
  const char *file = NULL;
  if (module != NULL && unit_of(module, address, &unit, &bias) &&
      (line = libdw.getsrc_die(&unit, address - bias)) != NULL && libdw.lineno(line, &number) == 0)
    file = libdw.linesrc(line, NULL, NULL);
  if (file == NULL) {
    const char *shown = base_name(path);
    if (shown[0] != '\0') note_missing(path, shown, false); /* else in no object at all */
    return 0;
  }
  char name[NAME_MAX_LENGTH];
  if (!function_name(&unit, address - bias, name)) {
    /* Lines without the function's entry: the symbol table's name. */
    size_t length = symbol_name((const void *)address, name, sizeof name);
    char *plus = strchr(name, '+');
    if (plus != NULL && length > 2 && !(name[0] == '0' && name[1] == 'x')) *plus = '\0';
  }
  char digits[16];
  size_t count = 0;
  unsigned value = number > 0 ? (unsigned)number : 0;
  do {
    digits[sizeof digits - 1 - count++] = (char)('0' + value % 10);
    value /= 10;
  } while (value != 0 && count < sizeof digits);
  size_t length = copy_out(out, capacity, name, strlen(name));
  length += copy_out(out + length, capacity - length, " (", 2);
  file = base_name(file);
  length += copy_out(out + length, capacity - length, file, strlen(file));
  length += copy_out(out + length, capacity - length, ":", 1);
  length += copy_out(out + length, capacity - length, digits + sizeof digits - count, count);
  length += copy_out(out + length, capacity - length, ")", 1);
  return length;
}

void frame_names_release(void) {
  if (!lock_try_acquire(&names_lock)) return;
  if (dwfl != NULL) libdw.end(dwfl);
  dwfl = NULL;
  module_count = 0;
  lock_release(&names_lock);
}

#else /* no libdw headers at build time: symbol tables only */

static bool libdw_ready(void) {
  return false;
}

static bool libdw_load(void) {
  site_note(SITE_NOTE_NO_LIBDW);
  return false;
}

static size_t describe(uintptr_t address, char *out, size_t capacity) {
  (void)address, (void)out, (void)capacity;
  return 0;
}

void frame_names_release(void) {}

#endif

/* The C library's sigreturn trampoline ("mov $15,%rax; syscall"), where a
 * signal handler returns: the frame gdb calls <signal handler called>. */
static bool is_signal_return(const void *code) {
  static const uint8_t sigreturn[] = {0x48, 0xC7, 0xC0, 0x0F, 0x00, 0x00, 0x00, 0x0F, 0x05};
  Dl_info info;
  return dladdr(code, &info) != 0 && memcmp(code, sigreturn, sizeof sigreturn) == 0;
}

size_t frame_name(const void *return_address, char *out, size_t capacity) {
  uintptr_t address = (uintptr_t)return_address - 1; /* the call, not what follows */
  if (capacity == 0) return 0;
  out[0] = '\0';
  if (is_signal_return(return_address)) {
    static const char handler[] = "<signal handler called>";
    return copy_out(out, capacity, handler, sizeof handler - 1);
  }
  if (atomic_load_explicit(&names_plain, memory_order_acquire) || !lock_try_acquire(&names_lock))
    return plain_name(address, out, capacity, false);
  size_t length = 0;
  cache_slot_t *slot = cache_ready() ? cache_slot(address) : NULL;
  if (slot != NULL && slot->address == address) {
    length = copy_out(out, capacity, cache_text + slot->text, slot->length);
  } else {
    char text[NAME_MAX_LENGTH];
    size_t made = 0;
    /* dlopen waits for the loader's lock, which a thread inside dlopen
     * holds while it may wait for the diagnostics lock this one holds. */
    bool may_load = diag_locks_held == 0 || libdw_ready();
    if (may_load && libdw_load()) made = describe(address, text, sizeof text);
    if (made == 0) made = plain_name(address, text, sizeof text, true);
    if (made >= sizeof text) made = sizeof text - 1;
    if (may_load) cache_store(slot, address, text, made);
    length = copy_out(out, capacity, text, made);
  }
  lock_release(&names_lock);
  return length;
}

void frame_names_plain(const char *why) {
  if (atomic_load_explicit(&names_plain, memory_order_acquire)) return;
  names_plain_why = why;
  atomic_store_explicit(&names_plain, true, memory_order_release);
  site_note(SITE_NOTE_PLAIN);
}

size_t frame_names_plain_reason(char *out, size_t capacity) {
  static const char prefix[] = "named from symbol tables only: ";
  size_t length = copy_out(out, capacity, prefix, sizeof prefix - 1);
  return length +
         copy_out(out + length, capacity - length, names_plain_why, strlen(names_plain_why));
}

size_t frame_names_missing_info(char *out, size_t capacity, bool after_another) {
  size_t length = 0;
  for (int stripped = 1; stripped >= 0; stripped--) {
    bool any = false;
    for (size_t i = 0; i < missing_count; i++) {
      if (missing_stripped[i] != (stripped == 1)) continue;
      const char *lead = any ? ", " : after_another || length != 0 ? "; " : "";
      if (!any)
        lead = stripped
                   ? (after_another || length ? "; no symbol table in " : "no symbol table in ")
                   : (after_another || length ? "; frames without debug information in "
                                              : "frames without debug information in ");
      length += copy_out(out + length, capacity - length, lead, strlen(lead));
      length +=
          copy_out(out + length, capacity - length, missing_names[i], strlen(missing_names[i]));
      any = true;
    }
    if (any) {
      const char *hint = stripped ? " (stripped)" : " (build with -g; Free Pascal: -gl)";
      length += copy_out(out + length, capacity - length, hint, strlen(hint));
    }
  }
  return length;
}
