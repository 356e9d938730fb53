#include "wire/ucx.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "core/log.hpp"

namespace sluice::core::ucx {

Status to_status(ucs_status_t s, const std::string& what) {
  if (s == UCS_OK) return {};
  std::string m = what + ": " + ucs_status_string(s);
  switch (s) {
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return timeout_error(m);
    case UCS_ERR_CANCELED:
      return cancelled(m);
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
      return {Code::kResourceExhausted, m};
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
      return invalid_argument(m);
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_SOME_CONNECTS_FAILED:
      return unavailable(m);
    default:
      return internal_error(m);
  }
}

// ---------------------------------------------------------------- context

Result<std::unique_ptr<Context>> Context::create(
    bool wakeup, const std::vector<std::pair<std::string, std::string>>& explicit_config) {
  ucp_config_t* config = nullptr;
  SLUICE_TRY(to_status(ucp_config_read(nullptr, nullptr, &config), "ucx: read config"));
  std::unique_ptr<Context> c(new Context());
  for (const auto& [name, value] : explicit_config) {
    ucs_status_t ms = ucp_config_modify(config, name.c_str(), value.c_str());
    if (ms != UCS_OK) {
      ucp_config_release(config);
      return invalid_argument("ucx: cannot set " + name + "=" + value + ": " +
                              ucs_status_string(ms));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_RMA | (wakeup ? UCP_FEATURE_WAKEUP : 0);
  c->wakeup_ = wakeup;
  params.mt_workers_shared = 0;
  ucs_status_t s = ucp_init(&params, config, &c->h_);
  ucp_config_release(config);
  SLUICE_TRY(to_status(s, "ucx: init"));
  return c;
}

Context::~Context() {
  if (h_) ucp_cleanup(h_);
}

namespace {
// What one of UCX's print_info functions writes, as a string ("" when it cannot be captured).
template <typename Print>
std::string printed(Print print) {
  char* text = nullptr;
  std::size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (!f) return {};
  print(f);
  std::fclose(f);
  std::string out(text ? text : "", len);
  std::free(text);
  return out;
}
}  // namespace

std::vector<std::string> Context::transport_names() const {
  const std::string info = printed([this](FILE* f) { ucp_context_print_info(h_, f); });
  // "#      resource 1  :  md 1  dev 1  flags -- tcp/lo"
  std::vector<std::string> names;
  std::size_t at = 0;
  while ((at = info.find("flags -- ", at)) != std::string::npos) {
    at += 9;
    auto end = info.find_first_of("/\n", at);
    if (end == std::string::npos) break;
    std::string name = info.substr(at, end - at);
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    at = end;
  }
  return names;
}

bool Context::cuda_memory() const {
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(h_, &attr) != UCS_OK) return false;
  return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

// ---------------------------------------------------------------- worker

Result<std::unique_ptr<Worker>> Worker::create(Context& ctx) {
  std::unique_ptr<Worker> w(new Worker());
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  SLUICE_TRY(to_status(ucp_worker_create(ctx.get(), &params, &w->h_), "ucx: create worker"));
  ucp_address_t* addr = nullptr;
  std::size_t len = 0;
  SLUICE_TRY(to_status(ucp_worker_get_address(w->h_, &addr, &len), "ucx: worker address"));
  w->address_.assign(reinterpret_cast<const char*>(addr), len);
  ucp_worker_release_address(w->h_, addr);
  if (ctx.wakeup()) {
    SLUICE_TRY(to_status(ucp_worker_get_efd(w->h_, &w->efd_), "ucx: worker event fd"));
  }
  return w;
}

Worker::~Worker() {
  if (h_) ucp_worker_destroy(h_);
}

bool Worker::progress_and_arm() {
  bool any = false;
  if (efd_ < 0) {
    while (ucp_worker_progress(h_) != 0)
      any = true;
    return any;
  }
  while (true) {
    while (ucp_worker_progress(h_) != 0)
      any = true;
    ucs_status_t s = ucp_worker_arm(h_);
    if (s == UCS_OK) return any;
    if (s != UCS_ERR_BUSY) {
      log::error("ucx: worker arm failed: {}", ucs_status_string(s));
      return any;
    }
  }
}

// ---------------------------------------------------------------- memory

namespace {
// Peers read registered memory and never write it. RDMA hardware enforces a registration without
// remote write; UCX 1.13's tcp transport does not (measured: a PUT over tcp into memory
// registered this way landed), which is one reason the transfer engine leaves tcp out of UCX and
// serves tcp readers over chunk streams, which have no write at all (see transfer_engine.cpp).
constexpr unsigned kPeersReadOnly =
    UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE | UCP_MEM_MAP_PROT_REMOTE_READ;
}  // namespace

Result<std::unique_ptr<MemoryRegion>> MemoryRegion::register_memory(Context& ctx,
                                                                    ucp_mem_map_params_t params,
                                                                    const std::string& what) {
  std::unique_ptr<MemoryRegion> m(new MemoryRegion());
  m->ctx_ = ctx.get();
  params.field_mask |= UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                       UCP_MEM_MAP_PARAM_FIELD_PROT;
  params.prot = kPeersReadOnly;
  SLUICE_TRY(to_status(ucp_mem_map(ctx.get(), &params, &m->h_), what));
  m->address_ = params.address;
  if ((params.field_mask & UCP_MEM_MAP_PARAM_FIELD_FLAGS) &&
      (params.flags & UCP_MEM_MAP_ALLOCATE)) {
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    SLUICE_TRY(to_status(ucp_mem_query(m->h_, &attr), "ucx: query allocated memory"));
    if (attr.length < params.length) return internal_error("ucx: allocated less memory than asked");
    m->address_ = attr.address;
  }
  SLUICE_TRY(m->pack());
  return m;
}

Result<std::unique_ptr<MemoryRegion>> MemoryRegion::map(Context& ctx, void* addr,
                                                        std::size_t bytes) {
  ucp_mem_map_params_t params{};
  params.address = addr;
  params.length = bytes;
  return register_memory(ctx, params, "ucx: register memory");
}

Result<std::unique_ptr<MemoryRegion>> MemoryRegion::map_device(Context& ctx, void* addr,
                                                               std::size_t bytes) {
  if (!ctx.cuda_memory()) return failed_precondition("ucx: this UCX has no CUDA memory support");
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  params.address = addr;
  params.length = bytes;
  params.memory_type = UCS_MEMORY_TYPE_CUDA;
  return register_memory(ctx, params, "ucx: register device memory");
}

Result<std::unique_ptr<MemoryRegion>> MemoryRegion::allocate(Context& ctx, std::size_t bytes) {
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  params.address = nullptr;
  params.length = bytes;
  params.flags = UCP_MEM_MAP_ALLOCATE;
  return register_memory(ctx, params, "ucx: allocate " + std::to_string(bytes) + " bytes");
}

Status MemoryRegion::pack() {
  void* rkey = nullptr;
  std::size_t rkey_len = 0;
  SLUICE_TRY(to_status(ucp_rkey_pack(ctx_, h_, &rkey, &rkey_len), "ucx: pack rkey"));
  rkey_.assign(static_cast<const char*>(rkey), rkey_len);
  ucp_rkey_buffer_release(rkey);
  return {};
}

MemoryRegion::~MemoryRegion() {
  if (h_) {
    ucs_status_t s = ucp_mem_unmap(ctx_, h_);
    if (s != UCS_OK) log::warn("ucx: unregister memory failed: {}", ucs_status_string(s));
  }
}

Result<std::unique_ptr<RemoteKey>> RemoteKey::unpack(ucp_ep_h ep, const std::string& packed) {
  std::unique_ptr<RemoteKey> k(new RemoteKey());
  SLUICE_TRY(to_status(ucp_ep_rkey_unpack(ep, packed.data(), &k->h_), "ucx: unpack rkey"));
  return k;
}

RemoteKey::~RemoteKey() {
  if (h_) ucp_rkey_destroy(h_);
}

// ---------------------------------------------------------------- endpoint

void Endpoint::on_error_cb(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* self = static_cast<Endpoint*>(arg);
  self->failed_ = true;
  self->failure_ = status;
  if (self->on_error_) self->on_error_(self->arg_, status);
}

Result<std::unique_ptr<Endpoint>> Endpoint::connect(Worker& worker, const std::string& address,
                                                    ErrorFn on_error, void* arg, bool peer_mode) {
  std::unique_ptr<Endpoint> e(new Endpoint());
  e->worker_ = &worker;
  e->on_error_ = on_error;
  e->arg_ = arg;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &Endpoint::on_error_cb;
  params.err_handler.arg = e.get();
  ucs_status_t s = peer_mode ? ucp_ep_create(worker.get(), &params, &e->h_) : UCS_ERR_UNREACHABLE;
  if (s == UCS_ERR_UNREACHABLE) {
    params.field_mask &= ~static_cast<std::uint64_t>(UCP_EP_PARAM_FIELD_ERR_HANDLER);
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    s = ucp_ep_create(worker.get(), &params, &e->h_);
    if (s == UCS_OK) {
      e->peer_mode_ = false;
      log::debug("ucx: endpoint without peer failure detection (transport does not support it)");
    }
  }
  SLUICE_TRY(to_status(s, "ucx: connect"));
  return e;
}

std::vector<std::string> Endpoint::lane_transports() const {
  const std::string info = printed([this](FILE* f) { ucp_ep_print_info(h_, f); });
  // Lines look like "#   lane[0]:  1:tcp/lo.0 md[0]  -> md[0]/tcp/sysdev[255] am am_bw#0".
  std::set<std::string> names;
  std::istringstream in(info);
  for (std::string line; std::getline(in, line);) {
    auto lane = line.find("lane[");
    if (lane == std::string::npos) continue;
    auto colon = line.find(':', line.find("]:", lane) + 2);
    auto slash = line.find('/', colon);
    if (colon == std::string::npos || slash == std::string::npos) continue;
    names.insert(line.substr(colon + 1, slash - colon - 1));
  }
  return {names.begin(), names.end()};
}

Endpoint::~Endpoint() {
  if (!h_) return;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t req = ucp_ep_close_nbx(h_, &p);
  if (UCS_PTR_IS_ERR(req)) {
    log::debug("ucx: close endpoint: {}", ucs_status_string(UCS_PTR_STATUS(req)));
    return;
  }
  if (req == nullptr) return;
  // A forced close completes locally; bound the wait anyway so a destructor never hangs.
  constexpr auto kForcedCloseWait = std::chrono::seconds(5);
  auto deadline = std::chrono::steady_clock::now() + kForcedCloseWait;
  while (ucp_request_check_status(req) == UCS_INPROGRESS &&
         std::chrono::steady_clock::now() < deadline) {
    ucp_worker_progress(worker_->get());
  }
  if (ucp_request_check_status(req) == UCS_INPROGRESS) {
    log::warn("ucx: endpoint close did not finish within 5 s");
  }
  ucp_request_free(req);
}

}  // namespace sluice::core::ucx
