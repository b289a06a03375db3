/* The reports' C API on a program with known answers (test/diagnostics.sh):
 * shoal_read_memory on readable, unmapped and inaccessible memory;
 * shoal_report_file and shoal_leak_report_at_exit switched on from main,
 * with no SHOAL_* variable; a namer that names the program's own records.
 * Argument "off": the report is switched on, then off again. */
#include <shoal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NODE_MAGIC 0x6e6f64656e6f6465ull

typedef struct node_s {
  unsigned long long magic;
  struct node_s *next;
} node_t;

static int failures;
#define EXPECT(condition)                                                                          \
  do {                                                                                             \
    if (!(condition)) {                                                                            \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #condition);                         \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static size_t name_node(const void *block, size_t size, char *name, size_t capacity) {
  unsigned long long magic;
  if (size < sizeof(node_t) || !shoal_read_memory(block, &magic, sizeof magic)) return 0;
  if (magic != NODE_MAGIC || capacity < sizeof "node_t") return 0;
  memcpy(name, "node_t", sizeof "node_t");
  return strlen(name);
}

static void test_read_memory(void) {
  char text[32] = "readable", copy[32] = "";
  EXPECT(shoal_read_memory(text, copy, sizeof text));
  EXPECT(strcmp(copy, "readable") == 0);
  EXPECT(shoal_read_memory(NULL, copy, 0)); /* nothing to read */
  EXPECT(!shoal_read_memory(NULL, copy, 8));
  long page = sysconf(_SC_PAGESIZE);
  char *pages =
      mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT(pages != MAP_FAILED);
  memset(pages, 7, (size_t)page * 2);
  EXPECT(mprotect(pages + page, (size_t)page, PROT_NONE) == 0);
  EXPECT(shoal_read_memory(pages + page - 8, copy, 8) && copy[0] == 7);
  EXPECT(!shoal_read_memory(pages + page - 8, copy, 16)); /* runs into the inaccessible page */
  EXPECT(!shoal_read_memory(pages + page, copy, 1));
  munmap(pages, (size_t)page * 2);
  EXPECT(!shoal_read_memory(pages, copy, 1)); /* unmapped */
}

__attribute__((noinline)) static node_t *leak_nodes(int count) {
  node_t *head = NULL;
  for (int i = 0; i < count; i++) {
    node_t *node = malloc(sizeof *node);
    node->magic = NODE_MAGIC;
    node->next = head;
    head = node;
  }
  return head;
}

static void *volatile kept[2];
static volatile int node_count = 3; /* not a constant: the loop stays one call site */

int main(int argc, char **argv) {
  test_read_memory();
  void *before = malloc(48); /* allocated before the switch: not reported */
  EXPECT(shoal_report_file(argv[1]));
  EXPECT(shoal_leak_report_at_exit(true));
  shoal_report_namer(name_node);
  kept[0] = leak_nodes(node_count);
  kept[1] = malloc(500);
  free(before);
  if (argc > 2 && strcmp(argv[2], "off") == 0) EXPECT(shoal_leak_report_at_exit(false));
  return failures == 0 ? 0 : 1;
}
