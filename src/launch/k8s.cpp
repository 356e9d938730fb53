#include "launch/k8s.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "launch/job_setup.hpp"

namespace sluice::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kConfigDir = "/sluice/config";
constexpr const char* kKeysDir = "/sluice/keys";
constexpr const char* kRunDir = "/sluice/run";
// The agent endpoint's token: Secret NAME-agent, mounted in the rollouts' pods only.
constexpr const char* kAgentDir = "/sluice/agent";
constexpr const char* kAgentTokenKey = "agent_token";

// 'word' for sh.
std::string sh_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A DNS-1123 label from the job's name: lowercase letters, digits and '-', at most 40 characters
// (room for "-weightstore" and the pods' suffixes within 63).
core::Result<std::string> k8s_name(const std::string& job_name) {
  std::string out;
  for (char c : job_name) {
    unsigned char u = static_cast<unsigned char>(c);
    out += std::isalnum(u) ? static_cast<char>(std::tolower(u)) : '-';
  }
  while (!out.empty() && out.front() == '-')
    out.erase(out.begin());
  while (!out.empty() && out.back() == '-')
    out.pop_back();
  if (out.empty() || out.size() > 40) {
    return core::invalid_argument(fmt::format(
        "name '{}' does not make a Kubernetes name (1 to 40 letters, digits or '-')", job_name));
  }
  return out;
}

struct Names {
  std::string prefix, ns, image;
  std::string of(const std::string& what) const { return prefix + "-" + what; }
};

json labels(const Names& n, const std::string& role) {
  return json{{"app.kubernetes.io/name", "sluice"},
              {"app.kubernetes.io/instance", n.prefix},
              {"sluice/role", role}};
}

json meta(const Names& n, const std::string& name, const std::string& role) {
  return json{{"name", name}, {"namespace", n.ns}, {"labels", labels(n, role)}};
}

// A headless Service: DNS names the pods behind it, no virtual IP in front of ZeroMQ's sockets.
// Not-ready pods are published too: the roles have no readiness probe, and clients retry.
json headless_service(const Names& n, const std::string& role, const std::string& name, int port) {
  json spec{
      {"clusterIP", "None"}, {"publishNotReadyAddresses", true}, {"selector", labels(n, role)}};
  spec["ports"] = port > 0 ? json::array({{{"name", "control"}, {"port", port}}}) : json::array();
  return json{
      {"apiVersion", "v1"}, {"kind", "Service"}, {"metadata", meta(n, name, role)}, {"spec", spec}};
}

// The pod template of a role: its command, the role files, its own keys, the run folder, and
// (`agent_token`) the agent endpoint's token.
json pod_template(const Names& n, const std::string& role, const json& command,
                  const std::vector<std::string>& key_files, const std::string& pvc, int port,
                  const std::string& restart_policy, bool agent_token = false) {
  json items = json::array();
  for (const auto& k : key_files)
    items.push_back({{"key", k}, {"path", k}});
  json run{{"name", "run"}};
  if (pvc.empty()) {
    run["emptyDir"] = json::object();
  } else {
    run["persistentVolumeClaim"] = {{"claimName", pvc}};
  }
  json volumes =
      json::array({{{"name", "config"}, {"configMap", {{"name", n.of("config")}}}}, run});
  json mounts = json::array({{{"name", "config"}, {"mountPath", kConfigDir}, {"readOnly", true}},
                             {{"name", "run"}, {"mountPath", kRunDir}}});
  if (!key_files.empty()) {
    // 0400: a role refuses a secret key file others may read.
    volumes.push_back(
        {{"name", "keys"},
         {"secret", {{"secretName", n.of("keys")}, {"defaultMode", 0400}, {"items", items}}}});
    mounts.push_back({{"name", "keys"}, {"mountPath", kKeysDir}, {"readOnly", true}});
  }
  if (agent_token) {
    // 0400: the rollout refuses a token file others may read.
    volumes.push_back(
        {{"name", "agent"}, {"secret", {{"secretName", n.of("agent")}, {"defaultMode", 0400}}}});
    mounts.push_back({{"name", "agent"}, {"mountPath", kAgentDir}, {"readOnly", true}});
  }
  json container{
      {"name", role}, {"image", n.image}, {"command", command}, {"volumeMounts", mounts}};
  if (port > 0) {
    container["ports"] = json::array({{{"name", "control"}, {"containerPort", port}}});
  }
  return json{{"metadata", {{"labels", labels(n, role)}}},
              {"spec",
               {{"restartPolicy", restart_policy},
                {"containers", json::array({container})},
                {"volumes", volumes}}}};
}

