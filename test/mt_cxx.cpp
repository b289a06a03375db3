// A multi-threaded C++ workload for programs.sh: run with and without
// LD_PRELOAD=libshoal.so, it must print the same line.
//
// Each of WORKER_COUNT threads builds items (std::string, std::map,
// std::vector behind a shared_ptr) and hands them to the next thread through
// a mutex/condition-variable queue; the receiver hashes an item, grows it
// and drops it, so most frees are cross-thread. The checksum is a sum of
// per-item hashes, the same whatever the scheduling.
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int WORKER_COUNT = 4;
constexpr int ITEMS_PER_WORKER = 20000;

struct item_t {
  std::string name;
  std::map<int, std::string> fields;
  std::vector<int> numbers;
};

uint64_t fnv1a(uint64_t hash, const void *data, size_t size) {
  const unsigned char *bytes = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < size; i++) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
  return hash;
}

uint64_t item_hash(const item_t &item) {
  uint64_t hash = fnv1a(0xcbf29ce484222325ull, item.name.data(), item.name.size());
  for (const auto &field : item.fields) {
    hash = fnv1a(hash, &field.first, sizeof field.first);
    hash = fnv1a(hash, field.second.data(), field.second.size());
  }
  return fnv1a(hash, item.numbers.data(), item.numbers.size() * sizeof(int));
}

class handoff_queue_t {
public:
  void push(std::shared_ptr<item_t> item) {
    {
      std::lock_guard<std::mutex> guard(lock_);
      items_.push_back(std::move(item));
    }
    ready_.notify_one();
  }
  std::shared_ptr<item_t> pop(bool wait) {
    std::unique_lock<std::mutex> guard(lock_);
    if (wait) ready_.wait(guard, [this] { return !items_.empty(); });
    if (items_.empty()) return nullptr;
    std::shared_ptr<item_t> item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

private:
  std::mutex lock_;
  std::condition_variable ready_;
  std::deque<std::shared_ptr<item_t>> items_;
};

handoff_queue_t queues[WORKER_COUNT];

std::shared_ptr<item_t> item_make(int worker, int index) {
  auto item = std::make_shared<item_t>();
  item->name = "item-" + std::to_string(worker) + "-" + std::to_string(index);
  item->name.append(static_cast<size_t>(index % 97), 'x');
  for (int k = 0; k < index % 13; k++) item->fields[k * worker] = std::string(k * 3, 'a' + k);
  item->numbers.resize(static_cast<size_t>(index % 300));
  for (size_t k = 0; k < item->numbers.size(); k++) item->numbers[k] = index * 31 + (int)k;
  return item;
}

uint64_t item_consume(std::shared_ptr<item_t> item) {
  uint64_t hash = item_hash(*item);
  item->name += std::string(1000, 'y'); // grow in the receiving thread
  item->numbers.push_back(1);
  return hash;
}

void worker_run(int worker, uint64_t *checksum) {
  uint64_t sum = 0;
  int received = 0;
  handoff_queue_t &next = queues[(worker + 1) % WORKER_COUNT];
  for (int index = 0; index < ITEMS_PER_WORKER; index++) {
    next.push(item_make(worker, index));
    while (auto item = queues[worker].pop(false)) {
      sum += item_consume(std::move(item));
      received++;
    }
  }
  for (; received < ITEMS_PER_WORKER; received++) sum += item_consume(queues[worker].pop(true));
  *checksum = sum;
}

} // namespace

int main() {
  uint64_t checksums[WORKER_COUNT] = {};
  std::vector<std::thread> workers;
  for (int worker = 0; worker < WORKER_COUNT; worker++)
    workers.emplace_back(worker_run, worker, &checksums[worker]);
  for (std::thread &worker : workers) worker.join();
  uint64_t total = 0;
  for (uint64_t checksum : checksums) total += checksum;
  std::printf("mt_cxx: %d items, checksum %016llx\n", WORKER_COUNT * ITEMS_PER_WORKER,
              static_cast<unsigned long long>(total));
  return 0;
}
