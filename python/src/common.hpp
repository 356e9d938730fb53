// What every binding file shares: the C++ errors on their way to Python (module.cpp translates
// them) and the conversions from Python arguments to the library's options.
//
// Thread safety: the functions that take Python objects need the GIL; the others need nothing.
#pragma once

#include <pybind11/pybind11.h>
// In every binding file through this header: pybind11 wants the same casters for std::vector,
// std::map and std::optional in every file of a module, and security_config casts to a std::map.
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "format/shard.hpp"
#include "loop_thread.hpp"
#include "weightstore/client.hpp"
#include "wire/security.hpp"
#include "wire/transfer.hpp"

namespace sluice::python {

namespace py = pybind11;

// A failed Status on its way to Python (sluice.Error, or sluice.TimeoutError for kTimeout).
struct StatusError {
  core::Status status;
};
// Targets that do not match a version's manifest (sluice.MismatchError).
struct MismatchError {
  std::string message;
};

// Throws StatusError for a failed status.
void check(const core::Status& s);
// The value of `r`; throws StatusError for a failed result.
template <class T>
T value(core::Result<T> r) {
  if (!r.is_ok()) throw StatusError{r.status()};
  return std::move(*r);
}

// A timeout given in seconds; raises ValueError for a negative one (or NaN).
core::Millis millis(double seconds);

// This process's security from a Python dict (mode, key_file, members_file); None: plain.
// Raises ValueError for another key.
core::SecurityConfig security_config(const py::object& sec);

// What a Publisher and a Reader both stand on: this process's security, a transfer engine and a
// store client, made on the object's loop (call from LoopThread::exclusive).
// Returns the holder id to hold under: `holder_id`, or with none given this process's identity
// (curve: a holder id is its member's identity or identity-<suffix>), else `fallback`.
std::string connect_store(core::EventLoop& loop, const core::SecurityConfig& sc,
                          const std::string& who, const std::string& holder_id,
                          const std::string& fallback, const std::string& stream_encryption,
                          const std::string& store, double timeout,
                          std::unique_ptr<core::TransferEngine>& engine,
                          std::unique_ptr<weightstore::StoreClient>& client);

// Closes what a Publisher or a Reader holds, on its loop thread without the GIL, and leaves the
// loop paused: the heartbeat, then the role (`close_role` returns its close's status), then the
// store client and the transfer engine, in that order. Raises the role's error. Nothing happens
// once closed.
template <class Role, class Close>
void close_on_loop(LoopThread& lt, std::unique_ptr<Role>& role,
                   std::unique_ptr<core::EventLoop::Timer>& beat,
                   std::unique_ptr<weightstore::StoreClient>& store,
                   std::unique_ptr<core::TransferEngine>& engine, Close close_role) {
  py::gil_scoped_release nogil;
  lt.exclusive(
      [&] {
        if (!role) return;
        beat.reset();
        core::Status s = close_role(*role);
        role.reset();
        store.reset();
        engine.reset();
        check(s);
      },
      true);
}

// A shard layout from a Python dict (core::ShardLayout::from_json's keys); None: none.
std::optional<core::ShardLayout> shard_layout(const py::object& layout);

}  // namespace sluice::python
