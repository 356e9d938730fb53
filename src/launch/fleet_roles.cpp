// `sluice rollout`, `sluice rollout-manager` and `sluice actor`: configuration, then the role's
// run(). Each prints one line on stdout once it is up (the job launcher waits for it).
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "actor/trainer.hpp"
#include "core/config.hpp"
#include "core/event_loop.hpp"
#include "core/log.hpp"
#include "wire/security.hpp"
#include "launch/fleet_roles.hpp"
#include "launch/role_file.hpp"
#include "launch/role_metrics.hpp"
#include "model/blas.hpp"
#include "model/device.hpp"
#include "rollout/manager.hpp"
#include "rollout/model_engine.hpp"
#include "rollout/sim_engine.hpp"
#include "rollout/worker.hpp"

namespace sluice::cli {

namespace log = core::log;

namespace {

inline constexpr char kManagerSection[] = "manager";
inline constexpr char kRolloutSection[] = "rollout";
inline constexpr char kActorSection[] = "actor";

// A model role's `device` setting, applied to the whole process before its model is built.
core::Status use_model_device(const std::string& name) {
  SLUICE_ASSIGN_OR_RETURN(model::Device device, model::parse_device(name));
  return model::use_device(device).with_context("device '" + name + "'");
}

}  // namespace

int run_rollout_manager(const RoleArgs& args, const std::vector<std::string>& overrides) {
  bool printed = false;
  auto cfg = load_role<rollout::ManagerConfig, kManagerSection>(args, overrides, &printed);
  if (!cfg.is_ok()) {
    std::fprintf(stderr, "sluice rollout-manager: %s\n", cfg.status().to_string().c_str());
    return 2;
  }
  if (printed) return 0;
  auto loop = core::EventLoop::create().value();
  loop->handle_shutdown_signals();
  auto metrics = start_role_metrics(*loop, cfg->metrics_listen, "rollout-manager", "manager");
  if (!metrics.is_ok()) {
    std::fprintf(stderr, "sluice rollout-manager: %s\n", metrics.status().to_string().c_str());
    return 2;
  }
  auto m = rollout::Manager::create(*loop, cfg->section);
  if (!m.is_ok()) {
    std::fprintf(stderr, "sluice rollout-manager: %s\n", m.status().to_string().c_str());
    return 1;
  }
  std::printf("endpoint %s\n", (*m)->endpoint().c_str());
  std::fflush(stdout);
  announce_metrics(metrics->get());
  loop->on_shutdown([&](int) { loop->stop(); });
  loop->run().ignore();
  return 0;
}

int run_rollout(const RoleArgs& args, const std::vector<std::string>& overrides,
                const std::vector<std::string>& environment) {
  bool printed = false;
  auto cfg = load_role<rollout::RolloutConfig, kRolloutSection>(args, overrides, &printed);
  if (!cfg.is_ok()) {
    std::fprintf(stderr, "sluice rollout: %s\n", cfg.status().to_string().c_str());
    return 2;
  }
  if (printed) return 0;
  auto& rc = cfg->section;
  // In curve mode the manager takes reports only under the key's identity: that is the default.
  if (rc.rollout_id.empty() && rc.security.mode == "curve" && !rc.security.key_file.empty()) {
    if (auto k = core::read_key_file(rc.security.key_file); k.is_ok()) rc.rollout_id = k->identity;
  }
  if (rc.rollout_id.empty()) rc.rollout_id = "rollout-" + std::to_string(::getpid());
  log::set_process_name(rc.rollout_id);
  auto loop = core::EventLoop::create().value();
  loop->handle_shutdown_signals();
  auto metrics = start_role_metrics(*loop, cfg->metrics_listen, "rollout", rc.rollout_id);
  if (!metrics.is_ok()) {
    std::fprintf(stderr, "sluice rollout: %s\n", metrics.status().to_string().c_str());
    return 2;
  }
  std::unique_ptr<rollout::Engine> engine;
  rollout::Scorer scorer = rollout::sim_reward;
  std::shared_ptr<rl::ArithmeticTask> task;
  if (rc.engine == "model") {
    model::set_blas_threads(1);  // one rollout, one core's worth: OpenBLAS's pool only contends
    if (core::Status d = use_model_device(rc.gpt.device); !d.is_ok()) {
      std::fprintf(stderr, "sluice rollout: %s\n", d.to_string().c_str());
      return 2;
    }
    auto e = rollout::ModelEngine::create(rc.gpt);
    auto t = rl::ArithmeticTask::create(rc.task);
    if (!e.is_ok() || !t.is_ok()) {
      std::fprintf(stderr, "sluice rollout: %s\n",
                   (!e.is_ok() ? e.status() : t.status()).to_string().c_str());
      return 2;
    }
    engine = std::move(e).value();
    task = std::make_shared<rl::ArithmeticTask>(std::move(t).value());
    scorer = [task](const rollout::SequenceState& s) {
      auto p = rl::ArithmeticTask::parse_prompt(s.prompt_tokens);
      return p.is_ok() ? task->reward(*p, s.generated) : 0.0;
    };
  } else {
    auto e = rollout::SimEngine::create(rc.sim);
    if (!e.is_ok()) {
      std::fprintf(stderr, "sluice rollout: %s\n", e.status().to_string().c_str());
      return 2;
    }
    engine = std::move(e).value();
  }
  auto w = rollout::RolloutWorker::create(*loop, rc, std::move(engine), scorer, environment);
  if (!w.is_ok()) {
    std::fprintf(stderr, "sluice rollout: %s\n", w.status().to_string().c_str());
    return 1;
  }
  loop->on_shutdown([&](int) { (*w)->stop(); });
  std::printf("rollout %s\n", rc.rollout_id.c_str());
  std::fflush(stdout);
  announce_metrics(metrics->get());
  core::Status s = (*w)->run();
  if (!s.is_ok()) {
    std::fprintf(stderr, "sluice rollout: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}

int run_actor(const RoleArgs& args, const std::vector<std::string>& overrides,
              const std::vector<std::string>& environment) {
  bool printed = false;
  auto cfg = load_role<actor::TrainerConfig, kActorSection>(args, overrides, &printed);
  if (!cfg.is_ok()) {
    std::fprintf(stderr, "sluice actor: %s\n", cfg.status().to_string().c_str());
    return 2;
  }
  if (printed) return 0;
  log::set_process_name(cfg->section.actor_id);
  model::set_blas_threads(1);
  if (cfg->section.policy == "gpt") {
    if (core::Status d = use_model_device(cfg->section.learner.device); !d.is_ok()) {
      std::fprintf(stderr, "sluice actor: %s\n", d.to_string().c_str());
      return 1;
    }
  }
  auto loop = core::EventLoop::create().value();
  loop->handle_shutdown_signals();
  auto metrics = start_role_metrics(*loop, cfg->metrics_listen, "actor", cfg->section.actor_id);
  if (!metrics.is_ok()) {
    std::fprintf(stderr, "sluice actor: %s\n", metrics.status().to_string().c_str());
    return 2;
  }
  auto t = actor::Trainer::create(*loop, cfg->section, environment);
  if (!t.is_ok()) {
    std::fprintf(stderr, "sluice actor: %s\n", t.status().to_string().c_str());
    return 1;
  }
  loop->on_shutdown([&](int) { (*t)->stop(); });
  std::printf("actor %s\n", cfg->section.actor_id.c_str());
  std::fflush(stdout);
  announce_metrics(metrics->get());
  auto summary = (*t)->run();
  if (!summary.is_ok()) {
    std::fprintf(stderr, "sluice actor: %s\n", summary.status().to_string().c_str());
    return 1;
  }
  if (!cfg->section.summary_path.empty()) {
    std::ofstream(cfg->section.summary_path) << summary->dump() << "\n";
  }
  // On stdout without the (long) list of ids, so a pipe never fills up.
  summary->erase("accepted_ids");
  summary->erase("trained_ids");
  std::printf("summary %s\n", summary->dump().c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace sluice::cli
