// Checked mode's catalogue, C++ part: sized delete with the wrong size (a
// fault C cannot commit but through free_sized), a double delete, and the
// legal forms of new and delete, which must run clean. Same contract as
// check_cases.c: argv[1] names the case, no argument lists them; a fault
// case prints "address 0x..." then commits its bug, and surviving it with
// abort on error on exits 3. Built with -fsized-deallocation.
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "shoal.h"
#include "testhelper.h"

#if defined(__clang__)
#define SITE_FUNCTION __attribute__((noinline))
#else
#define SITE_FUNCTION __attribute__((noipa)) // no inlining, cloning or merging
#endif

// Where blocks come from: plain names (extern "C") for the reports.
extern "C" {
SITE_FUNCTION void *alloc_new(size_t size) {
  void *block = ::operator new(size);
  return opaque_pointer(block); // not a tail call: this frame is the allocation site
}

SITE_FUNCTION void *alloc_new_array(size_t size) {
  void *block = ::operator new[](size);
  CHECK(size > 0);
  return opaque_pointer(block);
}

SITE_FUNCTION void *alloc_new_aligned(size_t size, size_t alignment) {
  void *block = ::operator new(size, std::align_val_t(alignment));
  CHECK(is_aligned(block, alignment));
  return opaque_pointer(block);
}
}

