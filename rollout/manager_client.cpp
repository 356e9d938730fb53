#include "rollout/manager_client.hpp"

namespace sluice::rollout {

using core::Message;
using core::Millis;
using core::Result;

Result<std::unique_ptr<ManagerClient>> ManagerClient::create(core::EventLoop& loop,
                                                             const std::string& endpoint,
                                                             const core::Security& security,
                                                             Millis timeout) {
  auto c = std::unique_ptr<ManagerClient>(new ManagerClient());
  // The manager takes requests only under this process's authenticated identity.
  SLUICE_ASSIGN_OR_RETURN(core::Security to_manager, security.for_server(core::kRoleManager));
  SLUICE_ASSIGN_OR_RETURN(c->client_, core::Client::create(loop, endpoint, to_manager));
  c->timeout_ = timeout;
  return c;
}

template <class T, class Decode>
Result<T> ManagerClient::call(Message req, Millis timeout, Decode decode, bool* answered) {
  if (answered) *answered = false;
  SLUICE_ASSIGN_OR_RETURN(Message reply,
                          client_->call(std::move(req), timeout > Millis(0) ? timeout : timeout_));
  if (answered) *answered = true;
  return decode(reply.body, DecodeLimits{});
}

Result<ReportReply> ManagerClient::report(const ReportRequest& q, Millis timeout, bool* answered) {
  return call<ReportReply>(encode(q), timeout, decode_report_reply, answered);
}

Result<CollectReply> ManagerClient::collect(const CollectRequest& q, Millis timeout,
                                            bool* answered) {
  return call<CollectReply>(encode(q), timeout, decode_collect_reply, answered);
}

Result<PublishedReply> ManagerClient::published(const PublishedRequest& q, Millis timeout) {
  return call<PublishedReply>(encode(q), timeout, decode_published_reply, nullptr);
}

Result<ManagerStatus> ManagerClient::status(Millis timeout) {
  return call<ManagerStatus>(encode(StatusRequest{}), timeout, decode_status, nullptr);
}

void ManagerClient::status_async(Millis timeout, std::function<void(Result<ManagerStatus>)> done) {
  client_->request(encode(StatusRequest{}), timeout > Millis(0) ? timeout : timeout_,
                   [done = std::move(done)](Result<Message> r) {
                     if (!r.is_ok()) {
                       done(r.status());
                       return;
                     }
                     done(decode_status(r->body, DecodeLimits{}));
                   });
}

}  // namespace sluice::rollout
