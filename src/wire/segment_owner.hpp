// Who owns the shared memory that a same-host holder's region is mapped from, as the kernel
// records it: the check behind "verify once per host" (design.md, where bytes are verified).
//
// A reader that copies a holder's chunks out of memory UCX mapped into it (shared-memory
// transports, ucp_rkey_ptr) may check them by their checksum alone when that memory belongs to
// its own user: a process that could write there could as well write into the reader itself.
// What a descriptor says (RegionDescriptor::uid) is a claim; the owner is read here from the
// kernel for the very mapping the bytes come from:
//   - a System V segment (UCX's sysv transport, which UCX allocates holders' memory in first):
//     its owner and creator (shmctl IPC_STAT on the id that /proc/self/maps gives as the inode);
//     the owner can hand a segment to another user, but not make another user its creator;
//   - a file (UCX's posix transport, under /dev/shm): the file's owner, by its path when it still
//     has one, else through /proc/self/map_files (which the kernel opens only for a process with
//     CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE);
//   - memory private to this process (UCX's self transport): this process.
// The mode matters too: a segment that its group or others may write is not one user's alone.
// UCX creates System V segments with mode 0660, so holders take the group's access away
// (restrict_segment) unless configured not to (TransferOptions::private_segments).
//
// Thread safety: functions of the calling process's state; safe from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.hpp"

namespace sluice::core {

struct SegmentOwner {
  std::uint32_t owner = 0;    // the owning user id
  std::uint32_t creator = 0;  // who created it (a file's owner: the same)
  std::uint32_t mode = 0;     // permission bits (0777)
  std::string what;           // "sysv segment 819223", "file /dev/shm/x", "this process"

  // ok when the memory is `uid`'s alone: owned and created by it, writable by nobody else;
  // permission_denied saying what differs otherwise.
  Status owned_by(std::uint32_t uid) const;
};

// The owner of the mapping of this process that holds `address`. not_found when nothing is
// mapped there; failed_precondition when the kernel will not tell (a deleted file without the
// capability to open /proc/self/map_files; a segment already gone).
Result<SegmentOwner> mapped_segment_owner(const void* address);

// Makes the System V segment that holds `address` (memory this process allocated through UCX)
// readable and writable by its owner only. Returns whether there was such a segment to change;
// memory of any other kind is left as it is. The kernel's error when the segment cannot be
// changed.
Result<bool> restrict_segment(const void* address);

}  // namespace sluice::core
