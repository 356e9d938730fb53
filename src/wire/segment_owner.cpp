#include "wire/segment_owner.hpp"

#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string_view>

namespace sluice::core {

namespace {

// One line of /proc/self/maps: "start-end perms offset major:minor inode   path".
struct MapsLine {
  std::uintptr_t start = 0, end = 0;
  bool shared = false;
  unsigned major = 0, minor = 0;
  unsigned long long inode = 0;
  std::string path;
};

std::optional<MapsLine> maps_line_of(std::uintptr_t addr) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long start = 0, end = 0, offset = 0, inode = 0;
    unsigned major = 0, minor = 0;
    char perms[5] = {};
    int consumed = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %4s %llx %x:%x %llu%n", &start, &end, perms, &offset,
                    &major, &minor, &inode, &consumed) != 7) {
      continue;
    }
    if (addr < start || addr >= end) continue;
    MapsLine m;
    m.start = static_cast<std::uintptr_t>(start);
    m.end = static_cast<std::uintptr_t>(end);
    m.shared = perms[3] == 's';
    m.major = major;
    m.minor = minor;
    m.inode = inode;
    std::string_view rest(line);
    rest.remove_prefix(static_cast<std::size_t>(consumed));
    while (!rest.empty() && rest.front() == ' ')
      rest.remove_prefix(1);
    m.path = std::string(rest);
    return m;
  }
  return std::nullopt;
}

constexpr std::string_view kSysvPrefix = "/SYSV";
constexpr std::string_view kDeleted = " (deleted)";

bool is_sysv(const MapsLine& m) {
  return m.path.compare(0, kSysvPrefix.size(), kSysvPrefix) == 0;
}

// A System V segment's id: the inode number its mapping shows (ipc/shm.c sets the segment
// file's inode number to the id).
Result<shmid_ds> sysv_stat(const MapsLine& m) {
  shmid_ds ds{};
  if (m.inode > static_cast<unsigned long long>(INT32_MAX) ||
      ::shmctl(static_cast<int>(m.inode), IPC_STAT, &ds) != 0) {
    return failed_precondition("sysv segment " + std::to_string(m.inode) +
                               ": cannot read its owner: " + std::strerror(errno));
  }
  return ds;
}

// The owner of a shared file mapping, opened by its path or through /proc/self/map_files, and
// only when what is opened is the very file mapped (same device and inode).
Result<SegmentOwner> file_owner(const MapsLine& m) {
  std::string path = m.path;
  const bool deleted = path.size() >= kDeleted.size() &&
                       path.compare(path.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0;
  if (deleted || path.empty() || path.front() != '/') {
    char link[96];
    std::snprintf(link, sizeof link, "/proc/self/map_files/%lx-%lx",
                  static_cast<unsigned long>(m.start), static_cast<unsigned long>(m.end));
    path = link;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return failed_precondition("file " + m.path + ": cannot read its owner (" + path +
                               "): " + std::strerror(errno));
  }
  if (st.st_ino != m.inode || major(st.st_dev) != m.major || minor(st.st_dev) != m.minor)
    return failed_precondition("file " + m.path + ": " + path +
                               " is another file than the one mapped");
  SegmentOwner o;
  o.owner = st.st_uid;
  o.creator = st.st_uid;
  o.mode = st.st_mode & 0777;
  o.what = "file " + m.path;
  return o;
}

}  // namespace

Status SegmentOwner::owned_by(std::uint32_t uid) const {
  if (owner != uid) {
    return permission_denied(what + " belongs to user " + std::to_string(owner) + ", not " +
                             std::to_string(uid));
  }
  if (creator != uid) {
    return permission_denied(what + " was created by user " + std::to_string(creator) + ", not " +
                             std::to_string(uid));
  }
  if ((mode & (S_IWGRP | S_IWOTH)) != 0) {
    char m[16];
    std::snprintf(m, sizeof m, "%03o", mode);
    return permission_denied(what + " has mode " + m + ": other users may write it");
  }
  return {};
}

Result<SegmentOwner> mapped_segment_owner(const void* address) {
  const auto addr = reinterpret_cast<std::uintptr_t>(address);
  auto m = maps_line_of(addr);
  if (!m) return not_found("nothing is mapped at " + std::to_string(addr));
  if (!m->shared) {
    // Only this process reaches its private memory (UCX's self transport reads it in place).
    SegmentOwner o;
    o.owner = o.creator = ::geteuid();
    o.what = "this process's own memory";
    return o;
  }
  if (!is_sysv(*m)) return file_owner(*m);
  SLUICE_ASSIGN_OR_RETURN(shmid_ds ds, sysv_stat(*m));
  SegmentOwner o;
  o.owner = ds.shm_perm.uid;
  o.creator = ds.shm_perm.cuid;
  o.mode = ds.shm_perm.mode & 0777;
  o.what = "sysv segment " + std::to_string(m->inode);
  return o;
}

Result<bool> restrict_segment(const void* address) {
  auto m = maps_line_of(reinterpret_cast<std::uintptr_t>(address));
  if (!m || !m->shared || !is_sysv(*m)) return false;
  SLUICE_ASSIGN_OR_RETURN(shmid_ds ds, sysv_stat(*m));
  if ((ds.shm_perm.mode & 077) == 0) return true;
  ds.shm_perm.mode &= ~0077u;
  if (::shmctl(static_cast<int>(m->inode), IPC_SET, &ds) != 0) {
    return internal_error("sysv segment " + std::to_string(m->inode) +
                          ": cannot make it private: " + std::strerror(errno));
  }
  return true;
}

}  // namespace sluice::core