json stateful_set(const Names& n, const std::string& role, const std::string& name,
                  std::uint32_t replicas, json pod) {
  return json{{"apiVersion", "apps/v1"},
              {"kind", "StatefulSet"},
              {"metadata", meta(n, name, role)},
              {"spec",
               {{"serviceName", name},
                {"replicas", replicas},
                {"podManagementPolicy", "Parallel"},
                {"selector", {{"matchLabels", labels(n, role)}}},
                {"template", std::move(pod)}}}};
}

json indexed_job(const Names& n, const std::string& role, const std::string& name,
                 std::uint32_t count, std::uint32_t restarts, json pod) {
  return json{{"apiVersion", "batch/v1"},
              {"kind", "Job"},
              {"metadata", meta(n, name, role)},
              {"spec",
               {{"completionMode", "Indexed"},
                {"completions", count},
                {"parallelism", count},
                {"backoffLimit", restarts},
                {"template", std::move(pod)}}}};
}

json list(json items) {
  return json{{"apiVersion", "v1"}, {"kind", "List"}, {"items", std::move(items)}};
}

// The words that start a role: `sluice ROLE`, or a command role's argv (run in the image).
std::vector<std::string> role_argv(const std::string& role, const RoleCommand* command) {
  if (command && command->enabled()) return command->argv;
  return {"sluice", role};
}

// `sh -c 'exec ARGV... --config /sluice/config/NAME$INDEX.json'`: the pod's index picks its file.
json indexed_command(const std::vector<std::string>& argv, const std::string& file_prefix,
                     const std::string& index_expr) {
  std::string line = "exec";
  for (const auto& w : argv)
    line += " " + sh_quote(w);
  line += fmt::format(" --config {}/{}\"{}\".json", kConfigDir, file_prefix, index_expr);
  return json::array({"sh", "-c", line});
}

json plain_command(const std::vector<std::string>& argv, const std::string& file) {
  json c = argv;
  c.push_back("--config");
  c.push_back(fmt::format("{}/{}", kConfigDir, file));
  return c;
}

// The role files and job.json written to DIR/config; the ConfigMap's data (file name: text).
core::Result<json> write_role_files(JobConfig& job, const fs::path& out) {
  json files = json::object();
  files["weightstore.json"] = role_file<kStoreSection>(job, job.store);
  files["rollout-manager.json"] = role_file<kManagerSection>(job, job.manager);
  for (std::uint32_t i = 0; i < job.relays; ++i) {
    files[fmt::format("relay-{}.json", i)] =
        role_file<kRelaySection>(job, relay_role_config(job, i, kKeysDir));
  }
  for (std::uint32_t i = 0; i < job.rollouts; ++i) {
    files[fmt::format("rollout-{}.json", i)] = role_file<kRolloutSection>(
        job, rollout_role_config(job, i, kKeysDir), &job.rollout_command);
  }
  files["actor.json"] = role_file<kActorSection>(job, job.actor, &job.actor_command);
  std::error_code ec;
  fs::create_directories(out / "config", ec);
  json config_data = json::object();
  for (const auto& [file, doc] : files.items()) {
    SLUICE_TRY(write_json_file(out / "config" / file, doc));
    config_data[file] = doc.dump(2) + "\n";
  }
  SLUICE_TRY(
      write_json_file(out / "config" / "job.json", json::parse(core::config::to_json(job).dump())));
  return config_data;
}

