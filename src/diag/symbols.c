/* symbols.c — names for code addresses, for the diagnostics: leak reports,
 * checked-mode errors and the contention log name call sites with it.
 *
 * It runs inside the allocator, at exit and while a broken heap is being
 * reported, so it never allocates: no stdio, no dlerror, no demangler (C++
 * names stay mangled). Files are read through a read-only mapping (os/).
 *
 *   symbol_name(address)
 *     dladdr1            the object holding the address: its file, its load
 *                        bias (the link map's l_addr: 0 for ET_EXEC, the load
 *                        address for ET_DYN) and the nearest exported symbol
 *     object_cache_get   the object's ELF file, mapped once and kept in a
 *                        small cache under symbols_lock; when that lock is
 *                        taken (by another thread, by the thread a signal
 *                        handler interrupted, or in a fork child of a
 *                        holder), object_open maps it for this call only
 *     object_function_at the STT_FUNC of .symtab (else .dynsym) whose
 *                        [st_value, st_value + st_size) holds address - bias
 *     format             "name+0xOFF (object)", else "0xADDR (object+0xOFF)",
 *                        else "0xADDR"
 *
 * The file is trusted no further than its size: every offset, count and name
 * read from it is checked against the mapping before use. A file replaced on
 * disk since it was loaded is caught when its ELF header no longer matches
 * the one in memory; its static functions then go unnamed rather than
 * misnamed (the loader's own table still names the exported ones).
 *
 * The symbol table is scanned linearly (an index would need memory): about a
 * microsecond per thousand symbols, and the reports name each call site once. */
#define _GNU_SOURCE
#include "diag/diag.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>

#include "diag/diag.h"

enum {
  OBJECT_CACHE_SLOTS = 8, /* objects whose files stay mapped until exit */
  OBJECT_SHOWN_MAX = 64,  /* the base name shown for an object */
  EXE_PATH_MAX = 512,     /* the main program's path, for its base name */
};

typedef ElfW(Ehdr) elf_header_t;
typedef ElfW(Phdr) elf_segment_t;
typedef ElfW(Shdr) elf_section_t;
typedef ElfW(Sym) elf_symbol_t;

/* One loaded object's file, as far as naming its functions needs it. */
typedef struct symbol_object_s {
  bool in_use;
  uintptr_t bias;              /* file address + bias = run-time address */
  uint64_t path_hash;          /* with bias: a reloaded object in the same place differs */
  const uint8_t *file;         /* the mapping; NULL when the file is of no use */
  size_t file_size;            /* bytes mapped */
  const elf_symbol_t *symbols; /* .symtab, else .dynsym */
  size_t symbol_count;
  const char *names; /* their string table */
  size_t names_size;
  char shown[OBJECT_SHOWN_MAX]; /* the file's base name */
} symbol_object_t;

static shoal_lock_t symbols_lock = SHOAL_LOCK_INIT;
static symbol_object_t object_cache[OBJECT_CACHE_SLOTS]; /* (symbols_lock) */
static size_t object_cache_next; /* (symbols_lock) slot to reuse next, round robin */

/* ---- reading the ELF file ---- */

/* count entries of entry_size at offset, suitably aligned, inside the file. */
static bool table_fits(size_t file_size, uint64_t offset, uint64_t count, size_t entry_size,
                       size_t alignment) {
  return offset % alignment == 0 && offset <= file_size &&
         count <= (file_size - offset) / entry_size;
}

static bool header_is_native(const elf_header_t *header) {
  const unsigned char native_class = sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32;
  const unsigned char native_data =
      __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;
  return memcmp(header->e_ident, ELFMAG, SELFMAG) == 0 &&
         header->e_ident[EI_CLASS] == native_class && header->e_ident[EI_DATA] == native_data &&
         (header->e_type == ET_EXEC || header->e_type == ET_DYN);
}

/* The file is the one loaded at base: when its first loadable segment
 * starts the file (as linkers lay it out), the ELF header at base in memory
 * must be the file's own. */
