// Test helper process: a messaging server on loopback.
//   sluice_test_echo_server [ENDPOINT]
// Prints "endpoint <tcp://...>" once bound. Handles:
//   "echo"  -> replies with the same body and blobs
//   "delay" -> replies after body.ms milliseconds
//   "count" -> replies with how many "echo" requests it has served
// On SIGTERM/SIGINT it stops in order and prints "shutdown: orderly", exit status 0.
#include <cstdio>
#include <memory>
#include <vector>

#include "core/event_loop.hpp"
#include "core/log.hpp"
#include "core/process.hpp"
#include "wire/messaging.hpp"

using namespace sluice::core;

extern char** environ;

int main(int argc, char** argv) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    env.emplace_back(*e);
  die_with_parent(env);
  std::string endpoint = argc > 1 ? argv[1] : "tcp://127.0.0.1:*";
  log::set_process_name("echo-server");
  auto loop_r = EventLoop::create();
  if (!loop_r.is_ok()) return 1;
  auto& loop = **loop_r;
  loop.handle_shutdown_signals();

  auto server_r = Server::create(loop, endpoint, Security::plain());
  if (!server_r.is_ok()) {
    std::fprintf(stderr, "%s\n", server_r.status().to_string().c_str());
    return 1;
  }
  auto server = std::move(server_r).value();
  int echoes = 0;
  server->on_sync("echo", [&echoes](const Message& m) -> Result<Message> {
    ++echoes;
    Message r("echo.reply", m.body);
    r.blobs = m.blobs;
    return r;
  });
  std::vector<std::unique_ptr<EventLoop::Timer>> timers;
  server->on("delay", [&loop, &timers](const Message& m, Responder r) {
    int ms = m.body.value("ms", 0);
    timers.push_back(loop.after(Millis(ms), [r, ms] {
      Message reply("delay.reply");
      reply.body["slept_ms"] = ms;
      r.respond(std::move(reply));
    }));
  });
  server->on_sync("count", [&echoes](const Message&) -> Result<Message> {
    Message r("count.reply");
    r.body["echoes"] = echoes;
    return r;
  });
  loop.on_shutdown([&](int) {
    timers.clear();
    server.reset();
    loop.stop();
  });

  std::printf("endpoint %s\n", server->endpoint().c_str());
  std::fflush(stdout);
  Status s = loop.run();
  if (s.code() == Code::kCancelled && !server) {
    std::printf("shutdown: orderly\n");
    std::fflush(stdout);
    return 0;
  }
  return 1;
}
