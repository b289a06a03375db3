// cxx_static.cpp — a C++ program linked statically with libshoal.a on
// Windows: the C++ runtime's operator new and delete (libstdc++, linked in
// with -static) call malloc and free, which are shoal's, so objects,
// strings and containers live in shoal's heap; a new that cannot be met
// throws std::bad_alloc (libstdc++'s new sees shoal's NULL), and the
// statistics count what the program holds.
#include <cstdio>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "shoal.h"
#include "testhelper.h"

int main() {
  shoal_stats_t before = shoal_stats();
  int *number = new int(42);
  std::unique_ptr<double[]> array(new double[1000]);
  std::vector<std::string> strings(200, std::string(300, 'x'));
  CHECK(shoal_owns(number) && shoal_owns(array.get()));
  CHECK(shoal_owns(strings.data()) && shoal_owns(strings[199].data()));
  shoal_stats_t during = shoal_stats();
  CHECK(during.live_blocks >= before.live_blocks + 203);
  delete number;
  strings.clear();
  strings.shrink_to_fit();
  array.reset();
  shoal_stats_t after = shoal_stats();
  CHECK(after.live_blocks == before.live_blocks);

  bool thrown = false;
  try {
    // Through opaque_pointer: g++ -O2 removes a new[] whose block no one
    // uses, and its bad_alloc with it.
    char *impossible = static_cast<char *>(opaque_pointer(new char[opaque_size(SIZE_MAX / 2)]));
    delete[] impossible;
  } catch (const std::bad_alloc &) {
    thrown = true;
  }
  CHECK(thrown);
  std::printf("cxx_static: new, delete and containers are shoal's; bad_alloc thrown\n");
  return 0;
}