static bool file_matches_memory(const uint8_t *file, size_t size, const void *base) {
  const elf_header_t *header = (const elf_header_t *)(const void *)file;
  if (header->e_phentsize != sizeof(elf_segment_t) ||
      !table_fits(size, header->e_phoff, header->e_phnum, sizeof(elf_segment_t),
                  _Alignof(elf_segment_t)))
    return false;
  const elf_segment_t *segments = (const elf_segment_t *)(const void *)(file + header->e_phoff);
  for (size_t i = 0; i < header->e_phnum; i++) {
    if (segments[i].p_type != PT_LOAD) continue;
    if (segments[i].p_offset >= os_page_size()) return true; /* header not mapped: no check */
    return base != NULL && memcmp(base, header, sizeof *header) == 0;
  }
  return false;
}

/* Finds the symbol table (.symtab, else .dynsym) and its strings. */
static bool object_find_symbols(symbol_object_t *object) {
  const uint8_t *file = object->file;
  size_t size = object->file_size;
  const elf_header_t *header = (const elf_header_t *)(const void *)file;
  if (header->e_shoff == 0 || header->e_shentsize != sizeof(elf_section_t) ||
      !table_fits(size, header->e_shoff, 1, sizeof(elf_section_t), _Alignof(elf_section_t)))
    return false;
  const elf_section_t *sections = (const elf_section_t *)(const void *)(file + header->e_shoff);
  uint64_t count = header->e_shnum;
  if (count == 0) count = sections[0].sh_size; /* more than SHN_LORESERVE sections */
  if (!table_fits(size, header->e_shoff, count, sizeof(elf_section_t), _Alignof(elf_section_t)))
    return false;
  const elf_section_t *table = NULL;
  for (uint64_t i = 0; i < count && table == NULL; i++)
    if (sections[i].sh_type == SHT_SYMTAB) table = &sections[i];
  for (uint64_t i = 0; i < count && table == NULL; i++)
    if (sections[i].sh_type == SHT_DYNSYM) table = &sections[i];
  if (table == NULL || table->sh_entsize != sizeof(elf_symbol_t) || table->sh_link >= count)
    return false;
  const elf_section_t *strings = &sections[table->sh_link];
  uint64_t symbol_count = table->sh_size / sizeof(elf_symbol_t);
  if (strings->sh_type != SHT_STRTAB ||
      !table_fits(size, table->sh_offset, symbol_count, sizeof(elf_symbol_t),
                  _Alignof(elf_symbol_t)) ||
      !table_fits(size, strings->sh_offset, strings->sh_size, 1, 1))
    return false;
  object->symbols = (const elf_symbol_t *)(const void *)(file + table->sh_offset);
  object->symbol_count = (size_t)symbol_count;
  object->names = (const char *)(file + strings->sh_offset);
  object->names_size = (size_t)strings->sh_size;
  return true;
}

/* A symbol's name when it is a non-empty string ending inside the table. */
static const char *symbol_name_of(const symbol_object_t *object, const elf_symbol_t *symbol) {
  if (symbol->st_name >= object->names_size) return NULL;
  const char *name = object->names + symbol->st_name;
  if (*name == '\0' || memchr(name, '\0', object->names_size - symbol->st_name) == NULL)
    return NULL;
  return name;
}

static size_t leading_underscores(const char *name) {
  size_t count = 0;
  while (name[count] == '_') count++;
  return count;
}

static int binding_rank(const elf_symbol_t *symbol) {
  switch (ELF64_ST_BIND(symbol->st_info)) {
  case STB_GLOBAL:
    return 0;
  case STB_WEAK:
    return 1;
  default:
    return 2;
  }
}

/* Of two functions covering the address, the innermost; of aliases, the
 * plainest name (getpid before __getpid), then a global one. */
static bool symbol_is_better(const elf_symbol_t *a, const char *a_name, const elf_symbol_t *b,
                             const char *b_name) {
  if (a->st_value != b->st_value) return a->st_value > b->st_value;
  if (a->st_size != b->st_size) return a->st_size < b->st_size;
  size_t a_underscores = leading_underscores(a_name), b_underscores = leading_underscores(b_name);
  if (a_underscores != b_underscores) return a_underscores < b_underscores;
  return binding_rank(a) < binding_rank(b);
}

