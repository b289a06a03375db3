// operator new out of memory, alone and in threads: every throwing form
// throws std::bad_alloc, every nothrow form returns nullptr, each with errno
// ENOMEM (as libstdc++'s over glibc's malloc), and nothing is lost.
//
// RLIMIT_AS is set, after the worker threads exist and have allocated once,
// to what is in use plus HEADROOM. Each thread holds blocks of every size
// kind, then asks plain, array and aligned new (16 bytes to 8 MiB), each
// throwing and nothrow, for sizes that cannot fit: beyond the headroom,
// 1 GiB, 1 TiB, just under PTRDIFF_MAX, and absurd ones up to SIZE_MAX;
// and for 16 bytes at alignments no block can have (2^62, 2^63).
// errno holds a sentinel before each call. The main thread does so alone,
// then WORKER_COUNT threads at once; then every thread frees its blocks
// and every form must allocate again. Alone, the main thread also checks
// the use a new-handler is for: it frees a reserve, and the retried
// allocation, which did not fit before, succeeds.
//
// No shoal_ name is used: built without libshoal, the same program checks
// these expectations against libstdc++ and glibc. They pass there but for
// SIZE_MAX - 4095 and SIZE_MAX with aligned new: libstdc++ 12 rounds the
// size up to the alignment, which wraps to 0, and returns a block.
#include <cerrno>
#include <cstdint>
#include <new>
#include <pthread.h>
#include <sys/resource.h>
#include <thread>
#include <vector>

#include "testhelper.h"

