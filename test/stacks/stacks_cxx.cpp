// A C++ program with leaks at known lines, for test/stacks.sh: built with
// exceptions and -g, its leak report must name each frame demangled, with
// file and line. The script reads each marked line's number from this file.
#include <stdexcept>

void *volatile kept[4]; // leaked: nothing frees them

namespace shapes {

class Pool {
public:
  char *grow(unsigned long size);
  char *reserve(unsigned long size);
};

__attribute__((noinline)) char *Pool::grow(unsigned long size) {
  return new char[size]; // LINE:pool_grow
}

struct Node {
  long values[5];
};

__attribute__((noinline)) char *Pool::reserve(unsigned long size) {
  return new char[size]; // LINE:pool_reserve
}

template <typename T> __attribute__((noinline)) T *make_one() {
  return new T(); // LINE:make_one
}

} // namespace shapes

__attribute__((noinline)) static void fail_after(int step) {
  if (step > 0) throw std::runtime_error("step failed");
}

int main() {
  shapes::Pool pool;
  kept[0] = pool.grow(100); // LINE:main_grow
  try {
    kept[1] = shapes::make_one<shapes::Node>(); // LINE:main_make_one
    fail_after(1);
  } catch (const std::exception &) {
    kept[2] = pool.reserve(300); // LINE:main_catch
  }
  return 0;
}