/* The function whose extent holds the file address `offset`, or NULL. */
static const elf_symbol_t *object_function_at(const symbol_object_t *object, uintptr_t offset,
                                              const char **name) {
  const elf_symbol_t *best = NULL;
  const char *best_name = NULL;
  for (size_t i = 0; i < object->symbol_count; i++) {
    const elf_symbol_t *symbol = &object->symbols[i];
    unsigned type = ELF64_ST_TYPE(symbol->st_info);
    if (type != STT_FUNC && type != STT_GNU_IFUNC) continue;
    if (symbol->st_shndx == SHN_UNDEF || symbol->st_shndx == SHN_ABS) continue;
    if (offset < symbol->st_value || offset - symbol->st_value >= symbol->st_size) continue;
    const char *candidate = symbol_name_of(object, symbol);
    if (candidate == NULL) continue;
    if (best == NULL || symbol_is_better(symbol, candidate, best, best_name)) {
      best = symbol;
      best_name = candidate;
    }
  }
  *name = best_name;
  return best;
}

/* ---- the objects ---- */

static void copy_base_name(char *out, size_t capacity, const char *path) {
  const char *slash = strrchr(path, '/');
  const char *base = slash != NULL ? slash + 1 : path;
  size_t length = strlen(base);
  if (length >= capacity) length = capacity - 1;
  memcpy(out, base, length);
  out[length] = '\0';
}

/* Maps the file of the object loaded from `path` (the loader's name for it;
 * "" for the main program) at `base` with `bias`. The object is usable
 * whether or not the file could be read: it names the object at least. */
static void object_open(symbol_object_t *object, const char *path, uintptr_t bias,
                        const void *base) {
  memset(object, 0, sizeof *object);
  object->in_use = true;
  object->bias = bias;
  object->path_hash = text_hash(path);
  const char *file_path = path;
  const char *started = (const char *)getauxval(AT_EXECFN); /* the path exec was given */
  if (path[0] == '\0') {
    char exe[EXE_PATH_MAX];
    file_path = "/proc/self/exe";
    if (os_read_link(file_path, exe, sizeof exe) == 0)
      memcpy(exe, started != NULL ? "" : "main", started != NULL ? 1 : sizeof "main");
    copy_base_name(object->shown, sizeof object->shown, exe[0] != '\0' ? exe : started);
  } else {
    copy_base_name(object->shown, sizeof object->shown, path);
  }
  object->file = os_map_file(file_path, &object->file_size);
  if (object->file == NULL && path[0] == '\0' && started != NULL) /* no /proc */
    object->file = os_map_file(started, &object->file_size);
  if (object->file == NULL) return;
  if (object->file_size < sizeof(elf_header_t) ||
      !header_is_native((const elf_header_t *)(const void *)object->file) ||
      !file_matches_memory(object->file, object->file_size, base) || !object_find_symbols(object)) {
    os_unmap_file(object->file, object->file_size);
    object->file = NULL;
    object->symbols = NULL;
    object->symbol_count = 0;
  }
}

static void object_close(symbol_object_t *object) {
  if (object->file != NULL) os_unmap_file(object->file, object->file_size);
  object->file = NULL;
  object->in_use = false;
}

/* The cached object for path at bias, opened in the next slot if new.
 * Needs symbols_lock. */
static symbol_object_t *object_cache_get(const char *path, uintptr_t bias, const void *base) {
  uint64_t hash = text_hash(path);
  for (size_t i = 0; i < OBJECT_CACHE_SLOTS; i++) {
    symbol_object_t *object = &object_cache[i];
    if (object->in_use && object->bias == bias && object->path_hash == hash) return object;
  }
  symbol_object_t *object = &object_cache[object_cache_next];
  object_cache_next = (object_cache_next + 1) % OBJECT_CACHE_SLOTS;
  if (object->in_use) object_close(object);
  object_open(object, path, bias, base);
  return object;
}

/* ---- the text ---- */

typedef struct text_s {
  char *out;
  size_t capacity; /* > 0 */
  size_t length;   /* out[length] is the NUL */
} text_t;

static void text_add(text_t *text, const char *string) {
  size_t length = strlen(string), room = text->capacity - 1 - text->length;
  if (length > room) length = room;
  memcpy(text->out + text->length, string, length);
  text->length += length;
  text->out[text->length] = '\0';
}

