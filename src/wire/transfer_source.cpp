// How a read reaches a source (TransferEngine::Impl::open_source): over the holder's chunk
// stream when it is on another machine or UCX would use tcp to it, else a UCX endpoint (cached
// per worker address) and remote key, with the key's region checked against what is mapped here.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <mutex>

#include "core/log.hpp"
#include "wire/segment_owner.hpp"
#include "wire/transfer_impl.hpp"
#include "wire/transport_choice.hpp"

namespace sluice::core {

using transfer_detail::SourceState;
using transfer_detail::UcxPeer;

namespace {

// A chunk stream's connect waits at most this long, even when an operation may take longer.
constexpr Millis kStreamConnectTimeout{5000};

// UCX 1.13's tcp transport has no GET, so a GET to a tcp-only peer is emulated: the
// holder's worker receives a GET request message and sends the bytes back as an active message
// (ucp_get_req_handler, rma/rma_sw.c). When that reply cannot be sent at once (the socket's send
// buffer is busy with an earlier reply), it waits on the tcp endpoint's pending queue. If the
// reader has died, sending it from there fails, the failure synchronously discards the endpoint
// (ucp_ep_set_failed -> ucp_worker_discard_uct_ep), and the pending dispatcher puts the failed
// reply back on the discarded endpoint's queue (uct_pending_queue_dispatch re-queues on any
// error); destroying the endpoint then finds it there: "Assertion `0' failed" in
// uct_tcp_ep_pending_purge, the holder aborts. (A reply whose first send attempt fails outright
// ends in ucs_fatal("unexpected error") in ucp_request_try_send the same way.) No UCX setting
// avoids it; one GET in flight per holder does: a holder then never has a second reply to this
// reader queued behind the first, and a reader dies only after consuming its previous reply, so
// its socket closes gracefully (FIN) and the one reply still owed is accepted by the kernel.
// Measured with tests/cli/reader_death.sh (see the commit and docs/architecture.md). The cost
// is throughput to tcp-only peers. Replies must fit one active message (the holder's
// UCX_TCP_TX_SEG_SIZE, 2 MiB by default here): a larger GET is sent in fragments, and the
// second one waits on the pending queue again.
std::uint32_t get_window(const ucx::Endpoint& ep) {
  UcxVersion v = ucx_version();
  if (v.major > 1 || (v.major == 1 && v.minor > 13)) return UINT32_MAX;
  auto tls = ep.lane_transports();
  if (tls.empty()) return UINT32_MAX;
  for (const auto& t : tls)
    if (t != "tcp") return UINT32_MAX;
  return 1;
}

// The mapping of this process that holds `addr` (from /proc/self/maps).
struct Mapping {
  std::uintptr_t start = 0, end = 0;
  bool readable = false, shared = false;
};
std::optional<Mapping> mapping_of(std::uintptr_t addr) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long start = 0, end = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%llx-%llx %4s", &start, &end, perms) != 3) continue;
    if (addr < start || addr >= end) continue;
    return Mapping{static_cast<std::uintptr_t>(start), static_cast<std::uintptr_t>(end),
                   perms[0] == 'r', perms[3] == 's'};
  }
  return std::nullopt;
}

// Where UCX has mapped a same-host holder's segment into this process (its shared-memory
// transports), both ucp_rkey_ptr and UCX's own GETs turn a remote address into a local pointer by
// plain arithmetic, with no bounds check (UCX 1.13's mm transports). A descriptor whose base or
// length says more than its key covers would then have this process read outside the holder's
// segment: another segment, its own memory, or nothing (a crash). So before
// any chunk is read, the whole of [base, base + length) must land inside one shared mapping of
// this process, the segment UCX mapped for the key. ok when the key maps nothing here (the
// holder's side, or the kernel for cma, checks each GET).
Status check_mapped_region(ucp_rkey_h rkey, const RegionDescriptor& r) {
  if (r.length == 0) return {};
  void* first = nullptr;
  if (ucp_rkey_ptr(rkey, r.base, &first) != UCS_OK) return {};
  const auto p = reinterpret_cast<std::uintptr_t>(first);
  const auto refuse = [&](const std::string& why) {
    return permission_denied("the region's base and length (" + std::to_string(r.length) +
                             " bytes) lie outside the memory its holder registered: " + why);
  };
  if (r.base > UINT64_MAX - r.length || p > UINTPTR_MAX - r.length) return refuse("they wrap");
  auto m = mapping_of(p);
  if (!m) return refuse("nothing is mapped there");
  // Shared memory, or (UCX's self transport) this process's own memory at its own address.
  if (!m->readable || (!m->shared && p != r.base)) return refuse("not a shared segment");
  if (r.length > m->end - p) return refuse("past the end of the holder's segment");
  return {};
}

// Whether a reader encrypts its chunk stream from `region` (see TransferOptions::
// stream_encryption). With "on" and no keys the engine was never made.
bool encrypt_stream(const std::string& setting, const std::string& datacenter,
                    const std::shared_ptr<const StreamKeys>& keys, const RegionDescriptor& region) {
  if (setting == "off") return false;
  if (setting == "on") return true;
  // Labels that differ, one side's missing included: only two hosts that both say they are in
  // one datacenter (or a job that labels none) read clear.
  const bool other_dc = datacenter != region.datacenter;
  const bool wanted = other_dc || region.stream_crypto == StreamCrypto::kEncrypted;
  if (wanted && !keys) {
    static std::once_flag once;
    std::call_once(once, [&] {
      log::warn(
          "transfer: chunk streams from datacenter {} to {} go clear: this job has no keys "
          "(auth plain), so stream_encryption auto cannot encrypt",
          region.datacenter.empty() ? "?" : region.datacenter,
          datacenter.empty() ? "?" : datacenter);
    });
    return false;
  }
  return wanted;
}

}  // namespace

