#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <limits>
#include <optional>

#include <csignal>
#include <random>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "core/event_loop.hpp"
#include "core/metrics.hpp"
#include "core/process.hpp"
#include "wire/messaging.hpp"

using namespace sluice::core;

namespace {

// A real server process (tests/core/echo_server.cpp) on a loopback port.
struct EchoServerProcess {
  std::unique_ptr<Subprocess> proc;
  std::string endpoint;
  EchoServerProcess() {
    proc = Subprocess::spawn_argv({SLUICE_ECHO_SERVER}).value();
    auto line = proc->read_line(Millis(10000));
    REQUIRE(line.is_ok());
    REQUIRE(line->rfind("endpoint ", 0) == 0);
    endpoint = line->substr(9);
  }
};

// The echo server with its log (stderr) in the same pipe as its stdout, so that a test can read
// what it warned about.
struct LoggingEchoServer {
  std::unique_ptr<Subprocess> proc;
  std::string endpoint;
  std::vector<std::string> lines;  // everything it printed before its endpoint and since
  LoggingEchoServer() {
    Subprocess::Options o;
    o.argv = {SLUICE_ECHO_SERVER};
    o.stderr_to_stdout = true;
    proc = Subprocess::spawn(o).value();
    while (endpoint.empty()) {
      auto line = proc->read_line(Millis(10000));
      REQUIRE(line.is_ok());
      if (line->rfind("endpoint ", 0) == 0)
        endpoint = line->substr(9);
      else
        lines.push_back(*line);
    }
  }
  // The first line it printed that contains every one of `words`, waiting up to `wait` for it.
  std::optional<std::string> line_with(const std::vector<std::string>& words, Millis wait) {
    auto has_all = [&](const std::string& l) {
      for (const auto& w : words)
        if (l.find(w) == std::string::npos) return false;
      return true;
    };
    auto until = Clock::now() + wait;
    for (std::size_t seen = 0;;) {
      for (; seen < lines.size(); ++seen)
        if (has_all(lines[seen])) return lines[seen];
      if (Clock::now() >= until) return std::nullopt;
      auto line = proc->read_line(Millis(100));
      if (line.is_ok()) lines.push_back(*line);
    }
  }
};

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The frames of an "echo" request numbered `id` whose header carries `extra` (a deadline, a
// time-out) as a sender would.
std::vector<std::string> echo_with(std::uint64_t id, const nlohmann::json& extra) {
  Envelope env;
  env.request_id = id;
  auto frames = encode_frames(env, Message("echo"));
  nlohmann::json header{{"type", "echo"}, {"body", {{"n", id}}}};
  header.update(extra);
  frames[1] = header.dump();
  return frames;
}

std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s)
    c = static_cast<char>(rng() & 0xff);
  return s;
}

// Sends raw frames from a bare DEALER socket and returns the reply frames (or empty on timeout).
std::vector<std::string> raw_exchange(const std::string& endpoint,
                                      const std::vector<std::string>& frames,
                                      Millis wait = Millis(10000)) {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect(endpoint);
  std::vector<zmq::const_buffer> bufs;
  for (const auto& f : frames)
    bufs.emplace_back(zmq::buffer(f));
  REQUIRE(zmq::send_multipart(s, bufs));
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, wait) <= 0) return {};
  std::vector<zmq::message_t> msgs;
  REQUIRE(zmq::recv_multipart(s, std::back_inserter(msgs)));
  std::vector<std::string> out;
  for (auto& m : msgs)
    out.push_back(m.to_string());
  return out;
}

// Checks that raw reply frames are an error reply of code protocol mentioning `needle`.
void check_error_reply(const std::vector<std::string>& reply, const std::string& needle,
                       std::uint64_t expect_id) {
  REQUIRE(reply.size() >= 2);
  auto env = decode_envelope(reply[0]);
  REQUIRE(env.is_ok());
  CHECK(env->kind == MessageKind::kReply);
  CHECK(env->error);
  CHECK(env->request_id == expect_id);
  auto msg = decode_message(reply, MessagingLimits{});
  REQUIRE(msg.is_ok());
  Status s = status_from_error(*msg);
  CHECK(s.code() == Code::kProtocol);
  CHECK_MESSAGE(s.message().find(needle) != std::string::npos, s.message());
}

