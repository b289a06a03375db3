// C++ allocation through shoal: every replaceable operator new/delete form.
//
// Each form (plain, array, nothrow, sized delete, aligned with
// std::align_val_t, aligned nothrow, aligned sized delete) must return
// memory shoal owns (shoal_owns), aligned as asked, with room for the
// request. Failure follows the standard: an impossible size throws
// std::bad_alloc from the throwing forms and gives nullptr from the nothrow
// forms, and the std::new_handler is called before giving up, by every form.
// STL containers, shared_ptr and a cross-thread handoff work on top.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "shoal.h"
#include "testhelper.h"

namespace {

const size_t impossible_size = SIZE_MAX / 2;

void check_block(void *block, size_t size, size_t alignment, const char *form) {
  CHECK_CTX(block != nullptr, "%s(%zu, align %zu) returned nullptr", form, size, alignment);
  CHECK_CTX(shoal_owns(block), "%s(%zu): %p is not shoal's", form, size, block);
  CHECK_CTX(is_aligned(block, alignment), "%s(%zu, align %zu) = %p", form, size, alignment, block);
  CHECK_CTX(shoal_malloc_usable_size(block) >= size, "%s(%zu): usable %zu", form, size,
            shoal_malloc_usable_size(block));
  pattern_fill(block, size, size);
  CHECK(pattern_check(block, size, size));
}

// What the unaligned forms owe: storage "suitably aligned to represent any
// object of that size" ([new.delete.single]); an object's size is a multiple
// of its alignment, so that is the largest power of two dividing the size,
// capped at __STDCPP_DEFAULT_NEW_ALIGNMENT__ (16 on x86-64).
size_t default_new_alignment(size_t size) {
  size_t alignment = __STDCPP_DEFAULT_NEW_ALIGNMENT__;
  while (alignment > 1 && size % alignment != 0) alignment /= 2;
  return alignment;
}

void test_plain_forms() {
  static const size_t sizes[] = {1,   8,    16,   24,    32,     48,     100,
                                 128, 1000, 5000, 70000, 300000, 5 << 20};
  for (size_t size : sizes) {
    size = opaque_size(size);
    size_t alignment = default_new_alignment(size);
    void *block = ::operator new(size);
    check_block(block, size, alignment, "operator new");
    ::operator delete(block);
    block = ::operator new(size);
    check_block(block, size, alignment, "operator new");
    ::operator delete(block, size); // sized
    block = ::operator new[](size);
    check_block(block, size, alignment, "operator new[]");
    ::operator delete[](block);
    block = ::operator new[](size);
    check_block(block, size, alignment, "operator new[]");
    ::operator delete[](block, size);
    block = ::operator new(size, std::nothrow);
    check_block(block, size, alignment, "operator new nothrow");
    ::operator delete(block, std::nothrow);
    block = ::operator new[](size, std::nothrow);
    check_block(block, size, alignment, "operator new[] nothrow");
    ::operator delete[](block, std::nothrow);
  }
}

void test_aligned_forms() {
  static const size_t sizes[] = {1, 64, 100, 4096, 5000, 300000, 5 << 20};
  for (size_t alignment = 32; alignment <= (size_t)4 << 20; alignment *= 4) {
    std::align_val_t align{alignment};
    for (size_t size : sizes) {
      size = opaque_size(size);
      void *block = ::operator new(size, align);
      check_block(block, size, alignment, "aligned operator new");
      ::operator delete(block, align);
      block = ::operator new(size, align);
      check_block(block, size, alignment, "aligned operator new");
      ::operator delete(block, size, align); // aligned sized
      block = ::operator new[](size, align);
      check_block(block, size, alignment, "aligned operator new[]");
      ::operator delete[](block, align);
      block = ::operator new[](size, align);
      check_block(block, size, alignment, "aligned operator new[]");
      ::operator delete[](block, size, align);
      block = ::operator new(size, align, std::nothrow);
      check_block(block, size, alignment, "aligned operator new nothrow");
      ::operator delete(block, align, std::nothrow);
      block = ::operator new[](size, align, std::nothrow);
      check_block(block, size, alignment, "aligned operator new[] nothrow");
      ::operator delete[](block, align, std::nothrow);
    }
  }
}

// new-expressions pick the forms themselves: over-aligned types go through
// the align_val_t forms, deletes of complete types through the sized ones.
struct alignas(256) over_aligned_t {
  unsigned char bytes[300];
};

void test_new_expressions() {
  for (int round = 0; round < 100; round++) {
    int *number = new int(round);
    CHECK(shoal_owns(number) && *number == round);
    delete number;
    over_aligned_t *over = new over_aligned_t();
    CHECK(shoal_owns(over) && is_aligned(over, 256) && over->bytes[299] == 0);
    delete over;
    over_aligned_t *many = new over_aligned_t[opaque_size(7)];
    CHECK(shoal_owns(many) && is_aligned(many, 256));
    delete[] many;
    std::string *text = new std::string(1000, 'x');
    CHECK(shoal_owns(text) && shoal_owns(text->data()));
    delete text;
  }
}

void *volatile escaped;

template <typename Call> bool throws_bad_alloc(Call call) {
  try {
    call();
  } catch (const std::bad_alloc &) {
    return true;
  }
  return false;
}

void test_failures() {
  size_t size = opaque_size(impossible_size);
  std::align_val_t align{64};
  CHECK(throws_bad_alloc([&] { ::operator delete(::operator new(size)); }));
  CHECK(throws_bad_alloc([&] { ::operator delete[](::operator new[](size)); }));
  CHECK(throws_bad_alloc([&] { ::operator delete(::operator new(size, align), align); }));
  CHECK(throws_bad_alloc([&] { ::operator delete[](::operator new[](size, align), align); }));
  // Through a volatile, so the compiler may not elide the new-expression.
  CHECK(throws_bad_alloc([&] {
    escaped = new char[size];
    delete[] static_cast<char *>(escaped);
  }));
  CHECK(::operator new(size, std::nothrow) == nullptr);
  CHECK(::operator new[](size, std::nothrow) == nullptr);
  CHECK(::operator new(size, align, std::nothrow) == nullptr);
  CHECK(::operator new[](size, align, std::nothrow) == nullptr);
  CHECK(new (std::nothrow) char[size] == nullptr);
}

// The handler is called once per failure, then uninstalls itself so the
// next attempt throws (or, for nothrow forms, returns nullptr).
std::atomic<int> handler_calls{0};

void counting_new_handler() {
  handler_calls++;
  std::set_new_handler(nullptr);
}

template <typename Call> void check_handler_called(Call call, bool nothrow, const char *form) {
  handler_calls = 0;
  std::set_new_handler(counting_new_handler);
  bool threw = throws_bad_alloc(call);
  CHECK_CTX(handler_calls == 1, "%s: new_handler called %d times", form, handler_calls.load());
  CHECK_CTX(threw != nothrow, "%s: %s", form, threw ? "threw" : "did not throw");
  std::set_new_handler(nullptr);
}

void test_new_handler() {
  size_t size = opaque_size(impossible_size);
  std::align_val_t align{128};
  check_handler_called([&] { ::operator delete(::operator new(size)); }, false, "new");
  check_handler_called([&] { ::operator delete[](::operator new[](size)); }, false, "new[]");
  check_handler_called([&] { ::operator delete(::operator new(size, align), align); }, false,
                       "aligned new");
  check_handler_called([&] { CHECK(::operator new(size, std::nothrow) == nullptr); }, true,
                       "nothrow new");
  check_handler_called([&] { CHECK(::operator new(size, align, std::nothrow) == nullptr); }, true,
                       "aligned nothrow new");
}

void test_containers() {
  std::vector<std::string> words;
  for (int i = 0; i < 20000; i++) words.push_back("word number " + std::to_string(i));
  CHECK(shoal_owns(words.data()));
  std::map<std::string, int> counts;
  std::unordered_map<int, std::vector<int>> buckets;
  for (const std::string &word : words) {
    counts[word.substr(0, 13)]++;
    buckets[(int)word.size()].push_back((int)word.size());
  }
  // Keys are "word number " and the first digit: 1, 10..19, 100..199, ...
  CHECK(counts.size() == 10);
  CHECK(counts["word number 0"] == 1);
  CHECK(counts["word number 1"] == 11111);
  CHECK(counts["word number 2"] == 1111);
  size_t total = 0;
  for (const auto &bucket : buckets) total += bucket.second.size();
  CHECK(total == words.size());

  auto shared = std::make_shared<std::vector<int>>(100000, 7);
  CHECK(shoal_owns(shared.get()) && shoal_owns(shared->data()));
  std::weak_ptr<std::vector<int>> weak = shared;

  // Made here, changed and destroyed in another thread (a cross-thread free).
  std::vector<std::unique_ptr<std::string>> handoff;
  for (int i = 0; i < 1000; i++) handoff.push_back(std::make_unique<std::string>(500, 'h'));
  std::thread consumer([moved = std::move(handoff), owned = std::move(shared)]() mutable {
    for (auto &text : moved) {
      CHECK(text->size() == 500 && (*text)[499] == 'h');
      text->append(5000, 'i');
      CHECK(shoal_owns(text->data()));
    }
    moved.clear();
    CHECK((*owned)[99999] == 7);
    owned.reset();
  });
  consumer.join();
  CHECK(weak.expired());
}

} // namespace

int main() {
  test_plain_forms();
  test_aligned_forms();
  test_new_expressions();
  test_failures();
  test_new_handler();
  test_containers();
  printf("cxx: all checks passed\n");
  return 0;
}
