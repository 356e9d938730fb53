// RAII owners of UCX (ucp) handles. Internal to sluice_core: only core .cpp files include this
// header; the rest of sluice sees transfer.hpp, which keeps UCX types out.
//
// Each type owns one handle and releases it in its destructor (which never throws and logs a
// failed close). None is copyable or movable. Destruction order matters and is the owner's job:
// rkeys before their endpoint, endpoints and memory registrations before the worker, the worker
// before the context.
//
// Thread safety: a Worker and everything made from it belong to one thread (the loop thread).
#pragma once

#include <ucp/api/ucp.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace sluice::core::ucx {

Status to_status(ucs_status_t s, const std::string& what);

class Context {
 public:
  // UCX reads its UCX_* environment itself. Features: RMA (one-sided GET), and WAKEUP (an event
  // fd) when `wakeup` is set. `explicit_config` (names without UCX_) is applied over it.
  static Result<std::unique_ptr<Context>> create(
      bool wakeup, const std::vector<std::pair<std::string, std::string>>& explicit_config = {});
  bool wakeup() const { return wakeup_; }
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ucp_context_h get() const { return h_; }

  // The names of the transports UCX opened ("self", "tcp", "posix", "rc_mlx5", ...), from
  // ucp_context_print_info (UCX 1.13 has no query for them).
  std::vector<std::string> transport_names() const;
  // Whether this UCX can register and move CUDA device memory (UCS_MEMORY_TYPE_CUDA among the
  // context's memory types, ucp_context_query). Debian's UCX 1.13 is built without CUDA: false.
  bool cuda_memory() const;

 private:
  Context() = default;
  ucp_context_h h_ = nullptr;
  bool wakeup_ = false;
};

class Worker {
 public:
  static Result<std::unique_ptr<Worker>> create(Context& ctx);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  ucp_worker_h get() const { return h_; }
  const std::string& address() const { return address_; }  // packed worker address bytes
  int event_fd() const { return efd_; }                    // -1 without the WAKEUP feature
  // Progresses until nothing is left, then arms the event fd. Returns whether anything progressed.
  bool progress_and_arm();
  unsigned progress() { return ucp_worker_progress(h_); }

 private:
  Worker() = default;
  ucp_worker_h h_ = nullptr;
  std::string address_;
  int efd_ = -1;
};

class MemoryRegion {
 public:
  // Registers memory the caller owns.
  static Result<std::unique_ptr<MemoryRegion>> map(Context& ctx, void* addr, std::size_t bytes);
  // Registers CUDA device memory the caller owns (memory type UCS_MEMORY_TYPE_CUDA); only for a
  // context with cuda_memory().
  static Result<std::unique_ptr<MemoryRegion>> map_device(Context& ctx, void* addr,
                                                          std::size_t bytes);
  // Lets UCX allocate the memory (UCP_MEM_MAP_ALLOCATE), which it places in shared memory
  // (sysv/posix) when it can. A same-host reader then maps the segment and copies from it
  // directly, where memory the caller allocated would go through a slower path (see
  // TransferEngine::allocate). Freed on destruction.
  static Result<std::unique_ptr<MemoryRegion>> allocate(Context& ctx, std::size_t bytes);
  void* address() const { return address_; }
  ~MemoryRegion();
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  ucp_mem_h get() const { return h_; }
  const std::string& packed_rkey() const { return rkey_; }

 private:
  MemoryRegion() = default;
  ucp_context_h ctx_ = nullptr;
  ucp_mem_h h_ = nullptr;
  void* address_ = nullptr;
  std::string rkey_;
  // The three factories' one registration: maps `params` (address and length set; readable by
  // peers only), finds where UCX put memory it allocated, and packs the key. `what` names the
  // mapping in its error.
  static Result<std::unique_ptr<MemoryRegion>> register_memory(Context& ctx,
                                                               ucp_mem_map_params_t params,
                                                               const std::string& what);
  Status pack();
};

class RemoteKey {
 public:
  static Result<std::unique_ptr<RemoteKey>> unpack(ucp_ep_h ep, const std::string& packed);
  ~RemoteKey();
  RemoteKey(const RemoteKey&) = delete;
  RemoteKey& operator=(const RemoteKey&) = delete;
  ucp_rkey_h get() const { return h_; }

 private:
  RemoteKey() = default;
  ucp_rkey_h h_ = nullptr;
};

// An endpoint in peer error-handling mode where the transports support it: when the peer dies,
// outstanding operations complete with an error and on_error runs (from within worker
// progress). UCX 1.13 cannot reach a peer over shared memory alone (cma, posix, sysv) in that
// mode ("Destination is unreachable", also in ucx_perftest -e), so there the endpoint falls back
// to no error handling: a dead peer then shows up as failed GETs (cma reports the vanished
// process) or as the reader's operation timeout.
class Endpoint {
 public:
  using ErrorFn = void (*)(void* arg, ucs_status_t status);
  // `peer_mode` false skips the peer error-handling attempt (for shared-memory-only transports,
  // where it cannot succeed and UCX logs an error for trying).
  static Result<std::unique_ptr<Endpoint>> connect(Worker& worker, const std::string& address,
                                                   ErrorFn on_error, void* arg,
                                                   bool peer_mode = true);
  ~Endpoint();  // force-closes, progressing the worker for a bounded time
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;
  ucp_ep_h get() const { return h_; }
  bool failed() const { return failed_; }
  bool peer_error_handling() const { return peer_mode_; }
  ucs_status_t failure() const { return failure_; }
  // The UCT transports of the endpoint's lanes ("tcp", "posix", "cma", ...), read from
  // ucp_ep_print_info (UCX 1.13 has no query for them). Empty when it cannot be read.
  std::vector<std::string> lane_transports() const;

 private:
  Endpoint() = default;
  static void on_error_cb(void* arg, ucp_ep_h ep, ucs_status_t status);
  Worker* worker_ = nullptr;
  ucp_ep_h h_ = nullptr;
  ErrorFn on_error_ = nullptr;
  void* arg_ = nullptr;
  bool failed_ = false;
  bool peer_mode_ = true;
  ucs_status_t failure_ = UCS_OK;
};

}  // namespace sluice::core::ucx
