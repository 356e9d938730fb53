#include "launch/role_commands.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "actor/trainer.hpp"
#include "core/config.hpp"
#include "core/event_loop.hpp"
#include "core/log.hpp"
#include "launch/role_start.hpp"
#include "model/blas.hpp"
#include "model/device.hpp"
#include "relay/relay.hpp"
#include "rollout/manager.hpp"
#include "rollout/model_engine.hpp"
#include "rollout/sim_engine.hpp"
#include "rollout/worker.hpp"
#include "weightstore/service.hpp"
#include "wire/security.hpp"

namespace sluice::cli {

namespace log = core::log;

namespace {

// What every role's configuration has in common.
struct CommonConfig {
  std::string log_level = "info";  // trace|debug|info|warn|error|off

  template <typename V>
  void describe(V& v) {
    v("log_level", log_level, "log level: trace, debug, info, warn, error or off");
  }
  core::Status validate() const { return log::parse_level(log_level).status(); }
};

// A model role's `device` setting, applied to the whole process before its model is built.
core::Status use_model_device(const std::string& name) {
  SLUICE_ASSIGN_OR_RETURN(model::Device device, model::parse_device(name));
  return model::use_device(device).with_context("device '" + name + "'");
}

// `sluice weightstore`: the store's service on the loop, which runs until a shutdown signal.
int run_weightstore(const RoleArgs& args, const std::vector<std::string>& overrides) {
  using Config = weightstore::ServiceConfig;
  return start_role<Config, kStoreSection>(
      args, overrides,
      {.name = "weightstore",
       .metrics_id = [](const Config&) { return std::string("store"); },
       .create = [](core::EventLoop& loop, Config& c) -> core::Result<RoleRun> {
         SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<weightstore::StoreService> svc,
                                 weightstore::StoreService::create(loop, c));
         std::string ready = "endpoint " + svc->endpoint();
         return RoleRun{std::move(ready),
                        [svc, &loop]() mutable {
                          svc.reset();
                          loop.stop();
                        },
                        [&loop] {
                          core::Status s = loop.run();
                          log::info("weightstore: stopped ({})", s.to_string());
                          return core::Status();
                        }};
       }});
}

// `sluice relay`: its id defaults to relay-<pid>.
int run_relay(const RoleArgs& args, const std::vector<std::string>& overrides,
              const std::vector<std::string>& environment) {
  using Config = relay::RelayConfig;
  return start_role<Config, kRelaySection>(
      args, overrides,
      {.name = "relay",
       .complete =
           [](Config& r) {
             if (r.relay_id.empty()) r.relay_id = "relay-" + std::to_string(::getpid());
             log::set_process_name(r.relay_id);
           },
       .metrics_id = [](const Config& r) { return r.relay_id; },
       .create = [&](core::EventLoop& loop, Config& r) -> core::Result<RoleRun> {
         SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<relay::Relay> relay,
                                 relay::Relay::create(loop, r, environment));
         return RoleRun{"relay " + r.relay_id, [relay] { relay->stop(); },
                        [relay] {
                          relay->run().ignore();
                          return core::Status();
                        }};
       }});
}

// `sluice rollout-manager`: the manager on the loop, which runs until a shutdown signal.
int run_rollout_manager(const RoleArgs& args, const std::vector<std::string>& overrides) {
  using Config = rollout::ManagerConfig;
  return start_role<Config, kManagerSection>(
      args, overrides,
      {.name = "rollout-manager",
       .metrics_id = [](const Config&) { return std::string("manager"); },
       .create = [](core::EventLoop& loop, Config& c) -> core::Result<RoleRun> {
         SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<rollout::Manager> manager,
                                 rollout::Manager::create(loop, c));
         return RoleRun{"endpoint " + manager->endpoint(), [&loop] { loop.stop(); },
                        [manager, &loop] {
                          loop.run().ignore();
                          return core::Status();
                        }};
       }});
}

// A rollout's engine and scorer: the model and its task's reward, or the simulated engine.
struct RolloutEngine {
  std::unique_ptr<rollout::Engine> engine;
  rollout::Scorer scorer = rollout::sim_reward;
};

core::Status make_rollout_engine(const rollout::RolloutConfig& rc, RolloutEngine& out) {
  if (rc.engine != "model") {
    SLUICE_ASSIGN_OR_RETURN(out.engine, rollout::SimEngine::create(rc.sim));
    return {};
  }
  model::set_blas_threads(1);  // one rollout, one core's worth: OpenBLAS's pool only contends
  SLUICE_TRY(use_model_device(rc.gpt.device));
  auto e = rollout::ModelEngine::create(rc.gpt);
  auto t = rl::ArithmeticTask::create(rc.task);
  if (!e.is_ok()) return e.status();
  if (!t.is_ok()) return t.status();
  out.engine = std::move(e).value();
  auto task = std::make_shared<rl::ArithmeticTask>(std::move(t).value());
  out.scorer = [task](const rollout::SequenceState& s) {
    auto p = rl::ArithmeticTask::parse_prompt(s.prompt_tokens);
    return p.is_ok() ? task->reward(*p, s.generated) : 0.0;
  };
  return {};
}

