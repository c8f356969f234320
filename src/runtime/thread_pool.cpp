#include "runtime/thread_pool.h"

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace parhelion::runtime {
namespace {

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      generation_++;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void run(int n, const std::function<void(int)>& fn) {
    std::lock_guard<std::mutex> serial(run_mu_);  // one parallel region at a time
    while (static_cast<int>(threads_.size()) < n - 1) {
      int id = static_cast<int>(threads_.size()) + 1;
      threads_.emplace_back([this, id] { worker(id); });
    }
    error_ = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      active_ = n;
      pending_.store(n - 1);
      generation_++;
    }
    cv_.notify_all();
    call(0);
    while (pending_.load(std::memory_order_acquire) > 0) std::this_thread::yield();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void call(int id) {
    try {
      (*fn_)(id);
    } catch (...) {
      std::lock_guard<std::mutex> lock(err_mu_);
      if (!error_) error_ = std::current_exception();
    }
  }

  void worker(int id) {
    uint64_t seen = 0;
    for (;;) {
      // Spin for a short while, then sleep until the next generation.
      for (int spin = 0; spin < 20000 && generation_.load(std::memory_order_acquire) == seen; ++spin)
        std::this_thread::yield();
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      seen = generation_.load();
      if (stop_) return;
      bool mine = id < active_;
      lock.unlock();
      if (!mine) continue;
      call(id);
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }

  std::mutex run_mu_, mu_, err_mu_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  const std::function<void(int)>* fn_ = nullptr;
  int active_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

// After fork() only the forking thread exists in the child: the workers of the parent's pool
// are gone, so the child starts a fresh pool (the old one is leaked, never joined).
Pool* g_pool = nullptr;
std::once_flag g_atfork_once;

Pool& pool() {
  std::call_once(g_atfork_once, [] {
    pthread_atfork(nullptr, nullptr, [] { g_pool = new Pool(); });
    g_pool = new Pool();
  });
  return *g_pool;
}

}  // namespace

void parallel_run(int n, const std::function<void(int)>& fn) {
  if (n <= 1) {
    fn(0);
    return;
  }
  pool().run(n, fn);
}

}  // namespace parhelion::runtime
