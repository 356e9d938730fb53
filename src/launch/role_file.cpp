#include "launch/role_file.hpp"

#include <fmt/format.h>

#include "wire/security.hpp"

namespace sluice::cli {

core::Status write_json_file(const std::filesystem::path& path, const nlohmann::json& doc) {
  // 0600 from its creation: a Kubernetes manifest holds Secrets, and what a role file names (key
  // and token files) is nobody else's business.
  core::Status s = core::write_private_file(path.string(), doc.dump(2) + "\n");
  if (!s.is_ok()) return core::internal_error(fmt::format("cannot write {}", path.string()));
  return {};
}

}  // namespace sluice::cli
