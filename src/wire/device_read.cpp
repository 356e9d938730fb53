#include "wire/device_read.hpp"

#include <memory>
#include <optional>

namespace sluice::core {

std::string_view device_path_name(DevicePath path) {
  switch (path) {
    case DevicePath::kAuto:
      return "auto";
    case DevicePath::kStaged:
      return "staged";
    case DevicePath::kDirect:
      return "direct";
  }
  return "?";
}

DevicePath choose_device_path(const TransferEngine& engine, const DeviceLayout& layout) {
  return engine.cuda_memory() && layout.contiguous_base() ? DevicePath::kDirect
                                                          : DevicePath::kStaged;
}

namespace {

struct DeviceRead {
  DeviceCopier* copier = nullptr;
  DeviceLayout layout;
  const std::uint8_t* host = nullptr;               // staging's bytes (staged path)
  Status copy_error;                                // the first failed enqueue (staged path)
  std::unique_ptr<RegisteredBuffer> device_buffer;  // the registered tensors (direct path)
  DevicePath path = DevicePath::kStaged;
  Clock::time_point started;
  std::function<void(Result<DeviceReadStats>)> done;
};

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

void read_into_device(EventLoop& loop, TransferEngine& engine, DeviceCopier& copier,
                      std::vector<ReadSource> sources, std::vector<ChunkRead> chunks,
                      const DeviceLayout& layout, RegisteredBuffer* staging, ReadOptions options,
                      DevicePath path, std::function<void(Result<DeviceReadStats>)> done) {
  auto fail_now = [&](Status s) {
    loop.post([d = std::move(done), s] { d(s.with_context("read into device memory")); });
  };
  auto st = std::make_shared<DeviceRead>();
  st->copier = &copier;
  st->layout = layout;
  st->started = Clock::now();
  st->path = path == DevicePath::kAuto ? choose_device_path(engine, layout) : path;
  if (Status ok = copier.check(layout); !ok.is_ok()) return fail_now(ok);

  if (st->path == DevicePath::kDirect) {
    auto base = layout.contiguous_base();
    if (!base) {
      return fail_now(invalid_argument(
          "the direct path needs the tensors back to back in one device allocation"));
    }
    auto buffer = engine.wrap_device(*base, layout.host_bytes());
    if (!buffer.is_ok()) return fail_now(buffer.status());
    st->device_buffer = std::move(buffer).value();
    st->done = std::move(done);
    RegisteredBuffer& dst = *st->device_buffer;
    engine.read(std::move(sources), std::move(chunks), dst, std::move(options),
                [st](Result<ReadStats> r) {
                  st->device_buffer.reset();  // every operation has finished
                  auto cb = std::move(st->done);
                  if (!r.is_ok()) return cb(r.status().with_context("read into device memory"));
                  DeviceReadStats out;
                  out.read = *r;
                  out.path = DevicePath::kDirect;
                  out.seconds = since(st->started);
                  cb(out);
                });
    return;
  }

  if (!staging) return fail_now(invalid_argument("the staged path needs a staging buffer"));
  if (staging->device()) return fail_now(invalid_argument("the staging buffer is device memory"));
  if (staging->size() < layout.host_bytes()) {
    return fail_now(invalid_argument("the staging buffer holds " + std::to_string(staging->size()) +
                                     " bytes, the image " + std::to_string(layout.host_bytes())));
  }
  // Copies of an earlier series must not be mistaken for this one's.
  if (Status earlier = copier.synchronize(); !earlier.is_ok())
    return fail_now(earlier.with_context("an earlier copy to the device"));
  st->host = staging->data();
  st->done = std::move(done);
  auto user_on_chunk = std::move(options.on_chunk);
  options.on_chunk = [st, user_on_chunk](const ChunkRead& c) {
    if (st->copy_error.is_ok())
      st->copy_error = st->copier->enqueue_to_device(st->layout, st->host, c.dst_offset, c.bytes);
    if (user_on_chunk) user_on_chunk(c);
  };
  engine.read(std::move(sources), std::move(chunks), *staging, std::move(options),
              [st](Result<ReadStats> r) {
                const auto read_end = Clock::now();
                // Also after a failed read: no copy may still read the staging buffer after
                // `done`. The last copies take about one chunk's time (or one stream's
                // backlog, when the device is slower than the network).
                Status copied = st->copier->synchronize();
                if (copied.is_ok()) copied = st->copy_error;
                auto cb = std::move(st->done);
                if (!r.is_ok()) return cb(r.status().with_context("read into device memory"));
                if (!copied.is_ok()) return cb(copied.with_context("read into device memory"));
                DeviceReadStats out;
                out.read = *r;
                out.path = DevicePath::kStaged;
                out.seconds = since(st->started);
                out.tail_seconds = since(read_end);
                cb(out);
              });
}

Result<DeviceReadStats> read_into_device_sync(EventLoop& loop, TransferEngine& engine,
                                              DeviceCopier& copier, std::vector<ReadSource> sources,
                                              std::vector<ChunkRead> chunks,
                                              const DeviceLayout& layout, RegisteredBuffer* staging,
                                              ReadOptions options, DevicePath path) {
  std::optional<Result<DeviceReadStats>> out;
  // The engine ends the read within its own total timeout; the copies after it are bounded by
  // the device (no CUDA wait here can hang without the device failing): this margin only guards
  // against a stuck loop.
  constexpr Millis kCopyMargin{30000};
  const Millis limit = options.total_timeout + kCopyMargin;
  read_into_device(loop, engine, copier, std::move(sources), std::move(chunks), layout, staging,
                   std::move(options), path,
                   [&out](Result<DeviceReadStats> r) { out.emplace(std::move(r)); });
  loop.run_until([&out] { return out.has_value(); }, limit);
  if (!out) return internal_error("read into device memory did not finish within its timeout");
  return std::move(*out);
}

}  // namespace sluice::core
