/* symbols layer: a static function of this program (only in its .symtab: the
 * program is linked without -rdynamic and must not be stripped), an exported
 * libc function, addresses that no function covers, truncation to a small
 * capacity, and threads naming addresses at once. */
#include "../testhelper.h"
#include "diag/diag.h"

#include <dlfcn.h>
#include <pthread.h>

static volatile unsigned sink;

/* Long enough that its address + 5 lies inside it. */
static __attribute__((noinline)) unsigned static_target(unsigned rounds) {
  unsigned total = 0;
  for (unsigned i = 0; i < rounds; i++) total = total * 31u + sink + i;
  return total;
}

static const char static_data[64] = "not code";

enum { NAME_CAPACITY = 256 };
static char expected_static[NAME_CAPACITY], expected_libc[NAME_CAPACITY];
static const void *static_address, *libc_address;

static void check_name(const void *address, const char *expected) {
  char out[NAME_CAPACITY];
  memset(out, 0x55, sizeof out);
  size_t length = symbol_name(address, out, sizeof out);
  CHECK_CTX(strcmp(out, expected) == 0 && length == strlen(expected),
            "address %p: got \"%s\" (%zu), expected \"%s\"", address, out, length, expected);
}

static void *name_in_loop(void *arg) {
  size_t rounds = (size_t)(uintptr_t)arg;
  for (size_t i = 0; i < rounds; i++) {
    check_name(static_address, expected_static);
    check_name(libc_address, expected_libc);
  }
  return NULL;
}

int main(void) {
  CHECK(static_target(3) != 12345u || sink == 0);
  char out[NAME_CAPACITY];

  /* A static function: only the program's .symtab knows its name. */
  unsigned (*volatile target)(unsigned) = static_target;
  static_address = (const char *)(uintptr_t)target + 5;
  snprintf(expected_static, sizeof expected_static, "static_target+0x5 (unit_symbols)");
  symbol_name(static_address, out, sizeof out);
  CHECK_CTX(strcmp(out, expected_static) == 0,
            "got \"%s\": is unit_symbols stripped (no .symtab), or renamed?", out);
  check_name(static_address, expected_static); /* again, from the cache */

  /* shoal's own code, linked into this program with hidden visibility. */
  size_t (*volatile own)(const void *, char *, size_t) = symbol_name;
  check_name((const void *)(uintptr_t)own, "symbol_name+0x0 (unit_symbols)");

  /* An exported libc function, taken from libc itself: in a program that
   * is not PIE, &getpid would be the program's own PLT stub. */
  libc_address = dlsym(RTLD_NEXT, "getpid");
  CHECK(libc_address != NULL);
  snprintf(expected_libc, sizeof expected_libc, "getpid+0x0 (libc.so.6)");
  check_name(libc_address, expected_libc);
  check_name((const char *)libc_address + 1, "getpid+0x1 (libc.so.6)");

  /* No code there: the stack is in no object; data of this program is. */
  int local = 0;
  char expected[NAME_CAPACITY];
  snprintf(expected, sizeof expected, "0x%llx", (unsigned long long)(uintptr_t)&local);
  check_name(&local, expected);
  check_name(NULL, "0x0");
  snprintf(expected, sizeof expected, "0x%llx (unit_symbols+0x",
           (unsigned long long)(uintptr_t)static_data);
  size_t length = symbol_name(static_data, out, sizeof out);
  CHECK_CTX(strncmp(out, expected, strlen(expected)) == 0 && out[length - 1] == ')' &&
                length == strlen(out),
            "got \"%s\", expected \"%s...)\"", out, expected);

  /* Small capacities: truncated, NUL-terminated, nothing written beyond. */
  for (size_t capacity = 0; capacity < 24; capacity++) {
    char small[32];
    memset(small, 'Z', sizeof small);
    length = symbol_name(static_address, small, capacity);
    size_t want = capacity == 0 ? 0 : capacity - 1;
    if (want > strlen(expected_static)) want = strlen(expected_static);
    CHECK_CTX(length == want, "capacity %zu: length %zu", capacity, length);
    if (capacity > 0) {
      CHECK(small[length] == '\0' && strncmp(small, expected_static, length) == 0);
    }
    for (size_t i = capacity; i < sizeof small; i++) CHECK_CTX(small[i] == 'Z', "byte %zu", i);
  }

  /* Threads at once: the cache under its lock, or one mapping per call. */
  enum { THREADS = 4 };
  size_t rounds = scaled_count(200, 20);
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_create(&threads[i], NULL, name_in_loop, (void *)(uintptr_t)rounds) == 0);
  for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);

  printf("symbols: all checks hold (%s, %s)\n", expected_static, expected_libc);
  return 0;
}
