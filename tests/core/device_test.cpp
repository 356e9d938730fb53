// Weights in GPU memory: the device layout's bookkeeping (everywhere), the errors of a machine
// without a GPU (here), and, where there is a GPU, copies and reads into device memory checked
// byte for byte. The GPU cases say they were skipped when there is none.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "core/checksum.hpp"
#include "core/cuda_device.hpp"
#include "core/device_copy.hpp"
#include "core/event_loop.hpp"
#include "core/units.hpp"
#include "wire/device_read.hpp"
#include "wire/nccl_fanout.hpp"
#include "wire/region_server.hpp"
#include "wire/transfer.hpp"

using namespace sluice::core;

namespace {

// Stand-in device addresses for the pure layout tests (never dereferenced).
void* fake(std::uintptr_t at) {
  return reinterpret_cast<void*>(at);
}

bool have_gpu() {
  auto d = cuda_devices();
  if (d.count == 0) MESSAGE("skipped: no CUDA device (" << d.why_none << ")");
  return d.count > 0;
}

// Tensor sizes that are awkward for a chunk grid: some smaller than a chunk, one spanning several
// chunks, one ending exactly on a chunk boundary.
std::vector<std::uint64_t> awkward_sizes(std::uint64_t chunk) {
  return {7, chunk - 7, 3 * chunk + 5, 1, 4096, chunk / 2 + 3, 2 * chunk};
}

std::uint64_t total_of(const std::vector<std::uint64_t>& sizes) {
  std::uint64_t t = 0;
  for (auto n : sizes)
    t += n;
  return t;
}

// Those tensors back to back in `device` memory, and in the image.
std::vector<DeviceSpan> spans_over(std::uint8_t* device, const std::vector<std::uint64_t>& sizes) {
  std::vector<DeviceSpan> spans;
  std::uint64_t off = 0;
  for (auto n : sizes) {
    spans.push_back({device + off, off, n});
    off += n;
  }
  return spans;
}

}  // namespace