std::vector<std::string> good_frames(std::uint64_t id, const std::string& type) {
  Envelope env;
  env.request_id = id;
  return encode_frames(env, Message(type));
}

}  // namespace

TEST_SUITE("core.messaging") {
  TEST_CASE("request/reply round trip between two processes, with binary frames") {
    EchoServerProcess server;
    auto loop = EventLoop::create().value();
    auto client = Client::create(*loop, server.endpoint, Security::plain()).value();

    Message m("echo");
    m.body["version"] = 42;
    m.body["name"] = "relay-1";
    m.blobs = {random_bytes(1 << 20, 1), std::string("\0\1\2", 3), ""};
    auto reply = client->call(m, Millis(10000));
    REQUIRE_MESSAGE(reply.is_ok(), reply.status().to_string());
    CHECK(reply->type == "echo.reply");
    CHECK(reply->body == m.body);
    REQUIRE(reply->blobs.size() == 3);
    CHECK(reply->blobs[0] == m.blobs[0]);
    CHECK(reply->blobs[1] == m.blobs[1]);
    CHECK(reply->blobs[2].empty());

    auto pong = client->call(Message("sys.ping"), Millis(10000));
    REQUIRE(pong.is_ok());
    CHECK(pong->body["pid"] == static_cast<int>(server.proc->pid()));
  }

  TEST_CASE("many concurrent requests from several clients each get their own reply") {
    EchoServerProcess server;
    auto loop = EventLoop::create().value();
    std::vector<std::unique_ptr<Client>> clients;
    for (int c = 0; c < 4; ++c)
      clients.push_back(Client::create(*loop, server.endpoint, Security::plain()).value());
    int ok = 0, wrong = 0, done = 0;
    constexpr int kPerClient = 200;
    for (int c = 0; c < 4; ++c) {
      for (int i = 0; i < kPerClient; ++i) {
        Message m("echo");
        m.body["tag"] = c * 100000 + i;
        clients[c]->request(m, Millis(20000), [&, tag = c * 100000 + i](Result<Message> r) {
          ++done;
          if (r.is_ok() && r->body["tag"] == tag)
            ++ok;
          else
            ++wrong;
        });
      }
    }
    CHECK(loop->run_until([&] { return done == 4 * kPerClient; }, Millis(30000)));
    CHECK(ok == 4 * kPerClient);
    CHECK(wrong == 0);
  }

  TEST_CASE("a request to a dead peer ends with a clear timeout error, not a hang") {
    auto loop = EventLoop::create().value();
    // Nothing listens on port 1 of loopback.
    auto client = Client::create(*loop, "tcp://127.0.0.1:1", Security::plain()).value();
    auto t0 = Clock::now();
    auto r = client->call(Message("sys.ping"), Millis(300));
    auto took = Clock::now() - t0;
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kTimeout);
    // Nothing listens, so no connection ever took the request (nothing is queued for a peer that
    // is not connected), and the error says so.
    CHECK(r.status().message() ==
          "request 'sys.ping' to tcp://127.0.0.1:1 timed out after 300 ms, never sent: no "
          "connection to the peer came up (is it running, and does it accept this key?)");
    CHECK(took < Millis(5000));
    CHECK(client->pending() == 0);
  }

  TEST_CASE("a peer killed mid-request gives a timeout error to the waiting caller") {
    EchoServerProcess server;
    auto loop = EventLoop::create().value();
    auto client = Client::create(*loop, server.endpoint, Security::plain()).value();
    REQUIRE(client->call(Message("sys.ping"), Millis(10000)).is_ok());
    std::optional<Result<Message>> got;
    Message slow("delay");
    slow.body["ms"] = 20000;
    client->request(slow, Millis(500), [&](Result<Message> r) { got.emplace(std::move(r)); });
    loop->run_until([] { return false; }, Millis(50));
    REQUIRE(server.proc->signal(SIGKILL).is_ok());
    REQUIRE(server.proc->wait(Millis(10000)).is_ok());
    CHECK(loop->run_until([&] { return got.has_value(); }, Millis(10000)));
    REQUIRE(got.has_value());
    CHECK(got->status().code() == Code::kTimeout);
  }

  TEST_CASE("a request that waited past its deadline is dropped unread, one in time is served") {
    EchoServerProcess server;
    zmq::context_t ctx(1);
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.connect(server.endpoint);
    auto send = [&](const std::vector<std::string>& frames) {
      std::vector<zmq::const_buffer> bufs;
      for (const auto& f : frames)
        bufs.emplace_back(zmq::buffer(f));
      REQUIRE(zmq::send_multipart(s, bufs));
    };
    auto receive = [&](Millis wait) -> std::vector<std::string> {
      zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, wait) <= 0) return {};
      std::vector<zmq::message_t> msgs;
      REQUIRE(zmq::recv_multipart(s, std::back_inserter(msgs)));
      std::vector<std::string> out;
      for (auto& m : msgs)
        out.push_back(m.to_string());
      return out;
    };
    // In time: served as any request.
    send(echo_with(21, {{"deadline_ms", wall_ms() + 60'000}, {"timeout_ms", 60'000}}));
    auto ok = receive(Millis(10000));
    REQUIRE(ok.size() >= 2);
    CHECK(ok[1].find("echo.reply") != std::string::npos);
    // The server is stopped for a second; a request with a 300 ms time-out waits for it, and its
    // sender gives up. When the server continues: no reply, no error, nothing served.
    REQUIRE(server.proc->signal(SIGSTOP).is_ok());
    send(echo_with(22, {{"deadline_ms", wall_ms() + 300}, {"timeout_ms", 300}}));
    std::this_thread::sleep_for(Millis(1000));
    REQUIRE(server.proc->signal(SIGCONT).is_ok());
    CHECK(receive(Millis(1500)).empty());
    // A deadline that is not a time is malformed, and says so; so is a time-out.
    check_error_reply(raw_exchange(server.endpoint, echo_with(23, {{"deadline_ms", "soon"}})),
                      "deadline_ms", 23);
    check_error_reply(raw_exchange(server.endpoint,
                                   echo_with(24, {{"deadline_ms", wall_ms()}, {"timeout_ms", -5}})),
                      "timeout_ms", 24);
    // A client's request carries its deadline and is answered while the server keeps up.
    auto loop = EventLoop::create().value();
    auto client = Client::create(*loop, server.endpoint, Security::plain()).value();
    auto reply = client->call(Message("echo"), Millis(5000));
    CHECK_MESSAGE(reply.is_ok(), reply.status().to_string());
  }

  TEST_CASE("a request from a peer whose clock is 10 s behind is served, and the server warns") {
    LoggingEchoServer server;
    // The sender's clock is 10 s behind this host's: by it, a request with a 375 ms time-out sent
    // just now has a deadline 9.6 s in the past. The server was idle, so the request cannot have
    // waited there that long: it is not stale, the clocks differ.
    const std::int64_t behind_ms = 10'000, timeout_ms = 375;
    auto reply = raw_exchange(server.endpoint,
                              echo_with(31, {{"deadline_ms", wall_ms() - behind_ms + timeout_ms},
                                             {"timeout_ms", timeout_ms}}),
                              Millis(5000));
    REQUIRE_MESSAGE(reply.size() >= 2, "a request from a peer with a skewed clock went unanswered");
    CHECK(reply[1].find("echo.reply") != std::string::npos);
    // It says so, at warn, naming the peer (plain mode: its address) and the skew.
    auto line = server.line_with({"warn", "clock", "127.0.0.1", "behind"}, Millis(5000));
    REQUIRE_MESSAGE(line.has_value(), "no warning about the peer's clock");
    CHECK_MESSAGE(line->find(" s behind") != std::string::npos, *line);

    // A clock 10 s ahead: the deadline is further away than the sender's time-out. Served, and
    // said.
    auto ahead = raw_exchange(server.endpoint,
                              echo_with(32, {{"deadline_ms", wall_ms() + behind_ms + timeout_ms},
                                             {"timeout_ms", timeout_ms}}),
                              Millis(5000));
    REQUIRE(ahead.size() >= 2);
    CHECK(ahead[1].find("echo.reply") != std::string::npos);
    CHECK(server.line_with({"warn", "clock", "127.0.0.1", "ahead"}, Millis(5000)).has_value());
  }

  TEST_CASE("a deadline at the end of time (INT64_MAX) is served, not dropped") {
    EchoServerProcess server;
    const std::int64_t end_of_time = std::numeric_limits<std::int64_t>::max();
    auto reply =
        raw_exchange(server.endpoint, echo_with(41, {{"deadline_ms", end_of_time}}), Millis(5000));
    REQUIRE_MESSAGE(reply.size() >= 2, "a request with deadline INT64_MAX was dropped");
    CHECK(reply[1].find("echo.reply") != std::string::npos);
    // With the time-out it states as well.
    auto with_timeout = raw_exchange(
        server.endpoint, echo_with(42, {{"deadline_ms", end_of_time}, {"timeout_ms", end_of_time}}),
        Millis(5000));
    REQUIRE(with_timeout.size() >= 2);
    CHECK(with_timeout[1].find("echo.reply") != std::string::npos);
  }

  TEST_CASE("malformed envelopes get error replies and the server keeps serving others") {
    EchoServerProcess server;

    SUBCASE("wrong protocol version") {
      auto frames = good_frames(77, "echo");
      frames[0][4] = 9;  // version 9
      check_error_reply(raw_exchange(server.endpoint, frames), "protocol version 9", 77);
    }
    SUBCASE("truncated envelope frame") {
      auto frames = good_frames(5, "echo");
      frames[0].resize(7);
      check_error_reply(raw_exchange(server.endpoint, frames), "envelope frame has 7 bytes", 0);
    }
    SUBCASE("wrong magic") {
      auto frames = good_frames(6, "echo");
      frames[0][0] = 'X';
      check_error_reply(raw_exchange(server.endpoint, frames), "wrong magic", 6);
    }
    SUBCASE("no header frame") {
      auto frames = good_frames(8, "echo");
      frames.resize(1);
      check_error_reply(raw_exchange(server.endpoint, frames), "no header frame", 8);
    }
    SUBCASE("header that is not JSON") {
      auto frames = good_frames(9, "echo");
      frames[1] = "{\"type\": \"echo\", ";
      check_error_reply(raw_exchange(server.endpoint, frames), "malformed JSON", 9);
    }
    SUBCASE("a header nested deeper than the limit (refused before it is built)") {
      auto frames = good_frames(13, "echo");
      frames[1] = "{\"type\": \"echo\", \"body\": {\"x\": " + std::string(100000, '[') +
                  std::string(100000, ']') + "}}";
      check_error_reply(raw_exchange(server.endpoint, frames), "nested deeper", 13);
    }
    SUBCASE("header without a type") {
      auto frames = good_frames(10, "echo");
      frames[1] = "{\"body\": {}}";
      check_error_reply(raw_exchange(server.endpoint, frames), "no 'type'", 10);
    }
    SUBCASE("unknown message type") {
      check_error_reply(raw_exchange(server.endpoint, good_frames(11, "no.such.type")),
                        "unknown message type 'no.such.type'", 11);
    }
    SUBCASE("oversized message") {
      auto frames = good_frames(12, "echo");
      frames.push_back(std::string((64u << 20) + 1, 'x'));  // just over the 64 MiB default
      check_error_reply(raw_exchange(server.endpoint, frames), "exceeds the limit", 12);
    }
    SUBCASE("an empty message") {
      check_error_reply(raw_exchange(server.endpoint, {""}), "envelope frame has 0 bytes", 0);
    }

    // Whatever came before, a well-formed request from another client is served, and nothing
    // the malformed ones carried was acted on (no echo was counted).
    auto loop = EventLoop::create().value();
    auto client = Client::create(*loop, server.endpoint, Security::plain()).value();
    auto count = client->call(Message("count"), Millis(10000));
    REQUIRE(count.is_ok());
    CHECK(count->body["echoes"] == 0);
    Message m("echo");
    m.body["still"] = "serving";
    auto r = client->call(m, Millis(10000));
    REQUIRE(r.is_ok());
    CHECK(r->body["still"] == "serving");
  }

  TEST_CASE(
      "nothing is queued for a server that is not there: a restarted one gets no stale request") {
    auto loop = EventLoop::create().value();
    const std::string endpoint =
        "ipc://" + (std::filesystem::temp_directory_path() /
                    ("sluice-messaging-" + std::to_string(::getpid()) + ".sock"))
                       .string();
    auto client = Client::create(*loop, endpoint, Security::plain()).value();
    // Nobody serves the endpoint yet: the request times out.
    auto r = client->call(Message("count"), Millis(200));
    CHECK(r.status().code() == Code::kTimeout);
    // The server comes (back): the request nobody waits for any more must not reach it.
    int served = 0;
    auto server = Server::create(*loop, endpoint, Security::plain()).value();
    server->on_sync("count", [&](const Message&) -> Result<Message> {
      ++served;
      return Message("count.reply");
    });
    loop->run_until([] { return false; }, Millis(600));
    CHECK(served == 0);
    // A new request is served as usual.
    CHECK(client->call(Message("count"), Millis(5000)).is_ok());
    CHECK(served == 1);
  }

  TEST_CASE("an error reply reaches the caller as a Status with the server's code and message") {
    auto loop = EventLoop::create().value();
    auto server = Server::create(*loop, "tcp://127.0.0.1:*", Security::plain()).value();
    server->on_sync("fail", [](const Message&) -> Result<Message> {
      return failed_precondition("version 3 is not committed");
    });
    server->on("throws", [](const Message&, Responder) { throw std::runtime_error("boom"); });
    auto client = Client::create(*loop, server->endpoint(), Security::plain()).value();
    auto r = client->call(Message("fail"), Millis(5000));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kFailedPrecondition);
    CHECK(r.status().message() == server->endpoint() + ": version 3 is not committed");
    auto t = client->call(Message("throws"), Millis(5000));
    CHECK(t.status().code() == Code::kInternal);
    CHECK(t.status().message().find("boom") != std::string::npos);
    // and the server still answers
    CHECK(client->call(Message("sys.ping"), Millis(5000)).is_ok());
  }

  TEST_CASE("size limits are enforced on the receiving side, per server") {
    auto loop = EventLoop::create().value();
    MessagingLimits small;
    small.max_message_bytes = 4096;
    small.max_frames = 4;
    auto server = Server::create(*loop, "tcp://127.0.0.1:*", Security::plain(), small).value();
    int handled = 0;
    server->on_sync("put", [&](const Message&) -> Result<Message> {
      ++handled;
      return Message("ok");
    });
    auto client = Client::create(*loop, server->endpoint(), Security::plain()).value();
    auto oversized = [] {
      return process_metrics()
          .counter("sluice_refused_total", "requests refused, by reason", {{"reason", "oversized"}})
          .value();
    };
    const double oversized_before = oversized();
    Message big("put");
    big.blobs = {std::string(5000, 'a')};
    auto r = client->call(big, Millis(5000));
    CHECK(r.status().code() == Code::kProtocol);
    CHECK(r.status().message().find("exceeds the limit of 4096 bytes") != std::string::npos);
    Message many("put");
    many.blobs.assign(3, "x");
    auto r2 = client->call(many, Millis(5000));
    CHECK(r2.status().message().find("frames, limit 4") != std::string::npos);
    CHECK(handled == 0);
    CHECK(server->stats().rejected == 2);
    CHECK(oversized() == oversized_before + 2);  // counted by reason, for /metrics
    CHECK(client->call(Message("put"), Millis(5000)).is_ok());
    CHECK(handled == 1);
  }

  TEST_CASE("one-way messages are delivered without a reply") {
    auto loop = EventLoop::create().value();
    auto server = Server::create(*loop, "tcp://127.0.0.1:*", Security::plain()).value();
    std::vector<int> seen;
    server->on("progress", [&](const Message& m, Responder r) {
      CHECK(r.is_oneway());
      seen.push_back(m.body["n"].get<int>());
      r.respond(Message("ignored"));  // a reply to a one-way message is dropped
    });
    auto client = Client::create(*loop, server->endpoint(), Security::plain()).value();
    // Nothing is queued for a server the client is not connected to yet: a request (which waits
    // for a connection) first, then the one-way messages go over the connection it made.
    REQUIRE(client->call(Message("sys.ping"), Millis(5000)).is_ok());
    for (int i = 0; i < 10; ++i) {
      Message m("progress");
      m.body["n"] = i;
      REQUIRE(client->send(m).is_ok());
    }
    CHECK(loop->run_until([&] { return seen.size() == 10; }, Millis(5000)));
    CHECK(seen == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    CHECK(server->stats().oneway == 10);
  }
}