// `sluice rollout`: its id defaults to its key's identity (curve: the manager takes reports only
// under it), else rollout-<pid>; a bad engine is a configuration error.
int run_rollout(const RoleArgs& args, const std::vector<std::string>& overrides,
                const std::vector<std::string>& environment) {
  using Config = rollout::RolloutConfig;
  RolloutEngine engine;
  return start_role<Config, kRolloutSection>(
      args, overrides,
      {.name = "rollout",
       .prepare =
           [&](Config& rc) {
             if (rc.rollout_id.empty() && rc.security.mode == "curve" &&
                 !rc.security.key_file.empty()) {
               if (auto k = core::read_key_file(rc.security.key_file); k.is_ok()) {
                 rc.rollout_id = k->identity;
               }
             }
             if (rc.rollout_id.empty()) rc.rollout_id = "rollout-" + std::to_string(::getpid());
             log::set_process_name(rc.rollout_id);
             return make_rollout_engine(rc, engine);
           },
       .prepare_exit = kExitUsage,
       .metrics_id = [](const Config& rc) { return rc.rollout_id; },
       .create = [&](core::EventLoop& loop, Config& rc) -> core::Result<RoleRun> {
         SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<rollout::RolloutWorker> worker,
                                 rollout::RolloutWorker::create(loop, rc, std::move(engine.engine),
                                                                engine.scorer, environment));
         return RoleRun{"rollout " + rc.rollout_id, [worker] { worker->stop(); },
                        [worker] { return worker->run(); }};
       }});
}

// `sluice actor`: trains to its end, then writes its summary (summary_path) and prints it.
int run_actor(const RoleArgs& args, const std::vector<std::string>& overrides,
              const std::vector<std::string>& environment) {
  using Config = actor::TrainerConfig;
  return start_role<Config, kActorSection>(
      args, overrides,
      {.name = "actor",
       .prepare =
           [](Config& c) {
             log::set_process_name(c.actor_id);
             model::set_blas_threads(1);
             return c.policy == "gpt" ? use_model_device(c.learner.device) : core::Status();
           },
       .metrics_id = [](const Config& c) { return c.actor_id; },
       .create = [&](core::EventLoop& loop, Config& c) -> core::Result<RoleRun> {
         SLUICE_ASSIGN_OR_RETURN(std::shared_ptr<actor::Trainer> trainer,
                                 actor::Trainer::create(loop, c, environment));
         return RoleRun{"actor " + c.actor_id, [trainer] { trainer->stop(); },
                        [trainer, summary_path = c.summary_path]() -> core::Status {
                          SLUICE_ASSIGN_OR_RETURN(nlohmann::json summary, trainer->run());
                          if (!summary_path.empty()) {
                            std::ofstream(summary_path) << summary.dump() << "\n";
                          }
                          // On stdout without the (long) list of ids, so a pipe never fills up.
                          summary.erase("accepted_ids");
                          summary.erase("trained_ids");
                          std::printf("summary %s\n", summary.dump().c_str());
                          std::fflush(stdout);
                          return {};
                        }};
       }});
}

}  // namespace

int run_role(const RoleArgs& args, const std::vector<std::string>& environment) {
  log::set_process_name(args.role);
  auto overrides = core::config::overrides_from_env(environment);
  overrides.insert(overrides.end(), args.overrides.begin(), args.overrides.end());
  if (args.role == "weightstore") return run_weightstore(args, overrides);
  if (args.role == "relay") return run_relay(args, overrides, environment);
  if (args.role == "rollout-manager") return run_rollout_manager(args, overrides);
  if (args.role == "rollout") return run_rollout(args, overrides, environment);
  if (args.role == "actor") return run_actor(args, overrides, environment);
  auto cfg = core::config::load<CommonConfig>(args.config_path, overrides);
  if (!cfg.is_ok()) return role_failed(args.role, cfg.status(), kExitUsage);
  std::string effective = core::config::to_json(*cfg).dump(2);
  if (args.print_config_only) {
    std::printf("%s\n", effective.c_str());
    return 0;
  }
  log::info("effective configuration:\n{}", effective);
  std::fprintf(stderr, "sluice %s: this role is not part of this build yet\n", args.role.c_str());
  return kExitFailed;
}

}  // namespace sluice::cli
