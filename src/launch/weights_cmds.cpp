#include "launch/weights_cmds.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "actor/publisher.hpp"
#include "core/log.hpp"
#include "format/safetensors.hpp"
#include "core/units.hpp"
#include "weightstore/client.hpp"

namespace sluice::cli {

using namespace sluice::core;

namespace {
// The pull command's progress lines.
constexpr Millis kPullProgressPeriod{1000};

// The first tensor of a version published from a safetensors file: the file's own header
// (8-byte length and JSON), so that a pull writes back exactly the bytes that were published.
constexpr const char* kHeaderTensor = "__safetensors_header__";

int fail(const char* cmd, const Status& s, int code = 1) {
  std::fprintf(stderr, "sluice %s: %s\n", cmd, s.to_string().c_str());
  return code;
}

Result<std::vector<std::uint8_t>> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open '" + path + "'");
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  if (in.bad()) return invalid_argument("cannot read '" + path + "'");
  return bytes;
}

}  // namespace

int run_publish(const PublishArgs& args, const std::vector<std::string>& env) {
  log::set_process_name("publish");
  auto chunk = parse_bytes(args.chunk);
  if (!chunk.is_ok() || *chunk == 0) return fail("publish", chunk.status(), 2);
  auto file = read_file(args.safetensors);
  if (!file.is_ok()) return fail("publish", file.status(), 2);
  auto header = parse_safetensors_header(file->data(), file->size(), file->size());
  if (!header.is_ok()) return fail("publish", header.status().with_context(args.safetensors), 2);

  std::vector<actor::TensorView> views;
  views.push_back({kHeaderTensor, "U8", {header->data_offset}, file->data(), header->data_offset});
  for (const auto& t : header->tensors) {
    views.push_back(
        {t.name, t.dtype, t.shape, file->data() + header->data_offset + t.begin, t.end - t.begin});
  }

  auto loop = EventLoop::create().value();
  loop->handle_shutdown_signals();
  TransferOptions topts;
  topts.environment = env;
  topts.stream_reach = args.store;
  auto security = tool_security(args.auth, "publish");
  if (!security.is_ok()) return fail("publish", security.status(), 2);
  // Chunk streams as a job's roles have them (auto), with no datacenter label of its own.
  if (auto st = set_stream_security(topts, "auto", "", *security, "publish"); !st.is_ok())
    return fail("publish", st, 2);
  auto engine = TransferEngine::create(*loop, topts);
  if (!engine.is_ok()) return fail("publish", engine.status());
  auto store = weightstore::StoreClient::create(*loop, args.store, *security);
  if (!store.is_ok()) return fail("publish", store.status(), 2);
  actor::PublisherOptions po;
  po.model = args.model;
  // A holder id of this member's own (identity-<suffix>, where the job authenticates).
  const std::string pid = "publish-" + std::to_string(::getpid());
  po.holder_id = !args.holder_id.empty() ? args.holder_id
                 : security->curve()     ? security->identity + "-" + pid
                                         : pid;
  po.chunk_bytes = *chunk;
  auto publisher = actor::Publisher::create(*loop, **engine, **store, po);
  if (!publisher.is_ok()) return fail("publish", publisher.status(), 2);
  auto manifest = (*publisher)->publish(args.version, views);
  if (!manifest.is_ok()) return fail("publish", manifest.status());
  std::printf(
      "published %s@%llu: %zu tensors, %s, %llu chunks; serving it until a relay holds it, or "
      "Ctrl-C\n",
      args.model.c_str(), static_cast<unsigned long long>(args.version), header->tensors.size(),
      format_bytes(manifest->total_bytes).c_str(),
      static_cast<unsigned long long>(manifest->chunk_count()));
  std::fflush(stdout);
  // Serve as a holder: heartbeats keep the store's view of this process alive.
  auto beat = loop->every(weightstore::kHolderHeartbeatPeriod, [&] { (*publisher)->heartbeat(); });
  loop->on_shutdown([&](int) {
    beat.reset();
    loop->stop();
  });
  loop->run().ignore();
  return 0;
}

int run_pull(const PullArgs& args, const std::vector<std::string>& env) {
  log::set_process_name("pull");
  if (args.out.empty()) return fail("pull", invalid_argument("--out FILE is required"), 2);
  auto loop = EventLoop::create().value();
  TransferOptions topts;
  topts.environment = env;
  topts.stream_reach = args.store;
  auto security = tool_security(args.auth, "pull");
  if (!security.is_ok()) return fail("pull", security.status(), 2);
  // Chunk streams as a job's roles have them (auto), with no datacenter label of its own.
  if (auto st = set_stream_security(topts, "auto", "", *security, "pull"); !st.is_ok())
    return fail("pull", st, 2);
  auto engine = TransferEngine::create(*loop, topts);
  if (!engine.is_ok()) return fail("pull", engine.status());
  auto store = weightstore::StoreClient::create(*loop, args.store, *security);
  if (!store.is_ok()) return fail("pull", store.status(), 2);
  ReadOptions ro;
  ro.total_timeout = Millis(args.timeout_ms);
  ro.on_progress = [](const ReadProgress& p) {
    log::info("pull: {} of {}", format_bytes(p.bytes_done), format_bytes(p.bytes_total));
  };
  ro.progress_interval = kPullProgressPeriod;
  auto pulled = weightstore::pull(**engine, **store, args.model, args.version, {}, ro);
  if (!pulled.is_ok()) return fail("pull", pulled.status());
  const auto& m = pulled->manifest;
  const std::uint8_t* bytes = pulled->buffer->data();
  Status written;
  if (!m.tensors.empty() && m.tensors[0].name == kHeaderTensor) {
    std::ofstream out(args.out, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes), static_cast<std::streamsize>(m.total_bytes));
    out.close();
    if (!out) written = invalid_argument("cannot write '" + args.out + "'");
  } else {
    std::vector<SafetensorsInput> tensors;
    for (const auto& t : m.tensors)
      tensors.push_back({t.name, t.dtype, t.shape, bytes + t.offset, t.bytes});
    written = write_safetensors(args.out, tensors);
  }
  if (!written.is_ok()) return fail("pull", written);
  std::printf("pulled %s@%llu into %s: %s in %.3f s\n", m.model.c_str(),
              static_cast<unsigned long long>(m.version), args.out.c_str(),
              format_bytes(m.total_bytes).c_str(), pulled->stats.seconds);
  return 0;
}

}  // namespace sluice::cli