namespace {

// stdout is unbuffered (main), so that printing allocates nothing.
void announce(const void *pointer) {
  printf("address %p\n", pointer);
}

bool ignoring() {
  return shoal_option_get(SHOAL_OPTION_ABORT_ON_ERROR) == 0;
}

// ---- faults ----

// delete with `wrong` bytes a block of `size`: once ignored, the block is
// still live and the right size frees it.
int sized_delete_plain(size_t wrong) {
  const size_t size = 100;
  void *block = alloc_new(opaque_size(size));
  pattern_fill(block, size, 1);
  announce(block);
  ::operator delete(opaque_pointer(block), opaque_size(wrong));
  if (!ignoring()) return 0; // not caught: the block may be gone
  CHECK(pattern_check(block, size, 1));
  ::operator delete(block, size);
  return 0;
}

int case_sized_delete_smaller() {
  return sized_delete_plain(64);
}
int case_sized_delete_larger() {
  return sized_delete_plain(200);
}

int case_sized_delete_array() {
  const size_t size = 100;
  void *block = alloc_new_array(opaque_size(size));
  pattern_fill(block, size, 2);
  announce(block);
  ::operator delete[](opaque_pointer(block), opaque_size(size - 1));
  if (!ignoring()) return 0;
  CHECK(pattern_check(block, size, 2));
  ::operator delete[](block, size);
  return 0;
}

int case_sized_delete_aligned() {
  const size_t size = 100;
  void *block = alloc_new_aligned(opaque_size(size), 64);
  pattern_fill(block, size, 3);
  announce(block);
  ::operator delete(opaque_pointer(block), opaque_size(96), std::align_val_t(64));
  if (!ignoring()) return 0;
  CHECK(pattern_check(block, size, 3));
  ::operator delete(block, size, std::align_val_t(64));
  return 0;
}

int case_double_delete() {
  void *block = alloc_new(opaque_size(48));
  void *again = opaque_pointer(block); // a copy the compiler cannot follow
  announce(again);
  ::operator delete(block);
  ::operator delete(again);
  return 0;
}

// ---- legal ----

struct Counted {
  static int live;
  int payload[5] = {1, 2, 3, 4, 5};
  Counted() { live++; }
  ~Counted() { live--; } // a destructor: new[] stores a count, delete[] is sized with it
};
int Counted::live = 0;

struct alignas(64) Wide {
  unsigned char bytes[100];
};

struct Base {
  virtual ~Base() = default;
  int base_field = 1;
};
struct Derived : Base {
  char extra[300] = {};
};

int case_legal_forms() {
  static const size_t sizes[] = {0, 1, 24, 100, 1000, 70000, 300000, 5 << 20};
  for (size_t size : sizes) {
    size = opaque_size(size);
    void *p = ::operator new(size);
    memset(p, 1, size);
    ::operator delete(p, size);
    p = ::operator new[](size);
    memset(p, 2, size);
    ::operator delete[](p, size);
    p = ::operator new(size, std::nothrow);
    CHECK(p != nullptr);
    ::operator delete(p, std::nothrow);
    for (size_t alignment : {size_t(32), size_t(64), size_t(4096)}) {
      p = ::operator new(size, std::align_val_t(alignment));
      CHECK(is_aligned(p, alignment));
      memset(p, 3, size);
      ::operator delete(p, size, std::align_val_t(alignment));
      p = ::operator new[](size, std::align_val_t(alignment));
      CHECK(is_aligned(p, alignment));
      ::operator delete[](p, std::align_val_t(alignment));
    }
  }
  Counted *counted = new Counted[7];
  CHECK(Counted::live == 7);
  delete[] counted; // sized: 7 objects and the cookie
  CHECK(Counted::live == 0);
  Wide *wide = new Wide[3];
  CHECK(is_aligned(wide, 64));
  delete[] wide;
  Base *object = new Derived; // deleted through the base: sized with Derived's size
  delete object;
  bool threw = false;
  try {
    void *p = ::operator new(opaque_size(SIZE_MAX / 2));
    ::operator delete(p);
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw);
  CHECK(::operator new(opaque_size(SIZE_MAX / 2), std::nothrow) == nullptr);
  CHECK(shoal_check_heap() == 0);
  return 0;
}

int case_legal_containers() {
  std::vector<int> numbers;
  for (int i = 0; i < 300000; i++) numbers.push_back(i);
  for (int i = 0; i < 300000; i++) CHECK(numbers[i] == i);
  std::string text;
  for (int i = 0; i < 20000; i++) text += static_cast<char>('a' + i % 26);
  CHECK(text.size() == 20000 && text[27] == 'b');
  std::map<int, std::string> tree;
  std::unordered_map<std::string, int> table;
  for (int i = 0; i < 2000; i++) {
    tree[i] = std::to_string(i);
    table[std::to_string(i)] = i;
  }
  for (int i = 0; i < 2000; i += 2) tree.erase(i);
  CHECK(tree.size() == 1000 && table.at("1234") == 1234);
  // Blocks made on one thread, freed on another.
  std::vector<std::unique_ptr<std::string>> made;
  std::thread maker([&made] {
    for (int i = 0; i < 1000; i++) made.push_back(std::make_unique<std::string>(100, 'x'));
  });
  maker.join();
  std::thread freer([&made] { made.clear(); });
  freer.join();
  auto shared = std::make_shared<std::vector<double>>(1000, 1.5);
  std::thread reader([shared] { CHECK((*shared)[999] == 1.5); });
  reader.join();
  CHECK(shoal_check_heap() == 0);
  return 0;
}

struct CheckCase {
  const char *name;
  int (*run)();
  bool fault;
};

const CheckCase cases[] = {
    {"cxx-sized-delete-smaller", case_sized_delete_smaller, true},
    {"cxx-sized-delete-larger", case_sized_delete_larger, true},
    {"cxx-sized-delete-array", case_sized_delete_array, true},
    {"cxx-sized-delete-aligned", case_sized_delete_aligned, true},
    {"cxx-double-delete", case_double_delete, true},
    {"cxx-legal-forms", case_legal_forms, false},
    {"cxx-legal-containers", case_legal_containers, false},
};

} // namespace

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  if (argc != 2) {
    for (const CheckCase &c : cases) printf("%s %s\n", c.name, c.fault ? "fault" : "legal");
    return 0;
  }
  for (const CheckCase &c : cases) {
    if (strcmp(argv[1], c.name) != 0) continue;
    int status = c.run();
    if (c.fault && !ignoring()) {
      printf("check %s: survived, abort on error is on\n", argv[1]);
      return 3;
    }
    return status;
  }
  fprintf(stderr, "check_cases_cxx: no case named %s\n", argv[1]);
  return 2;
}