TEST_SUITE("core.device") {
  TEST_CASE("a device layout is checked, sorted, and maps image ranges onto tensors") {
    // Out of order in, sorted out; a gap between tensors is allowed.
    auto l = DeviceLayout::make({{fake(0x20000), 100, 50}, {fake(0x10000), 0, 100}}, 200);
    REQUIRE_MESSAGE(l.is_ok(), l.status().to_string());
    REQUIRE(l->spans().size() == 2);
    CHECK(l->spans()[0].offset == 0);
    CHECK(l->spans()[1].offset == 100);

    std::vector<std::tuple<std::uintptr_t, std::uint64_t, std::uint64_t>> parts;
    auto collect = [&](void* dev, std::uint64_t off, std::uint64_t n) {
      parts.emplace_back(reinterpret_cast<std::uintptr_t>(dev), off, n);
    };
    l->for_range(90, 30, collect);  // the end of the first tensor and the start of the second
    REQUIRE(parts.size() == 2);
    CHECK(parts[0] ==
          std::make_tuple(std::uintptr_t{0x10000 + 90}, std::uint64_t{90}, std::uint64_t{10}));
    CHECK(parts[1] ==
          std::make_tuple(std::uintptr_t{0x20000}, std::uint64_t{100}, std::uint64_t{20}));
    parts.clear();
    l->for_range(150, 100, collect);  // the gap after the last tensor, clipped at the image's end
    CHECK(parts.empty());
    l->for_range(0, 0, collect);
    CHECK(parts.empty());
    CHECK_FALSE(l->contiguous_base());  // two allocations

    CHECK(DeviceLayout::make({{fake(1), 0, 10}, {fake(2), 5, 10}}, 100).status().code() ==
          Code::kInvalidArgument);  // overlap
    CHECK(DeviceLayout::make({{fake(1), 95, 10}}, 100).status().code() ==
          Code::kInvalidArgument);  // past the end
    CHECK(DeviceLayout::make({{nullptr, 0, 10}}, 100).status().code() == Code::kInvalidArgument);
    CHECK(DeviceLayout::make({{fake(1), 0, 0}}, 100).status().code() == Code::kInvalidArgument);
    CHECK(DeviceLayout::make({{fake(1), ~std::uint64_t{0}, 2}}, 100).status().code() ==
          Code::kInvalidArgument);  // an offset that would wrap
  }

  TEST_CASE(
      "a device layout is contiguous only when its tensors tile the image in one allocation") {
    auto base = std::uintptr_t{0x100000};
    auto tiled = DeviceLayout::make({{fake(base), 0, 64}, {fake(base + 64), 64, 36}}, 100);
    REQUIRE(tiled.is_ok());
    REQUIRE(tiled->contiguous_base());
    CHECK(*tiled->contiguous_base() == fake(base));
    // A hole in the image, an image longer than the tensors, tensors in another order in memory.
    CHECK_FALSE(DeviceLayout::make({{fake(base), 0, 60}, {fake(base + 64), 64, 36}}, 100)
                    ->contiguous_base());
    CHECK_FALSE(DeviceLayout::make({{fake(base), 0, 64}}, 100)->contiguous_base());
    CHECK_FALSE(DeviceLayout::make({{fake(base + 36), 0, 64}, {fake(base), 64, 36}}, 100)
                    ->contiguous_base());
    CHECK_FALSE(DeviceLayout().contiguous_base());
  }

  TEST_CASE("without a GPU every device call says so, and host memory is not device memory") {
    std::vector<std::uint8_t> host(4096, 1);
    CHECK_FALSE(device_pointer(host.data()).device);
    CHECK_FALSE(device_pointer(nullptr).device);
    CHECK(device_pointer(host.data()).ordinal == -1);
    if (cuda_devices().count > 0) {
      MESSAGE("skipped the no-GPU errors: a CUDA device is present");
      return;
    }
    auto copier = DeviceCopier::create({});
    REQUIRE_FALSE(copier.is_ok());
    CHECK(copier.status().code() == Code::kFailedPrecondition);
    auto buffer = DeviceBuffer::allocate(0, 1024);
    REQUIRE_FALSE(buffer.is_ok());
    CHECK(buffer.status().code() == Code::kFailedPrecondition);
    auto pin = PinnedHost::pin(host.data(), host.size());
    REQUIRE_FALSE(pin.is_ok());
    CHECK(pin.status().code() == Code::kFailedPrecondition);
    auto fan = LocalFanout::create({0, 1});
    REQUIRE_FALSE(fan.is_ok());
    CHECK(fan.status().code() == Code::kFailedPrecondition);
    // No device to copy from: an error, never a crash.
    CHECK_FALSE(device_chunk_checksum(host.data(), host.size()).is_ok());
  }

  TEST_CASE("options out of range are refused before any device is touched") {
    DeviceCopyOptions o;
    o.streams = 0;
    auto none = DeviceCopier::create(o);
    REQUIRE_FALSE(none.is_ok());
    // Without CUDA the build's answer comes first.
    CHECK((none.status().code() == Code::kInvalidArgument ||
           none.status().message().find("built without CUDA") != std::string::npos));
    o = {};
    o.chunk_bytes = 0;
    CHECK_FALSE(DeviceCopier::create(o).is_ok());
  }

  TEST_CASE("host image -> device tensors -> host image is bit for bit (skipped without a GPU)") {
    if (!have_gpu()) return;
    DeviceCopyOptions o;
    o.chunk_bytes = 1 << 20;
    o.streams = 3;
    o.window = 4;
    auto copier = DeviceCopier::create(o);
    REQUIRE_MESSAGE(copier.is_ok(), copier.status().to_string());
    const auto sizes = awkward_sizes(o.chunk_bytes);
    const std::uint64_t total = total_of(sizes);
    auto dev = DeviceBuffer::allocate(0, total);
    REQUIRE_MESSAGE(dev.is_ok(), dev.status().to_string());
    auto spans = spans_over(static_cast<std::uint8_t*>((*dev)->data()), sizes);
    auto layout = DeviceLayout::make(spans, total);
    REQUIRE(layout.is_ok());
    CHECK((*copier)->check(*layout).is_ok());
    CHECK(device_pointer((*dev)->data()).device);

    std::vector<std::uint8_t> image(total), back(total, 0);
    fill_pseudo_random(image.data(), image.size(), 7);
    for (bool pinned : {false, true}) {
      CAPTURE(pinned);
      std::vector<std::unique_ptr<PinnedHost>> pins;
      if (pinned) {
        pins.push_back(PinnedHost::pin(image.data(), image.size()).value());
        pins.push_back(PinnedHost::pin(back.data(), back.size()).value());
      }
      // As a read verifies them: chunks in no particular order, then one wait.
      std::vector<std::uint64_t> order;
      for (std::uint64_t off = 0; off < total; off += o.chunk_bytes)
        order.push_back(off);
      std::shuffle(order.begin(), order.end(), std::mt19937(3));
      for (auto off : order) {
        Status s = (*copier)->enqueue_to_device(*layout, image.data(), off, o.chunk_bytes);
        REQUIRE_MESSAGE(s.is_ok(), s.to_string());
      }
      Status s = (*copier)->synchronize();
      REQUIRE_MESSAGE(s.is_ok(), s.to_string());
      // Every chunk's checksum, read from the device, is the image's.
      for (std::uint64_t off = 0; off < total; off += o.chunk_bytes) {
        std::uint64_t n = std::min<std::uint64_t>(o.chunk_bytes, total - off);
        auto sum = device_chunk_checksum(static_cast<std::uint8_t*>((*dev)->data()) + off, n);
        REQUIRE(sum.is_ok());
        CHECK(*sum == chunk_checksum(image.data() + off, n));
      }
      std::fill(back.begin(), back.end(), 0);
      std::vector<std::uint64_t> reported;
      s = (*copier)->to_host(*layout, back.data(), [&](std::uint64_t k) { reported.push_back(k); });
      REQUIRE_MESSAGE(s.is_ok(), s.to_string());
      CHECK(std::memcmp(back.data(), image.data(), total) == 0);
      REQUIRE(reported.size() == (total + o.chunk_bytes - 1) / o.chunk_bytes);
      for (std::size_t k = 0; k < reported.size(); ++k)
        CHECK(reported[k] == k);
    }
    // The whole image at once, too.
    std::vector<std::uint8_t> other(total);
    fill_pseudo_random(other.data(), other.size(), 8);
    REQUIRE((*copier)->to_device(*layout, other.data()).is_ok());
    REQUIRE((*copier)->to_host(*layout, back.data()).is_ok());
    CHECK(std::memcmp(back.data(), other.data(), total) == 0);
  }

  TEST_CASE("a layout over host memory is refused by the copier (skipped without a GPU)") {
    if (!have_gpu()) return;
    auto copier = DeviceCopier::create({});
    REQUIRE(copier.is_ok());
    std::vector<std::uint8_t> host(1024);
    auto layout = DeviceLayout::make({{host.data(), 0, host.size()}}, host.size());
    REQUIRE(layout.is_ok());
    Status s = (*copier)->check(*layout);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find("host memory") != std::string::npos);
    std::vector<std::uint8_t> out(1024);
    CHECK((*copier)->to_host(*layout, out.data()).code() == Code::kInvalidArgument);
  }

  TEST_CASE(
      "a version read into device tensors is the holder's, bit for bit (skipped without a "
      "GPU)") {
    if (!have_gpu()) return;
    auto loop = EventLoop::create().value();
    TransferOptions to;
    to.ucx_config = {{"TLS", "sm,self"}};
    auto holder = TransferEngine::create(*loop, to);
    auto reader = TransferEngine::create(*loop, to);
    REQUIRE_MESSAGE(holder.is_ok(), holder.status().to_string());
    REQUIRE_MESSAGE(reader.is_ok(), reader.status().to_string());
    const std::uint64_t chunk = 1 << 20;
    const auto sizes = awkward_sizes(chunk);
    const std::uint64_t total = total_of(sizes);
    auto src = (*holder)->allocate(total).value();
    fill_pseudo_random(src->data(), total, 11);
    auto region = make_layout("v", src->data(), total, chunk).value();
    std::vector<ReadSource> sources = {{"holder", src->descriptor()}};

    DeviceCopyOptions o;
    o.chunk_bytes = chunk;
    auto copier = DeviceCopier::create(o).value();
    auto dev = DeviceBuffer::allocate(0, total).value();
    // Two allocations' worth of tensors: the first three here, the rest in a second buffer, so
    // that the layout is not contiguous and the staged path is the one taken everywhere.
    auto second = DeviceBuffer::allocate(0, total).value();
    auto spans = spans_over(static_cast<std::uint8_t*>(dev->data()), sizes);
    for (std::size_t i = 3; i < spans.size(); ++i)
      spans[i].data = static_cast<std::uint8_t*>(second->data()) + spans[i].offset;
    auto layout = DeviceLayout::make(spans, total).value();
    CHECK(choose_device_path(**reader, layout) == DevicePath::kStaged);
    auto staging = (*reader)->allocate(total).value();
    REQUIRE(staging->pin_for_device().is_ok());
    CHECK(staging->pinned());

    std::uint32_t reported = 0;
    ReadOptions ro;
    ro.on_chunk = [&](const ChunkRead&) { ++reported; };
    auto r = read_into_device_sync(*loop, **reader, *copier, sources, whole_region_chunks(region),
                                   layout, staging.get(), ro, DevicePath::kAuto);
    REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
    CHECK(r->path == DevicePath::kStaged);
    CHECK(r->read.bytes == total);
    CHECK(reported == region.chunk_count());
    std::vector<std::uint8_t> back(total, 0);
    REQUIRE(copier->to_host(layout, back.data()).is_ok());
    CHECK(std::memcmp(back.data(), src->data(), total) == 0);

    // Without a staging buffer the staged path has nowhere to read into.
    auto none =
        read_into_device_sync(*loop, **reader, *copier, sources, whole_region_chunks(region),
                              layout, nullptr, {}, DevicePath::kStaged);
    CHECK(none.status().code() == Code::kInvalidArgument);
    // The direct path needs CUDA in UCX and one allocation.
    auto direct =
        read_into_device_sync(*loop, **reader, *copier, sources, whole_region_chunks(region),
                              layout, staging.get(), {}, DevicePath::kDirect);
    CHECK_FALSE(direct.is_ok());
    staging.reset();
    src.reset();
  }

  TEST_CASE("NCCL fans a buffer out to the host's other GPUs (skipped below two GPUs)") {
    auto gpus = cuda_devices();
    if (gpus.count < 2 || !nccl_available()) {
      MESSAGE("skipped: needs two CUDA devices and NCCL ("
              << gpus.count << " device(s), nccl " << std::string(nccl_available() ? "yes" : "no")
              << ")");
      return;
    }
    const std::uint64_t bytes = (8u << 20) + 3;
    std::vector<std::unique_ptr<DeviceBuffer>> bufs;
    std::vector<void*> ptrs;
    std::vector<int> devices;
    for (int d = 0; d < gpus.count; ++d) {
      bufs.push_back(DeviceBuffer::allocate(d, bytes).value());
      ptrs.push_back(bufs.back()->data());
      devices.push_back(d);
    }
    std::vector<std::uint8_t> image(bytes);
    fill_pseudo_random(image.data(), bytes, 5);
    DeviceCopyOptions o;
    auto copier = DeviceCopier::create(o).value();
    auto layout = DeviceLayout::make({{ptrs[0], 0, bytes}}, bytes).value();
    REQUIRE(copier->to_device(layout, image.data()).is_ok());
    auto fan = LocalFanout::create(devices);
    REQUIRE_MESSAGE(fan.is_ok(), fan.status().to_string());
    Status s = (*fan)->broadcast(ptrs, bytes);
    REQUIRE_MESSAGE(s.is_ok(), s.to_string());
    for (int d = 1; d < gpus.count; ++d) {
      auto sum = device_chunk_checksum(ptrs[static_cast<std::size_t>(d)], bytes);
      REQUIRE(sum.is_ok());
      CHECK(*sum == chunk_checksum(image.data(), bytes));
    }
    // Buffers on the wrong devices are refused.
    std::vector<void*> swapped = ptrs;
    std::swap(swapped[0], swapped[1]);
    CHECK((*fan)->broadcast(swapped, bytes).code() == Code::kInvalidArgument);
  }
}
