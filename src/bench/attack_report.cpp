// The attack suite's report and a member's keys (bench/attack_internal.hpp): what both the
// control-plane attacks (bench/attack.cpp) and the chunk-server ones (bench/attack_stream.cpp)
// use, so that neither file needs the other.
#include <cstdio>

#include "bench/attack_internal.hpp"

namespace sluice::cli::attack {

using core::Result;

namespace {

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kRefused:
      return "refused";
    case Verdict::kSurvived:
      return "survived";
    case Verdict::kBreach:
      return "BREACH";
    case Verdict::kSkipped:
      return "skipped";
  }
  return "?";
}

}  // namespace

std::string brief(const core::Status& s) {
  std::string text = s.to_string();
  if (text.size() > 200) text = text.substr(0, 197) + "...";
  return text;
}

void Report::add(Attempt a) {
  if (a.verdict == Verdict::kBreach && ended_ok_ && ended_ok_()) {
    a.got += " (the job ended meanwhile, with outcome ok: not counted)";
    a.verdict = Verdict::kSkipped;
  }
  if (a.verdict == Verdict::kBreach) ++breaches_;
  if (a.verdict == Verdict::kSkipped) {
    ++skipped_;
  } else {
    ++played_;
  }
  std::printf("%-8s %s: %s -> %s\n", verdict_name(a.verdict), a.name.c_str(), a.tried.c_str(),
              a.got.c_str());
  std::fflush(stdout);
}

void Report::skip(const std::string& name, const std::string& why) {
  add(Attempt{name, "not played", why, Verdict::kSkipped});
}

Result<core::Security> member_security(const Target& t, const std::string& identity) {
  if (!t.curve) return core::Security::plain();
  core::SecurityConfig sc;
  sc.mode = "curve";
  sc.key_file = core::key_file_path(t.keys_dir, identity);
  sc.members_file = core::members_file_path(t.keys_dir);
  return core::load_security(sc, "attack as " + identity);
}

}  // namespace sluice::cli::attack
