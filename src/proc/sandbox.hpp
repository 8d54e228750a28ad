#pragma once
// Internal to proc/: the bubblewrap command line and the cached sandbox probe.

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "proc/subprocess.hpp"

namespace npuopt::proc::detail {

/// The bwrap argv that runs `inner` (argv[0] already absolute) under `policy`:
/// only the system paths and the policy's paths visible, private /tmp, `scratch` writable,
/// network/pid/ipc/uts/cgroup unshared, every capability dropped, only `env` set.
std::vector<std::string> sandbox_argv(const std::string& bwrap_path, const SandboxPolicy& policy,
                                      const std::filesystem::path& scratch, const std::filesystem::path& cwd,
                                      const std::map<std::string, std::string>& env,
                                      const std::vector<std::string>& inner);

/// probe_sandbox(bwrap_path), run once per path for the life of the process.
SandboxStatus cached_sandbox_status(const std::filesystem::path& bwrap_path);

}  // namespace npuopt::proc::detail
