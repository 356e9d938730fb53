#include "bench/transfer_device.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/cuda_device.hpp"
#include "core/device_copy.hpp"
#include "wire/device_read.hpp"
#include "wire/nccl_fanout.hpp"

namespace sluice::cli {

using namespace sluice::core;

namespace {

// The device image is cut into "tensors" of this size, back to back in one allocation, so that
// the copies cross tensor boundaries inside chunks the way a model's do.
constexpr std::uint64_t kTensorBytes = std::uint64_t{64} << 20;

int failed(const std::string& what, const Status& s) {
  std::fprintf(stderr, "transfer-read: %s: %s\n", what.c_str(), s.to_string().c_str());
  return 1;
}

double gbps(std::uint64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
}

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Whether every chunk of the image at `device` has the region's checksum.
Result<bool> device_matches(const void* device, const RegionLayout& layout) {
  for (std::uint64_t k = 0; k < layout.chunk_count(); ++k) {
    SLUICE_ASSIGN_OR_RETURN(
        std::uint64_t sum,
        device_chunk_checksum(static_cast<const std::uint8_t*>(device) + layout.chunk_offset(k),
                              layout.chunk_size(k)));
    if (sum != layout.checksums[k]) return false;
  }
  return true;
}

Result<DevicePath> parse_path(const std::string& name) {
  for (auto p : {DevicePath::kAuto, DevicePath::kStaged, DevicePath::kDirect})
    if (device_path_name(p) == name) return p;
  return invalid_argument("--device-path must be auto, staged or direct, not '" + name + "'");
}

struct Fanout {
  double seconds = 0;  // best round
  bool equal = false;  // every other GPU holds the region's bytes
};

// Broadcasts the image in `first` (device 0) to a buffer on each of devices 1..gpus-1 with NCCL,
// `rounds` times after one warm-up (NCCL sets up its channels on the first call).
Result<Fanout> fan_out(const DeviceBuffer& first, const RegionLayout& layout, unsigned rounds,
                       int gpus) {
  std::vector<std::unique_ptr<DeviceBuffer>> others;
  std::vector<void*> buffers = {first.data()};
  std::vector<int> devices = {first.device()};
  for (int d = 0; d < gpus; ++d) {
    if (d == first.device()) continue;
    SLUICE_ASSIGN_OR_RETURN(auto b, DeviceBuffer::allocate(d, layout.bytes));
    buffers.push_back(b->data());
    devices.push_back(d);
    others.push_back(std::move(b));
  }
  SLUICE_ASSIGN_OR_RETURN(auto fanout, LocalFanout::create(devices));
  SLUICE_TRY(fanout->broadcast(buffers, layout.bytes));
  Fanout out;
  out.seconds = std::numeric_limits<double>::infinity();
  for (unsigned r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    SLUICE_TRY(fanout->broadcast(buffers, layout.bytes));
    out.seconds = std::min(out.seconds, since(t0));
  }
  out.equal = true;
  for (const auto& b : others) {
    SLUICE_ASSIGN_OR_RETURN(bool eq, device_matches(b->data(), layout));
    out.equal = out.equal && eq;
  }
  return out;
}

// Where the reads land, page-locked: the reader's registered buffer, pinned in place; where the
// driver will not pin it (UCX may place it in shared memory), page-aligned private memory,
// pinned and registered instead (the reader's own buffer is never read by a peer).
struct Staging {
  struct Free {
    void operator()(std::uint8_t* p) const { std::free(p); }
  };
  // Declared in the order they go backwards: unregistered, then unpinned, then freed.
  std::unique_ptr<std::uint8_t, Free> own;
  std::unique_ptr<PinnedHost> pin;
  std::unique_ptr<RegisteredBuffer> wrapped;
  RegisteredBuffer* buffer = nullptr;
  std::string note;
};

Status pinned_staging(TransferEngine& engine, RegisteredBuffer& given, Staging& out) {
  Status in_place = given.pin_for_device();
  if (in_place.is_ok()) {
    out.buffer = &given;
    out.note = "the reader's registered buffer, pinned in place";
    return {};
  }
  constexpr std::size_t kPage = 4096;
  const std::size_t bytes = (given.size() + kPage - 1) / kPage * kPage;
  out.own.reset(static_cast<std::uint8_t*>(std::aligned_alloc(kPage, bytes)));
  if (!out.own)
    return Status(Code::kResourceExhausted, "cannot allocate " + std::to_string(bytes) + " bytes");
  std::memset(out.own.get(), 0, bytes);
  SLUICE_ASSIGN_OR_RETURN(out.pin, PinnedHost::pin(out.own.get(), bytes));
  SLUICE_ASSIGN_OR_RETURN(out.wrapped, engine.wrap(out.own.get(), bytes));
  out.buffer = out.wrapped.get();
  out.note = "private memory, pinned and registered (pinning the registered buffer failed: " +
             in_place.to_string() + ")";
  return {};
}

}  // namespace

int read_into_device_bench(const TransferReadArgs& args, EventLoop& loop, TransferEngine& engine,
                           const std::vector<ReadSource>& sources, const RegionLayout& layout,
                           RegisteredBuffer& given) {
  auto path = parse_path(args.device_path);
  if (!path.is_ok()) {
    std::fprintf(stderr, "transfer-read: %s\n", path.status().to_string().c_str());
    return 2;
  }
  const CudaDevices gpus = cuda_devices();
  if (gpus.count == 0) {
    std::fprintf(stderr, "transfer-read: --memory cuda: no CUDA device present (%s)\n",
                 gpus.why_none.c_str());
    return kExitNoDevice;
  }
  DeviceCopyOptions co;
  co.chunk_bytes = layout.chunk_bytes;
  auto copier_r = DeviceCopier::create(co);
  if (!copier_r.is_ok()) return failed("device copier", copier_r.status());
  DeviceCopier& copier = **copier_r;
  // Page-locked once, ahead of time, as a reader would at start-up.
  auto t_pin = Clock::now();
  Staging pinned;
  if (Status s = pinned_staging(engine, given, pinned); !s.is_ok())
    return failed("pinned staging memory", s);
  RegisteredBuffer& staging = *pinned.buffer;
  const double pin_seconds = since(t_pin);
  auto dev = DeviceBuffer::allocate(0, layout.bytes);
  if (!dev.is_ok()) return failed("device memory", dev.status());
  std::vector<DeviceSpan> spans;
  for (std::uint64_t off = 0; off < layout.bytes; off += kTensorBytes) {
    spans.push_back({static_cast<std::uint8_t*>((*dev)->data()) + off, off,
                     std::min(kTensorBytes, layout.bytes - off)});
  }
  auto tensors = DeviceLayout::make(std::move(spans), layout.bytes);
  if (!tensors.is_ok()) return failed("device layout", tensors.status());

  ReadOptions opts;
  opts.max_in_flight_per_source = args.in_flight;
  opts.total_timeout = Millis(args.timeout_ms);
  opts.op_timeout = Millis(args.op_timeout_ms);
  const auto chunks = whole_region_chunks(layout);
  // Warm-up: connections, first touches and CUDA's first copies stay out of the timings.
  if (auto w = engine.read_sync(sources, chunks, staging, opts); !w.is_ok())
    return failed("warm-up read", w.status());
  if (Status s = copier.to_device(*tensors, staging.data()); !s.is_ok())
    return failed("warm-up copy", s);

  // Rounds alternate the three, so that each sees the same machine; each one's best is kept.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double link_s = kInf, h2d_s = kInf;
  std::optional<DeviceReadStats> best;
  for (unsigned r = 0; r < std::max(1u, args.repeat); ++r) {
    auto host = engine.read_sync(sources, chunks, staging, opts);
    if (!host.is_ok()) return failed("pull into host memory", host.status());
    link_s = std::min(link_s, host->seconds);
    auto t0 = Clock::now();
    if (Status s = copier.to_device(*tensors, staging.data()); !s.is_ok())
      return failed("host-to-device copy", s);
    h2d_s = std::min(h2d_s, since(t0));
    auto d = read_into_device_sync(loop, engine, copier, sources, chunks, *tensors, &staging, opts,
                                   *path);
    if (!d.is_ok()) return failed("pull into device memory", d.status());
    if (!best || d->seconds < best->seconds) best = *d;
  }
  auto equal = device_matches((*dev)->data(), layout);
  if (!equal.is_ok()) return failed("check the device copy", equal.status());

  nlohmann::json out;
  out["bytes"] = layout.bytes;
  out["chunk_bytes"] = layout.chunk_bytes;
  out["gpus"] = gpus.count;
  out["path"] = std::string(device_path_name(best->path));
  out["ucx_cuda"] = engine.cuda_memory();
  out["pin_seconds"] = pin_seconds;
  out["staging"] = pinned.note;
  out["link_gbps"] = gbps(layout.bytes, link_s);
  out["h2d_gbps"] = gbps(layout.bytes, h2d_s);
  out["device_gbps"] = gbps(layout.bytes, best->seconds);
  out["device_seconds"] = best->seconds;
  out["tail_seconds"] = best->tail_seconds;
  const double slower = std::min(out["link_gbps"].get<double>(), out["h2d_gbps"].get<double>());
  out["ratio"] = slower > 0 ? out["device_gbps"].get<double>() / slower : 0.0;
  out["device_bytes_equal"] = *equal;
  out["fanout_gbps"] = nullptr;
  out["fanout_bytes_equal"] = nullptr;
  bool fanout_ok = true;
  if (args.fanout) {
    if (gpus.count < 2) {
      out["fanout_note"] = "one GPU: nothing to fan out to";
    } else if (!nccl_available()) {
      out["fanout_note"] = "built without NCCL";
    } else {
      auto f = fan_out(**dev, layout, std::max(1u, args.repeat), gpus.count);
      if (!f.is_ok()) return failed("fan-out", f.status());
      out["fanout_gbps"] = gbps(layout.bytes, f->seconds);
      out["fanout_gpus"] = gpus.count;
      out["fanout_bytes_equal"] = f->equal;
      fanout_ok = f->equal;
    }
  }
  std::printf("%s\n", out.dump().c_str());
  return *equal && fanout_ok ? 0 : 1;
}

}  // namespace sluice::cli
