#include "launch/role_file.hpp"

#include <fmt/format.h>

#include <fstream>

namespace sluice::cli {

core::Status write_json_file(const std::filesystem::path& path, const nlohmann::json& doc) {
  std::ofstream f(path);
  f << doc.dump(2) << "\n";
  if (!f) return core::internal_error(fmt::format("cannot write {}", path.string()));
  return {};
}

}  // namespace sluice::cli