static void text_add_hex(text_t *text, uintptr_t value) {
  char digits[2 + 2 * sizeof value + 1];
  char *end = digits + sizeof digits - 1, *p = end;
  *end = '\0';
  do {
    *--p = "0123456789abcdef"[value & 15];
    value >>= 4;
  } while (value != 0);
  *--p = 'x';
  *--p = '0';
  text_add(text, p);
}

static void symbol_format(text_t *text, const symbol_object_t *object, const void *address,
                          const Dl_info *info) {
  uintptr_t offset = (uintptr_t)address - object->bias;
  const char *name = NULL;
  uintptr_t from = 0;
  const elf_symbol_t *function = object_function_at(object, offset, &name);
  if (function != NULL) {
    from = offset - function->st_value;
  } else if (info->dli_sname != NULL && info->dli_sname[0] != '\0' &&
             (uintptr_t)info->dli_saddr <= (uintptr_t)address) {
    name = info->dli_sname; /* the loader's table: the file was of no use */
    from = (uintptr_t)address - (uintptr_t)info->dli_saddr;
  }
  if (name != NULL) {
    text_add(text, name);
    text_add(text, "+");
    text_add_hex(text, from);
    text_add(text, " (");
    text_add(text, object->shown);
    text_add(text, ")");
  } else {
    text_add_hex(text, (uintptr_t)address);
    text_add(text, " (");
    text_add(text, object->shown);
    text_add(text, "+");
    text_add_hex(text, offset);
    text_add(text, ")");
  }
}

size_t symbol_name(const void *address, char *out, size_t capacity) {
  if (capacity == 0) return 0;
  text_t text = {out, capacity, 0};
  out[0] = '\0';
  Dl_info info;
  void *extra = NULL;
  if (dladdr1(address, &info, &extra, RTLD_DL_LINKMAP) == 0 || extra == NULL) {
    text_add_hex(&text, (uintptr_t)address); /* in no loaded object */
    return text.length;
  }
  const struct link_map *map = extra;
  const char *path = info.dli_fname != NULL ? info.dli_fname : "";
  uintptr_t bias = (uintptr_t)map->l_addr;
  /* Never wait: the holder may be the thread this one interrupted, or a
   * thread that did not survive a fork. A busy cache costs one mapping. */
  if (lock_try_acquire(&symbols_lock)) {
    symbol_format(&text, object_cache_get(path, bias, info.dli_fbase), address, &info);
    lock_release(&symbols_lock);
  } else {
    symbol_object_t object;
    object_open(&object, path, bias, info.dli_fbase);
    symbol_format(&text, &object, address, &info);
    object_close(&object);
  }
  return text.length;
}

/* ---- the program's functions by name ---- */

typedef struct program_lookup_s {
  uintptr_t bias;
  const void *base; /* the ELF header in memory, when its segment starts the file */
  bool found;
} program_lookup_t;

/* The first object dl_iterate_phdr reports is the program. */
static int program_found(struct dl_phdr_info *info, size_t size, void *argument) {
  (void)size;
  program_lookup_t *lookup = argument;
  lookup->bias = (uintptr_t)info->dlpi_addr;
  for (size_t i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_LOAD && info->dlpi_phdr[i].p_offset == 0) {
      lookup->base = (const void *)(lookup->bias + info->dlpi_phdr[i].p_vaddr);
      break;
    }
  lookup->found = true;
  return 1;
}

size_t symbol_program_ranges(bool (*wanted)(const char *name), code_range_t *out, size_t capacity) {
  program_lookup_t lookup = {0, NULL, false};
  dl_iterate_phdr(program_found, &lookup);
  if (!lookup.found || lookup.base == NULL) return 0;
  symbol_object_t object;
  object_open(&object, "", lookup.bias, lookup.base);
  size_t count = 0;
  for (size_t i = 0; i < object.symbol_count && count < capacity; i++) {
    const elf_symbol_t *symbol = &object.symbols[i];
    unsigned type = ELF64_ST_TYPE(symbol->st_info);
    if (type != STT_FUNC || symbol->st_shndx == SHN_UNDEF || symbol->st_size == 0) continue;
    const char *name = symbol_name_of(&object, symbol);
    if (name == NULL || !wanted(name)) continue;
    out[count].start = symbol->st_value + object.bias;
    out[count].end = out[count].start + symbol->st_size;
    count++;
  }
  object_close(&object);
  return count;
}
