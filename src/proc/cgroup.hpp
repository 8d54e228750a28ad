#pragma once
// Internal to proc/: one cgroup per call, so memory and process count are limited summed over
// every process of the call (cgroup v2, or the v1 memory + pids controllers), and nothing the
// call started survives it.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "proc/subprocess.hpp"

namespace npuopt::proc::detail {

/// Where per-call cgroups are made: probed once per process (a test cgroup is made and removed).
struct CgroupHome {
    LimitMechanism mechanism = LimitMechanism::rlimit;
    std::filesystem::path memory_parent;  ///< v2: the one parent directory
    std::filesystem::path pids_parent;    ///< v1 only
    std::string detail;                   ///< where, or why cgroups are not usable
};

/// probe_cgroup_home(), run once for the life of the process.
const CgroupHome& cached_cgroup_home();

/// Finds a cgroup hierarchy below npuopt's own cgroup where it can make children with memory and
/// pids limits; also removes empty per-call cgroups left by npuopt processes that died.
CgroupHome probe_cgroup_home();

/// What a call's cgroup saw.
struct CgroupReport {
    std::optional<std::uint64_t> memory_peak_bytes;
    bool memory_limit_hit = false;   ///< the OOM killer ran inside the call
    bool process_limit_hit = false;  ///< a fork or clone was refused at the process limit
};

/// A per-call cgroup: made with the limits, joined by the child before exec (write "0" to each
/// procs_fds() entry), emptied and removed by finish() or the destructor.
class CallCgroup {
public:
    /// nullopt with `error` filled when the directories or limits cannot be written.
    static std::optional<CallCgroup> create(const CgroupHome& home, const Limits& limits, std::string* error);
    CallCgroup(CallCgroup&& other) noexcept;
    CallCgroup& operator=(CallCgroup&&) = delete;
    CallCgroup(const CallCgroup&) = delete;
    CallCgroup& operator=(const CallCgroup&) = delete;
    ~CallCgroup();

    /// Open O_WRONLY|O_CLOEXEC descriptors of the cgroup.procs files (kept open until finish()).
    const std::vector<int>& procs_fds() const { return m_procs_fds; }
    /// SIGKILLs every process in the cgroup (once; not waiting).
    void kill_all() const;
    /// Kills what is left, waits until the cgroup is empty, reads its counters and removes it.
    CgroupReport finish();

private:
    CallCgroup() = default;
    void close_fds();

    LimitMechanism m_mechanism = LimitMechanism::rlimit;
    std::vector<std::filesystem::path> m_dirs;  ///< v2: one; v1: memory, pids
    std::vector<int> m_procs_fds;
    bool m_finished = false;
};

}  // namespace npuopt::proc::detail
