// What decides the transport a read takes to a holder: the UCX_TLS value the user set, read as a
// set of transports, and this machine's identity (whether a holder shares its memory).
//
// A UCX_TLS value is "default" (or empty: unset), "all", a list ("tcp,sm"), or a negated list
// ("^tcp"); these functions answer for each form.
//
// Thread safety: pure functions; local_host_id() is computed once, thread-safely.
#pragma once

#include <string>
#include <vector>

namespace sluice::core {

// This machine's identity for choosing a transport: the kernel's boot id and the IPC namespace
// (shared memory reaches exactly the processes that share both).
const std::string& local_host_id();

namespace ucx_tls {

// Whether the value names shared-memory transports only (then no peer failure detection is
// possible in UCX 1.13; see ucx::Endpoint).
bool shm_only(const std::string& tls);
// Whether the value lets UCX use shared memory between processes.
bool shm_allowed(const std::string& tls);
// Whether the value lets UCX use tcp.
bool tcp_allowed(const std::string& tls);
// The value for an engine whose tcp reads are chunk streams: `tls` without tcp.
std::string without_tcp(const std::string& tls);
// Whether every transport in the value can wake a sleeping worker. Shared-memory ones (cma above
// all, which carries same-host GETs) cannot, and "all"/unset/negated lists may include them.
bool event_capable(const std::string& tls);
// Whether UCX opened (transport names, as ucx::Context reports them) a network transport other
// than tcp (RDMA): then a holder on another host is read by UCX GET, which such hardware does
// one-sidedly.
bool network_rdma(const std::vector<std::string>& transports);
// Whether UCX opened any network transport (tcp included), not only shared memory or devices.
bool any_network(const std::vector<std::string>& transports);

}  // namespace ucx_tls
}  // namespace sluice::core