// The keys folder's files (name: text), the Secret's data.
json key_files(const fs::path& keys) {
  json data = json::object();
  for (const auto& entry : fs::directory_iterator(keys)) {
    std::ifstream f(entry.path());
    std::stringstream text;
    text << f.rdbuf();
    data[entry.path().filename().string()] = text.str();
  }
  return data;
}

core::Status write_manifests(JobConfig job, const K8sArgs& args) {
  if (job.hosts.count > 0) {
    return core::invalid_argument("hosts.count: emulated hosts are for sluice run on one machine");
  }
  if (args.out_dir.empty()) return core::invalid_argument("--out DIR is required");
  if (args.store_port == args.manager_port || args.store_port < 1 || args.store_port > 65535 ||
      args.manager_port < 1 || args.manager_port > 65535) {
    return core::invalid_argument("--store-port and --manager-port: two different ports");
  }
  SLUICE_TRY(check_plain_public(job, args.allow_plain_public, "sluice k8s"));
  SLUICE_ASSIGN_OR_RETURN(std::string prefix, k8s_name(job.name));
  SLUICE_ASSIGN_OR_RETURN(std::string ns, k8s_name(args.name_space));
  Names n{prefix, ns, args.image};
  SLUICE_TRY(settle_job(job));
  const fs::path out(args.out_dir);
  SLUICE_TRY(make_run_dir(out, false));

  const std::string store_svc = n.of("weightstore"), manager_svc = n.of("manager");
  JobEndpoints ep{fmt::format("tcp://0.0.0.0:{}", args.store_port),
                  fmt::format("tcp://{}.{}.svc:{}", store_svc, ns, args.store_port),
                  fmt::format("tcp://0.0.0.0:{}", args.manager_port),
                  fmt::format("tcp://{}.{}.svc:{}", manager_svc, ns, args.manager_port)};
  job.out_dir = kRunDir;
  wire_job(job, ep, kRunDir);
  // The keys are made here and shipped in the Secret; the roles find them at /sluice/keys.
  SLUICE_TRY(make_job_security(job, (out / "keys").string(), false));
  job.store.security = role_security(job, kKeysDir, "weightstore");
  job.manager.security = role_security(job, kKeysDir, "rollout-manager");
  job.actor.security = role_security(job, kKeysDir, "actor");
  // The agent endpoint's token goes in a Secret (and DIR/agent_token, 0600, for the agent), never
  // in the ConfigMap: the rollouts read it from the Secret's mount.
  SLUICE_ASSIGN_OR_RETURN(
      const std::string agent_token,
      make_agent_token(job, out / "agent_token", fmt::format("{}/{}", kAgentDir, kAgentTokenKey)));

  SLUICE_ASSIGN_OR_RETURN(json config_data, write_role_files(job, out));
  const bool curve = job.auth == "curve";
  const json secret_data = curve ? key_files(out / "keys") : json::object();
  auto keys_of = [&](const std::vector<std::string>& identities) {
    std::vector<std::string> k;
    if (!curve) return k;
    for (const auto& id : identities)
      k.push_back(id + ".key");
    k.push_back("members.json");
    return k;
  };
  std::vector<std::string> relay_ids, rollout_ids;
  for (std::uint32_t i = 0; i < job.relays; ++i)
    relay_ids.push_back(fmt::format("relay-{}", i));
  for (std::uint32_t i = 0; i < job.rollouts; ++i)
    rollout_ids.push_back(fmt::format("rollout-{}", i));

  json config_items = json::array({{{"apiVersion", "v1"},
                                    {"kind", "ConfigMap"},
                                    {"metadata", meta(n, n.of("config"), "config")},
                                    {"data", config_data}}});
  if (curve) {
    config_items.push_back({{"apiVersion", "v1"},
                            {"kind", "Secret"},
                            {"metadata", meta(n, n.of("keys"), "keys")},
                            {"type", "Opaque"},
                            {"stringData", secret_data}});
  }
  if (!agent_token.empty()) {
    config_items.push_back({{"apiVersion", "v1"},
                            {"kind", "Secret"},
                            {"metadata", meta(n, n.of("agent"), "agent")},
                            {"type", "Opaque"},
                            {"stringData", {{kAgentTokenKey, agent_token + "\n"}}}});
  }
  const RestartConfig& r = job.restart;
  auto limit = [&](const char* role) { return r.enabled ? r.limit(role) : 0u; };
  std::vector<std::pair<std::string, json>> manifests{
      {"00-config.json", list(config_items)},
      {"10-weightstore.json",
       list(json::array(
           {headless_service(n, "weightstore", store_svc, args.store_port),
            stateful_set(
                n, "weightstore", store_svc, 1,
                pod_template(n, "weightstore",
                             plain_command(role_argv("weightstore", nullptr), "weightstore.json"),
                             keys_of({"weightstore"}), args.pvc, args.store_port, "Always"))}))},
      {"20-manager.json",
       list(json::array(
           {headless_service(n, "rollout-manager", manager_svc, args.manager_port),
            stateful_set(
                n, "rollout-manager", manager_svc, 1,
                pod_template(
                    n, "rollout-manager",
                    plain_command(role_argv("rollout-manager", nullptr), "rollout-manager.json"),
                    keys_of({"rollout-manager"}), args.pvc, args.manager_port, "Always"))}))},
      // A StatefulSet's pods are NAME-relay-0, -1, ...: the ordinal after the last '-'.
      {"30-relay.json",
       list(json::array({headless_service(n, "relay", n.of("relay"), 0),
                         stateful_set(n, "relay", n.of("relay"), job.relays,
                                      pod_template(n, "relay",
                                                   indexed_command(role_argv("relay", nullptr),
                                                                   "relay-", "${HOSTNAME##*-}"),
                                                   keys_of(relay_ids), args.pvc, 0, "Always"))}))},
      {"40-rollout.json",
       list(json::array(
           {indexed_job(n, "rollout", n.of("rollout"), job.rollouts, limit("rollout"),
                        pod_template(n, "rollout",
                                     indexed_command(role_argv("rollout", &job.rollout_command),
                                                     "rollout-", "${JOB_COMPLETION_INDEX}"),
                                     keys_of(rollout_ids), args.pvc, 0, "OnFailure",
                                     !agent_token.empty()))}))},
      {"50-actor.json",
       list(json::array({indexed_job(
           n, "actor", n.of("actor"), 1, limit("actor"),
           pod_template(n, "actor",
                        plain_command(role_argv("actor", &job.actor_command), "actor.json"),
                        keys_of({"actor"}), args.pvc, 0, "OnFailure"))}))},
  };
  for (const auto& [file, doc] : manifests) {
    SLUICE_TRY(write_json_file(out / file, doc));
  }
  return {};
}

}  // namespace

int run_k8s(const K8sArgs& args) {
  auto job = core::config::load<JobConfig>(args.job_path, args.overrides);
  if (!job.is_ok()) {
    std::fprintf(stderr, "sluice k8s: %s\n", job.status().to_string().c_str());
    return 2;
  }
  core::Status s = write_manifests(*job, args);
  if (!s.is_ok()) {
    std::fprintf(stderr, "sluice k8s: %s: %s\n", args.job_path.c_str(), s.to_string().c_str());
    return s.code() == core::Code::kInternal ? 1 : 2;
  }
  std::printf(
      "wrote Kubernetes manifests for job %s to %s (apply with: kubectl apply -f %s/ ; the job "
      "is done when Job %s completes)\n",
      job->name.c_str(), args.out_dir.c_str(), args.out_dir.c_str(),
      (k8s_name(job->name).value() + "-actor").c_str());
  return 0;
}

}  // namespace sluice::cli
