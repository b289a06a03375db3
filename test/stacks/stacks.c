/* A program whose leaks are at known lines, for test/stacks.sh: built with
 * unwind tables, with frame pointers and no tables, with neither, without
 * debug information, and stripped, its leak report must name the same
 * frames (or say why it cannot). Each marked line's number is read by the
 * script from this file. With an argument it takes one path of bad input:
 *   corrupt-fp N  malloc from a function whose frame pointer is garbage
 *   signal        malloc from a signal handler
 *   maps          exit with status 3 if libdw is mapped already (it is
 *                 loaded only when a report is written)
 * It writes nothing with stdio, whose buffer would be one more block. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *volatile kept[8]; /* leaked: nothing frees them */

__attribute__((noinline)) static void *make_table(size_t size) {
  return malloc(size); /* LINE:make_table */
}

__attribute__((noinline)) void *build_index(void) {
  void *table = make_table(4096); /* LINE:build_index */
  return table;
}

__attribute__((noinline)) void *load_names(int count) {
  char *names = calloc((size_t)count, 16); /* LINE:load_names */
  memset(names, 'n', 16);
  return names;
}

/* Sets %rbp to the garbage chosen by `kind` (the prologue says it keeps a
 * frame pointer, so the walker would trust it), calls malloc(size) and
 * puts %rbp back. No unwind table covers it. */
void *corrupt_frame_pointer_malloc(size_t size, long kind);
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl corrupt_frame_pointer_malloc\n"
        ".type corrupt_frame_pointer_malloc, @function\n"
        "corrupt_frame_pointer_malloc:\n"
        "  push %rbp\n"
        "  mov %rsp, %rbp\n"
        "  cmp $1, %rsi\n"
        "  jne 1f\n"
        "  mov $0x10, %rbp\n" /* a small number */
        "  jmp 4f\n"
        "1:cmp $2, %rsi\n"
        "  jne 2f\n"
        "  movabs $0x7fffdead0003, %rbp\n" /* unmapped and misaligned */
        "  jmp 4f\n"
        "2:cmp $3, %rsi\n"
        "  jne 3f\n"
        "  lea -4096(%rsp), %rbp\n" /* below the stack pointer */
        "  jmp 4f\n"
        "3:lea -8(%rsp), %rbp\n" /* a loop: the saved word is itself */
        "  mov %rbp, (%rbp)\n"
        "4:call malloc@PLT\n"
        "  mov %rsp, %rbp\n"
        "  pop %rbp\n"
        "  ret\n"
        ".size corrupt_frame_pointer_malloc, .-corrupt_frame_pointer_malloc\n");
#else
void *corrupt_frame_pointer_malloc(size_t size, long kind) {
  (void)kind;
  return malloc(size);
}
#endif

__attribute__((noinline)) void *through_corrupt_frame(long kind) {
  return corrupt_frame_pointer_malloc(48, kind); /* LINE:through_corrupt_frame */
}

static void on_signal(int number) {
  (void)number;
  kept[5] = malloc(40); /* LINE:on_signal */
}

/* Whether /proc/self/maps names libdw, read without stdio. */
static int libdw_mapped(void) {
  static char maps[1 << 20];
  int fd = open("/proc/self/maps", O_RDONLY);
  if (fd < 0) return 0;
  size_t length = 0;
  ssize_t n;
  while (length < sizeof maps - 1 && (n = read(fd, maps + length, sizeof maps - 1 - length)) > 0)
    length += (size_t)n;
  close(fd);
  maps[length] = '\0';
  return strstr(maps, "libdw") != NULL;
}

int main(int argc, char **argv) {
  kept[0] = build_index(); /* LINE:main_build_index */
  kept[1] = load_names(2); /* LINE:main_load_names */
  if (argc > 2 && strcmp(argv[1], "corrupt-fp") == 0)
    kept[3] = through_corrupt_frame(atol(argv[2])); /* LINE:main_corrupt */
  if (argc > 1 && strcmp(argv[1], "signal") == 0) {
    signal(SIGUSR1, on_signal);
    raise(SIGUSR1); /* LINE:main_raise */
  }
  if (argc > 1 && strcmp(argv[1], "maps") == 0 && libdw_mapped()) return 3;
  return 0;
}
