// Client side of the rollout manager: its requests as typed calls (rollout/protocol.hpp), for a
// rollout (report), the actor (collect, published) and anyone watching (status).
//
// Errors: what the call returns (unavailable or deadline_exceeded when no reply came in time,
// the manager's own error with its code), or protocol_error for a reply that does not decode.
// `answered`, when given, is set to whether the manager replied at all: a request it answered
// reached it, whatever the reply held (a caller drops what it delivered, such as acknowledgements,
// only then).
//
// Thread safety: loop thread only. The blocking calls run the loop until their reply: call them
// from the owner's main flow, never from a loop callback. status_async() returns at once and
// answers on the loop thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "rollout/protocol.hpp"
#include "wire/messaging.hpp"
#include "wire/security.hpp"

namespace sluice::rollout {

class ManagerClient {
 public:
  // `security`: this process's (wire/security.hpp); in curve mode the manager's public key is
  // taken from the job's members (the member with role rollout-manager), so a manager with
  // another key is never talked to (its requests time out). `timeout`: each call's, unless the
  // call names one.
  static core::Result<std::unique_ptr<ManagerClient>> create(core::EventLoop& loop,
                                                             const std::string& endpoint,
                                                             const core::Security& security,
                                                             core::Millis timeout);
  ManagerClient(const ManagerClient&) = delete;
  ManagerClient& operator=(const ManagerClient&) = delete;

  // A `timeout` of 0 means the client's own.
  core::Result<ReportReply> report(const ReportRequest& q, core::Millis timeout,
                                   bool* answered = nullptr);
  core::Result<CollectReply> collect(const CollectRequest& q, core::Millis timeout,
                                     bool* answered = nullptr);
  core::Result<PublishedReply> published(const PublishedRequest& q, core::Millis timeout);
  core::Result<ManagerStatus> status(core::Millis timeout);
  // The same without waiting: `done` gets the status, or the error, on the loop thread once the
  // reply or the time-out comes (a watcher that must not stall on a dead manager).
  void status_async(core::Millis timeout, std::function<void(core::Result<ManagerStatus>)> done);

  const std::string& endpoint() const { return client_->endpoint(); }

 private:
  ManagerClient() = default;
  template <class T, class Decode>
  core::Result<T> call(core::Message req, core::Millis timeout, Decode decode, bool* answered);

  std::unique_ptr<core::Client> client_;
  core::Millis timeout_{0};
};

}  // namespace sluice::rollout
