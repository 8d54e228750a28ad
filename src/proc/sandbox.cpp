// The bubblewrap sandbox: its command line and the probe that says whether it works here.

#include "proc/sandbox.hpp"

#include <cstdlib>
#include <mutex>

namespace npuopt::proc {

const std::vector<std::filesystem::path>& default_system_paths() {
    static const std::vector<std::filesystem::path> k_system_paths = {
        "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
        "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
    };
    return k_system_paths;
}

namespace detail {

namespace {

/// A system path as it is on the host: a symlink stays a symlink (merged-/usr /bin -> usr/bin),
/// anything else is bound read-only; a path that does not exist is left out.
void add_system_path(std::vector<std::string>& argv, const std::filesystem::path& path) {
    std::error_code error;
    auto status = std::filesystem::symlink_status(path, error);
    if (error || !std::filesystem::exists(status)) return;
    if (std::filesystem::is_symlink(status)) {
        auto target = std::filesystem::read_symlink(path, error);
        if (!error) argv.insert(argv.end(), {"--symlink", target.string(), path.string()});
        return;
    }
    argv.insert(argv.end(), {"--ro-bind", path.string(), path.string()});
}

}  // namespace

std::vector<std::string> sandbox_argv(const std::string& bwrap_path, const SandboxPolicy& policy,
                                      const std::filesystem::path& scratch, const std::filesystem::path& cwd,
                                      const std::map<std::string, std::string>& env,
                                      const std::vector<std::string>& inner) {
    // --cap-drop ALL matters when npuopt runs as root: bwrap then keeps every capability otherwise.
    std::vector<std::string> argv = {
        bwrap_path,      "--die-with-parent", "--new-session",        "--unshare-pid", "--unshare-ipc",
        "--unshare-uts", "--unshare-cgroup-try", "--cap-drop",        "ALL",
    };
    if (!policy.allow_network) argv.emplace_back("--unshare-net");
    // The root is an empty tmpfs: only what is bound below exists. Order matters: later mounts go
    // on top of earlier ones, so /tmp's tmpfs comes before any bind that lives under /tmp (a
    // checkout or a toolchain under /tmp, system paths included).
    for (const char* arg : {"--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"}) argv.emplace_back(arg);
    for (const auto& path : policy.system_paths ? *policy.system_paths : default_system_paths()) {
        add_system_path(argv, path);
    }
    for (const auto& path : policy.read_only_paths) {
        argv.insert(argv.end(), {"--ro-bind", path.string(), path.string()});
    }
    for (const auto& path : policy.writable_paths) {
        argv.insert(argv.end(), {"--bind", path.string(), path.string()});
    }
    argv.insert(argv.end(), {"--bind", scratch.string(), scratch.string()});
    // The directories bwrap made to hold the binds stay read-only: nothing is written beside the
    // kernel file or into the sandbox's root.
    // (/tmp stays the call's private, writable tmpfs: a bind that lives under /tmp sits in
    // directories bwrap made there, which a call can write into, but only inside that tmpfs.)
    argv.insert(argv.end(), {"--remount-ro", "/"});
    argv.insert(argv.end(), {"--chdir", cwd.string(), "--clearenv"});
    for (const auto& [name, value] : env) argv.insert(argv.end(), {"--setenv", name, value});
    argv.emplace_back("--");
    argv.insert(argv.end(), inner.begin(), inner.end());
    return argv;
}

SandboxStatus cached_sandbox_status(const std::filesystem::path& bwrap_path) {
    static std::mutex mutex;
    static std::map<std::filesystem::path, SandboxStatus> cache;
    std::lock_guard lock(mutex);
    auto found = cache.find(bwrap_path);
    if (found != cache.end()) return found->second;
    SandboxStatus status = probe_sandbox(bwrap_path);
    cache.emplace(bwrap_path, status);
    return status;
}

}  // namespace detail

SandboxStatus probe_sandbox(const std::filesystem::path& bwrap_path) {
    SandboxStatus status;
    const char* parent_path = std::getenv("PATH");
    std::string search_path = parent_path ? parent_path : "";
    search_path += ":/usr/bin:/bin:/usr/local/bin";
    std::string wanted = bwrap_path.empty() ? std::string("bwrap") : bwrap_path.string();
    auto found = find_executable(wanted, search_path);
    if (!found) {
        status.reason = bwrap_path.empty() ? "bubblewrap (bwrap) is not installed (not found on PATH)"
                                           : "bubblewrap not found at " + wanted;
        return status;
    }
    status.bwrap_path = found->string();
    auto true_bin = find_executable("true", search_path);
    if (!true_bin) {
        status.reason = "cannot probe bubblewrap: no `true` executable on PATH";
        return status;
    }

    Command probe;
    probe.limits.timeout_secs = 10.0;
    probe.limits.output_cap_bytes = 4096;
    probe.sandbox.enabled = false;  // we build the bwrap line ourselves
    std::error_code ignored;
    std::filesystem::path scratch = std::filesystem::temp_directory_path(ignored);
    if (scratch.empty()) scratch = "/tmp";
    SandboxPolicy policy;
    probe.argv = detail::sandbox_argv(status.bwrap_path, policy, scratch, scratch, {{"PATH", "/usr/bin:/bin"}},
                                      {true_bin->string()});
    probe.cwd = scratch;
    Result result = run(probe);
    if (result.ok()) {
        status.available = true;
        return status;
    }
    std::string detail = result.error ? *result.error : result.stderr_text;
    while (!detail.empty() && (detail.back() == '\n' || detail.back() == ' ')) detail.pop_back();
    status.reason = "bubblewrap at " + status.bwrap_path + " does not work here";
    if (!detail.empty()) status.reason += ": " + detail;
    return status;
}

}  // namespace npuopt::proc
