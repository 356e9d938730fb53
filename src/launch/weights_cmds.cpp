#include "launch/weights_cmds.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "actor/publisher.hpp"
#include "core/log.hpp"
#include "core/units.hpp"
#include "format/safetensors.hpp"
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

// What publish and pull both set up: the event loop, the tool's security, a transfer engine with
// chunk streams as a job's roles have them, and a client of the store. Members in the order they
// are made, so that they go in reverse.
struct StoreTools {
  std::unique_ptr<EventLoop> loop;
  Security security = Security::plain();
  std::unique_ptr<TransferEngine> engine;
  std::unique_ptr<weightstore::StoreClient> store;
};

// Makes `out` for the command `cmd` (publish or pull) and the store at `store`; the loop handles
// SIGINT and SIGTERM when `handle_signals`. 0, or the exit code once the failure is printed.
int open_store_tools(const char* cmd, const std::string& store, const AuthArgs& auth,
                     const std::vector<std::string>& env, bool handle_signals, StoreTools& out) {
  out.loop = EventLoop::create().value();
  if (handle_signals) out.loop->handle_shutdown_signals();
  TransferOptions topts;
  topts.environment = env;
  topts.stream_reach = store;
  auto security = tool_security(auth, cmd);
  if (!security.is_ok()) return fail(cmd, security.status(), 2);
  out.security = std::move(security).value();
  // Chunk streams as a job's roles have them (auto), with no datacenter label of its own.
  if (auto st = set_stream_security(topts, "auto", "", out.security, cmd); !st.is_ok())
    return fail(cmd, st, 2);
  auto engine = TransferEngine::create(*out.loop, topts);
  if (!engine.is_ok()) return fail(cmd, engine.status());
  out.engine = std::move(engine).value();
  auto client = weightstore::StoreClient::create(*out.loop, store, out.security);
  if (!client.is_ok()) return fail(cmd, client.status(), 2);
  out.store = std::move(client).value();
  return 0;
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

  StoreTools tools;
  if (int code = open_store_tools("publish", args.store, args.auth, env, true, tools); code != 0)
    return code;
  EventLoop* loop = tools.loop.get();
  const Security& security = tools.security;
  actor::PublisherOptions po;
  po.model = args.model;
  // A holder id of this member's own (identity-<suffix>, where the job authenticates).
  const std::string pid = "publish-" + std::to_string(::getpid());
  po.holder_id = !args.holder_id.empty() ? args.holder_id
                 : security.curve()      ? security.identity + "-" + pid
                                         : pid;
  po.chunk_bytes = *chunk;
  auto publisher = actor::Publisher::create(*loop, *tools.engine, *tools.store, po);
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
  StoreTools tools;
  if (int code = open_store_tools("pull", args.store, args.auth, env, false, tools); code != 0)
    return code;
  ReadOptions ro;
  ro.total_timeout = Millis(args.timeout_ms);
  ro.on_progress = [](const ReadProgress& p) {
    log::info("pull: {} of {}", format_bytes(p.bytes_done), format_bytes(p.bytes_total));
  };
  ro.progress_interval = kPullProgressPeriod;
  auto pulled = weightstore::pull(*tools.engine, *tools.store, args.model, args.version, {}, ro);
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