namespace {

constexpr size_t KIB = 1024;
constexpr size_t MIB = KIB * KIB;
constexpr size_t HEADROOM = 256 * MIB;
constexpr int SENTINEL = EBADF;
constexpr unsigned WORKER_COUNT = 4;
constexpr unsigned ROUNDS = 3;

const size_t alignments[] = {16, 64, 4 * KIB, 64 * KIB, 2 * MIB, 8 * MIB};
const size_t held_sizes[] = {24, 5000, 300 * KIB, 3 * MIB};
std::vector<size_t> too_big; // set with the limit

pthread_barrier_t step_barrier;

// Address space in use now, from /proc/self/statm (first field, pages).
size_t address_space_bytes() {
  FILE *statm = fopen("/proc/self/statm", "r");
  CHECK(statm != nullptr);
  unsigned long pages = 0;
  CHECK(fscanf(statm, "%lu", &pages) == 1);
  fclose(statm);
  return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

template <typename Call>
void check_throws(const char *who, const char *form, size_t size, size_t alignment, Call call) {
  bool threw = false;
  errno = SENTINEL;
  try {
    void *block = call();
    CHECK_CTX(false, "%s: %s(%zu, align %zu) returned %p", who, form, size, alignment, block);
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw);
  CHECK_CTX(errno == ENOMEM, "%s: %s(%zu, align %zu) threw with errno %d", who, form, size,
            alignment, errno);
}

template <typename Call>
void check_nullptr(const char *who, const char *form, size_t size, size_t alignment, Call call) {
  errno = SENTINEL;
  void *block = call();
  int error = errno;
  CHECK_CTX(block == nullptr && error == ENOMEM, "%s: %s(%zu, align %zu) gave %p, errno %d", who,
            form, size, alignment, block, error);
}

void fail_aligned_forms(const char *who, size_t size, size_t alignment) {
  std::align_val_t align{opaque_size(alignment)};
  check_throws(who, "aligned new", size, alignment, [&] { return ::operator new(size, align); });
  check_throws(who, "aligned new[]", size, alignment,
               [&] { return ::operator new[](size, align); });
  check_nullptr(who, "aligned new nothrow", size, alignment,
                [&] { return ::operator new(size, align, std::nothrow); });
  check_nullptr(who, "aligned new[] nothrow", size, alignment,
                [&] { return ::operator new[](size, align, std::nothrow); });
}

void fail_every_form(const char *who, size_t size) {
  check_throws(who, "new", size, 0, [&] { return ::operator new(size); });
  check_throws(who, "new[]", size, 0, [&] { return ::operator new[](size); });
  check_nullptr(who, "new nothrow", size, 0, [&] { return ::operator new(size, std::nothrow); });
  check_nullptr(who, "new[] nothrow", size, 0,
                [&] { return ::operator new[](size, std::nothrow); });
  for (size_t alignment : alignments) fail_aligned_forms(who, size, alignment);
}

// Every form, every size that cannot fit, with blocks of every kind held;
// they must come through intact.
void fail_everything(const char *who, uint64_t seed) {
  void *held[sizeof held_sizes / sizeof *held_sizes];
  for (size_t k = 0; k < sizeof held_sizes / sizeof *held_sizes; k++) {
    held[k] = ::operator new(opaque_size(held_sizes[k]));
    block_fill(held[k], held_sizes[k], seed + k);
  }
  for (size_t size : too_big) fail_every_form(who, opaque_size(size));
  // Alignments no block can have, whatever its size.
  for (size_t alignment : {(size_t)1 << 62, (size_t)1 << 63})
    fail_aligned_forms(who, opaque_size(16), alignment);
  for (size_t k = 0; k < sizeof held_sizes / sizeof *held_sizes; k++) {
    CHECK_CTX(block_check(held[k], held_sizes[k], seed + k), "%s: a held block was damaged", who);
    ::operator delete(held[k]);
  }
}

// A block of every size kind by every form, each written and freed.
void allocate_everything(const char *who) {
  static const size_t sizes[] = {16, 5000, 300 * KIB, 3 * MIB, 6 * MIB};
  for (size_t size : sizes) {
    size = opaque_size(size);
    void *blocks[] = {::operator new(size), ::operator new[](size),
                      ::operator new(size, std::nothrow), ::operator new[](size, std::nothrow)};
    for (void *block : blocks) {
      CHECK_CTX(block != nullptr, "%s: new(%zu) fails after the failures", who, size);
      block_fill(block, size, size);
    }
    ::operator delete(blocks[0]);
    ::operator delete[](blocks[1]);
    ::operator delete(blocks[2], std::nothrow);
    ::operator delete[](blocks[3], std::nothrow);
    for (size_t alignment : alignments) {
      std::align_val_t align{opaque_size(alignment)};
      void *block = ::operator new(size, align);
      CHECK_CTX(is_aligned(block, alignment), "%s: aligned new(%zu, %zu)", who, size, alignment);
      block_fill(block, size, size);
      ::operator delete(block, align);
      block = ::operator new[](size, align, std::nothrow);
      CHECK_CTX(block != nullptr && is_aligned(block, alignment),
                "%s: aligned new[] nothrow(%zu, %zu) fails after the failures", who, size,
                alignment);
      ::operator delete[](block, align);
    }
  }
}

// The new-handler's purpose: give back a reserve so that the retry fits.
void *reserve = nullptr;
int handler_calls = 0;

void release_reserve() {
  handler_calls++;
  ::operator delete(reserve);
  reserve = nullptr;
  std::set_new_handler(nullptr);
}

void check_new_handler_reserve() {
  const size_t reserve_size = HEADROOM / 8 * 5, wanted = HEADROOM / 2;
  reserve = ::operator new(opaque_size(reserve_size));
  static_cast<char *>(reserve)[reserve_size - 1] = 1;
  handler_calls = 0;
  std::set_new_handler(release_reserve);
  void *block = ::operator new(opaque_size(wanted));
  CHECK_CTX(handler_calls == 1, "the new-handler ran %d times", handler_calls);
  static_cast<char *>(block)[wanted - 1] = 2;
  ::operator delete(block);
  std::set_new_handler(nullptr);
}

void worker_run(unsigned index) {
  char who[32];
  snprintf(who, sizeof who, "thread %u", index);
  ::operator delete(::operator new(100)); // the thread's own structures, before the limit
  pthread_barrier_wait(&step_barrier);    // 0: every thread has allocated
  pthread_barrier_wait(&step_barrier);    // 1: the limit is set, the main thread is done
  for (unsigned round = 0; round < ROUNDS; round++) fail_everything(who, index * 16 + round);
  pthread_barrier_wait(&step_barrier); // 2: everyone has failed and freed
  allocate_everything(who);
}

} // namespace

int main() {
  alarm(60); // a hang (lock held after a failure) dies of SIGALRM
  CHECK(pthread_barrier_init(&step_barrier, nullptr, WORKER_COUNT + 1) == 0);
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < WORKER_COUNT; i++) threads.emplace_back(worker_run, i);
  too_big = {
      HEADROOM + 64 * MIB, (size_t)1 << 30,         (size_t)1 << 40, (size_t)PTRDIFF_MAX - 64 * MIB,
      (size_t)PTRDIFF_MAX, (size_t)PTRDIFF_MAX + 1, SIZE_MAX - 4095, SIZE_MAX};
  pthread_barrier_wait(&step_barrier); // 0
  size_t in_use = address_space_bytes();
  struct rlimit limit = {in_use + HEADROOM, in_use + HEADROOM};
  CHECK(setrlimit(RLIMIT_AS, &limit) == 0);
  double start = now_seconds();

  fail_everything("main thread", 1000); // alone
  check_new_handler_reserve();
  double alone_seconds = now_seconds() - start;
  pthread_barrier_wait(&step_barrier); // 1: in threads, all at once
  pthread_barrier_wait(&step_barrier); // 2
  for (std::thread &thread : threads) thread.join();
  allocate_everything("main thread");
  fprintf(stderr, "enomem_cxx: %.3f s alone, %.3f s in all\n", alone_seconds,
          now_seconds() - start);
  printf("enomem_cxx: all checks passed\n");
  return 0;
}