namespace transfer_detail {

Result<ucp_rkey_h> UcxPeer::rkey(const std::string& packed) {
  auto it = rkeys.find(packed);
  if (it != rkeys.end()) return it->second->get();
  SLUICE_ASSIGN_OR_RETURN(auto key, ucx::RemoteKey::unpack(ep->get(), packed));
  ucp_rkey_h h = key->get();
  rkeys.emplace(packed, std::move(key));
  rkey_order.push_back(packed);
  if (rkey_order.size() > kMaxCachedRkeys) {
    rkeys.erase(rkey_order.front());
    rkey_order.pop_front();
  }
  return h;
}

}  // namespace transfer_detail

Result<std::shared_ptr<UcxPeer>> TransferEngine::Impl::peer(const std::string& address) {
  auto it = peers.find(address);
  if (it != peers.end() && !it->second->failed) return it->second;
  auto p = std::make_shared<UcxPeer>();
  auto ep = ucx::Endpoint::connect(
      *worker, address,
      [](void* arg, ucs_status_t s) {
        auto* peer = static_cast<UcxPeer*>(arg);
        peer->failed = true;
        peer->why = ucs_status_string(s);
      },
      p.get(), !shm_only);
  if (!ep.is_ok()) return ep.status();
  p->ep = std::move(ep).value();
  p->get_window = get_window(*p->ep);
  if (p->get_window != UINT32_MAX)
    log::debug("transfer: {} GET in flight to a tcp-only peer (UCX 1.13)", p->get_window);
  peers[address] = p;
  return p;
}

void TransferEngine::Impl::forget_failed_peers() {
  for (auto it = peers.begin(); it != peers.end();) {
    if (it->second->failed)
      it = peers.erase(it);
    else
      ++it;
  }
}

std::optional<std::string> TransferEngine::Impl::open_source(SourceState& st, Millis op_timeout,
                                                             bool dst_device) {
  const auto& region = st.src.region;
  // Chunk streams write with the CPU: never into device memory.
  const bool streamable = tcp_stream && !region.stream.empty() && !dst_device;
  // Another machine, or no shared memory here: the holder is reached over tcp, and tcp reads
  // go over its chunk stream (see TransferOptions::tcp_stream).
  bool use_stream = streamable && (!ucx_tls::shm_allowed(tls) || region.host != local_host_id());
  if (!use_stream) {
    auto p = peer(region.worker_address);
    if (!p.is_ok()) return p.status().to_string();
    st.peer = *p;
    // Same machine, but UCX chose tcp to it all the same (the holder may not use shared
    // memory): the chunk stream is the safe way there too.
    use_stream = streamable && st.peer->get_window != UINT32_MAX;
    if (use_stream) st.peer.reset();
  }
  if (use_stream) {
    auto stream = ChunkStream::connect(
        loop, region.stream, region.stream_token, std::min(op_timeout, kStreamConnectTimeout),
        encrypt_stream(stream_encryption, datacenter, stream_keys, region) ? stream_keys : nullptr,
        st.src.holder);
    if (!stream.is_ok()) return stream.status().to_string();
    st.stream = std::move(stream).value();
    return std::nullopt;
  }
  auto key = st.peer->rkey(st.src.region.rkey);
  if (!key.is_ok()) return key.status().to_string();
  st.rkey = *key;
  if (auto bounded = check_mapped_region(st.rkey, region); !bounded.is_ok()) {
    st.rkey = nullptr;
    return bounded.message();
  }
  decide_checksum_only(st);
  return std::nullopt;
}

void TransferEngine::Impl::decide_checksum_only(SourceState& st) const {
  const auto& region = st.src.region;
  const auto uid = static_cast<std::uint32_t>(::geteuid());
  // What the holder claims: a verified copy, here, of this user. Without the claim the digests
  // decide, and there is nothing to count.
  if (!trust_same_user || !region.verified || region.host != local_host_id() || region.uid != uid)
    return;
  // The claim holds only for memory mapped here whose owner the kernel confirms: a GET over cma
  // has no such memory to look at. (Chunk streams never get here: their bytes are checked by
  // digest, as bytes from another host are.)
  Status why = failed_precondition("its memory is not mapped here (UCX reads it by cma)");
  void* at = nullptr;
  if (st.rkey && ucp_rkey_ptr(st.rkey, region.base, &at) == UCS_OK) {
    auto owner = mapped_segment_owner(at);
    why = owner.is_ok() ? owner->owned_by(uid) : owner.status();
  }
  if (why.is_ok()) {
    st.checksum_only = true;
    return;
  }
  st.owner_unconfirmed = true;
  // Another user's memory behind a claim of this user's is worth a warning; memory the kernel
  // will not describe (a deleted file without CAP_SYS_ADMIN), or that is not mapped, is not.
  if (why.code() == Code::kPermissionDenied) {
    log::warn("transfer: source {} claims a verified copy of user {}, but {}: checked by digest",
              st.src.name, uid, why.message());
  } else {
    log::debug("transfer: source {}: cannot confirm its owner ({}): checked by digest", st.src.name,
               why.message());
  }
}

}  // namespace sluice::core
