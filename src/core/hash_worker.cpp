#include "core/hash_worker.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "core/checksum.hpp"
#include "core/device_copy.hpp"

namespace sluice::core {

struct HashWorker::Impl {
  struct Job {
    std::uint8_t* copy_to = nullptr;  // null: hash only
    const std::uint8_t* data;
    std::size_t bytes;
    SumKind kind;
    std::function<void(ChunkSums)> done;
    std::function<void(Result<ChunkSums>)> device_done;  // set: data is device memory
  };
  EventLoop& loop;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> jobs;
  bool stopping = false;
  // Checked on the loop thread before a result is delivered; reset by the destructor there.
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  std::vector<std::thread> threads;

  Impl(EventLoop& l, unsigned n) : loop(l) {
    for (unsigned i = 0; i < std::max(1u, n); ++i)
      threads.emplace_back([this] { run(); });
  }

  void run() {
    std::weak_ptr<bool> weak = alive;
    while (true) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [this] { return stopping || !jobs.empty(); });
        if (stopping) return;
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      if (job.device_done) {
        Result<ChunkSums> r = device_chunk_sums(job.data, job.bytes, job.kind);
        loop.post([weak, r, done = std::move(job.device_done)] {
          if (!weak.expired()) done(r);
        });
        continue;
      }
      ChunkSums sums = job.copy_to ? copy_with_sums(job.copy_to, job.data, job.bytes, job.kind)
                                   : chunk_sums(job.data, job.bytes, job.kind);
      loop.post([weak, sums, done = std::move(job.done)] {
        if (!weak.expired()) done(sums);
      });
    }
  }
};

HashWorker::HashWorker(EventLoop& loop, unsigned threads)
    : impl_(std::make_unique<Impl>(loop, threads)) {}

HashWorker::~HashWorker() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    impl_->jobs.clear();
  }
  impl_->cv.notify_all();
  for (auto& t : impl_->threads)
    t.join();
  impl_->alive.reset();
}

void HashWorker::submit(const std::uint8_t* data, std::size_t bytes, SumKind kind,
                        std::function<void(ChunkSums)> done) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->jobs.push_back({nullptr, data, bytes, kind, std::move(done), {}});
  }
  impl_->cv.notify_one();
}

void HashWorker::submit_copy(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes,
                             SumKind kind, std::function<void(ChunkSums)> done) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->jobs.push_back({dst, src, bytes, kind, std::move(done), {}});
  }
  impl_->cv.notify_one();
}

void HashWorker::submit_device(const std::uint8_t* device_data, std::size_t bytes, SumKind kind,
                               std::function<void(Result<ChunkSums>)> done) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->jobs.push_back({nullptr, device_data, bytes, kind, {}, std::move(done)});
  }
  impl_->cv.notify_one();
}

}  // namespace sluice::core
