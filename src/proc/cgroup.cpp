// Per-call cgroups: find where npuopt may make them (v2, else the v1 memory + pids controllers,
// always below npuopt's own cgroup), make one per call with its limits, empty and remove it after.

#include "proc/cgroup.hpp"
#include "core/log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace npuopt::proc::detail {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view k_call_prefix = "npuopt-call-";
constexpr double k_empty_wait_secs = 5.0;   ///< how long finish() waits for killed processes to leave
constexpr double k_rmdir_wait_secs = 2.0;

std::string read_text(const fs::path& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

/// Writes `text` to a cgroup control file; false with errno's text in `error`.
bool write_control(const fs::path& path, const std::string& text, std::string* error = nullptr) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        if (error) *error = fmt::format("cannot open {}: {}", path.string(), std::strerror(errno));
        return false;
    }
    ssize_t written = ::write(fd, text.data(), text.size());
    int saved = errno;
    ::close(fd);
    if (written != static_cast<ssize_t>(text.size())) {
        if (error) *error = fmt::format("cannot write '{}' to {}: {}", text, path.string(), std::strerror(saved));
        return false;
    }
    return true;
}

std::vector<std::string> split(const std::string& text, char separator) {
    std::vector<std::string> parts;
    std::string part;
    std::stringstream stream(text);
    while (std::getline(stream, part, separator)) parts.push_back(part);
    return parts;
}

bool has_token(const std::string& text, char separator, std::string_view token) {
    for (const auto& part : split(text, separator)) {
        if (part == token) return true;
    }
    return false;
}

/// Whether whitespace-separated `text` holds `word` (cgroup.controllers, cgroup.subtree_control).
bool has_word(const std::string& text, std::string_view word) {
    std::stringstream stream(text);
    std::string item;
    while (stream >> item) {
        if (item == word) return true;
    }
    return false;
}

/// "key N" lines (memory.events, pids.events, memory.oom_control) → N for `key`.
std::optional<std::uint64_t> keyed_counter(const std::string& text, std::string_view key) {
    std::stringstream stream(text);
    std::string line;
    while (std::getline(stream, line)) {
        if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == ' ') {
            try {
                return std::stoull(line.substr(key.size() + 1));
            } catch (const std::exception&) {
                return std::nullopt;
            }
        }
    }
    return std::nullopt;
}

std::optional<std::uint64_t> number_file(const fs::path& path) {
    std::string text = read_text(path);
    if (text.empty()) return std::nullopt;
    try {
        return std::stoull(text);
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

/// One line of /proc/self/mountinfo: what a cgroup hierarchy needs.
struct Mount {
    std::string root;
    fs::path mount_point;
    std::string fstype;
    std::string super_options;
};

std::vector<Mount> read_mounts() {
    std::vector<Mount> mounts;
    std::stringstream stream(read_text("/proc/self/mountinfo"));
    std::string line;
    while (std::getline(stream, line)) {
        auto fields = split(line, ' ');
        auto dash = std::find(fields.begin(), fields.end(), "-");
        if (fields.size() < 5 || dash == fields.end() || std::distance(dash, fields.end()) < 4) continue;
        mounts.push_back({fields[3], fields[4], *(dash + 1), *(dash + 3)});
    }
    return mounts;
}

/// The directory of npuopt's own cgroup `cgroup_path` in `mount` (mounted at its root or deeper).
std::optional<fs::path> own_dir(const Mount& mount, const std::string& cgroup_path) {
    if (mount.root == "/") return mount.mount_point / fs::path(cgroup_path).relative_path();
    if (cgroup_path.rfind(mount.root, 0) != 0) return std::nullopt;
    return mount.mount_point / fs::path(cgroup_path.substr(mount.root.size())).relative_path();
}

/// Removes empty per-call cgroups of npuopt processes that no longer exist (killed by SIGKILL).
void remove_stale(const fs::path& parent) {
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(parent, error)) {
        std::string name = entry.path().filename().string();
        if (name.rfind(k_call_prefix, 0) != 0) continue;
        std::string rest = name.substr(k_call_prefix.size());
        std::string pid_text = rest.substr(0, rest.find('-'));
        if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
        if (fs::exists(fs::path("/proc") / pid_text, error)) continue;
        ::rmdir(entry.path().c_str());  // fails harmlessly while processes remain
    }
}

/// Makes and removes a child of `parent`, writing `limits`: whether per-call cgroups will work.
bool try_child(const fs::path& parent, const std::vector<std::pair<std::string, std::string>>& limits,
               std::string* error) {
    fs::path probe = parent / fmt::format("npuopt-probe-{}", ::getpid());
    if (::mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST) {
        *error = fmt::format("cannot create a cgroup under {}: {}", parent.string(), std::strerror(errno));
        return false;
    }
    bool ok = true;
    for (const auto& [file, value] : limits) {
        if (!write_control(probe / file, value, error)) {
            ok = false;
            break;
        }
    }
    ::rmdir(probe.c_str());
    return ok;
}

std::optional<CgroupHome> probe_v2(const std::vector<Mount>& mounts, const std::string& own_path,
                                   std::string* why) {
    for (const auto& mount : mounts) {
        if (mount.fstype != "cgroup2") continue;
        auto dir = own_dir(mount, own_path);
        if (!dir || !fs::is_directory(*dir)) continue;
        std::string subtree = read_text(*dir / "cgroup.subtree_control");
        if (!has_word(subtree, "memory") || !has_word(subtree, "pids")) {
            std::string controllers = read_text(*dir / "cgroup.controllers");
            if (!has_word(controllers, "memory") || !has_word(controllers, "pids")) {
                *why = fmt::format("cgroup v2 at {}: the memory and pids controllers are not available to npuopt's "
                                   "cgroup {}",
                                   mount.mount_point.string(), own_path);
                continue;
            }
            std::string error;
            if (!write_control(*dir / "cgroup.subtree_control", "+memory +pids", &error)) {
                *why = fmt::format("cgroup v2: cannot enable memory and pids below npuopt's cgroup {} ({}); run "
                                   "npuopt in a delegated cgroup, e.g. `systemd-run --user --scope -p Delegate=yes`",
                                   dir->string(), error);
                continue;
            }
        }
        std::string error;
        if (!try_child(*dir, {{"pids.max", "max"}, {"memory.max", "max"}}, &error)) {
            *why = "cgroup v2: " + error;
            continue;
        }
        remove_stale(*dir);
        CgroupHome home;
        home.mechanism = LimitMechanism::cgroup_v2;
        home.memory_parent = *dir;
        home.detail = dir->string();
        return home;
    }
    return std::nullopt;
}

std::optional<CgroupHome> probe_v1(const std::vector<Mount>& mounts,
                                   const std::vector<std::pair<std::string, std::string>>& own_paths,
                                   std::string* why) {
    auto find_dir = [&](std::string_view controller) -> std::optional<fs::path> {
        for (const auto& [controllers, path] : own_paths) {
            if (!has_token(controllers, ',', controller)) continue;
            for (const auto& mount : mounts) {
                if (mount.fstype != "cgroup" || !has_token(mount.super_options, ',', controller)) continue;
                auto dir = own_dir(mount, path);
                if (dir && fs::is_directory(*dir)) return dir;
            }
        }
        return std::nullopt;
    };
    auto memory = find_dir("memory");
    auto pids = find_dir("pids");
    if (!memory || !pids) {
        *why += (why->empty() ? "" : "; ") +
                std::string("no cgroup v1 hierarchy with the ") +
                (!memory && !pids ? "memory and pids controllers" : !memory ? "memory controller" : "pids controller");
        return std::nullopt;
    }
    std::string error;
    if (!try_child(*memory, {{"memory.limit_in_bytes", "-1"}}, &error) ||
        !try_child(*pids, {{"pids.max", "max"}}, &error)) {
        *why += (why->empty() ? "" : "; ") + std::string("cgroup v1: ") + error;
        return std::nullopt;
    }
    remove_stale(*memory);
    remove_stale(*pids);
    CgroupHome home;
    home.mechanism = LimitMechanism::cgroup_v1;
    home.memory_parent = *memory;
    home.pids_parent = *pids;
    home.detail = fmt::format("{} and {}", memory->string(), pids->string());
    return home;
}

}  // namespace

CgroupHome probe_cgroup_home() {
    std::vector<std::pair<std::string, std::string>> v1_paths;  // controllers, path
    std::optional<std::string> v2_path;
    std::stringstream stream(read_text("/proc/self/cgroup"));
    std::string line;
    while (std::getline(stream, line)) {
        auto first = line.find(':');
        auto second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
        if (second == std::string::npos) continue;
        std::string controllers = line.substr(first + 1, second - first - 1);
        std::string path = line.substr(second + 1);
        if (line.compare(0, first, "0") == 0 && controllers.empty()) {
            v2_path = path;
        } else {
            v1_paths.emplace_back(controllers, path);
        }
    }
    std::vector<Mount> mounts = read_mounts();
    std::string why;
    if (v2_path) {
        if (auto home = probe_v2(mounts, *v2_path, &why)) return *home;
    }
    if (auto home = probe_v1(mounts, v1_paths, &why)) return *home;
    CgroupHome none;
    none.detail = why.empty() ? "no cgroup hierarchy found in /proc/self/cgroup" : why;
    return none;
}

const CgroupHome& cached_cgroup_home() {
    static const CgroupHome home = probe_cgroup_home();
    return home;
}

std::optional<CallCgroup> CallCgroup::create(const CgroupHome& home, const Limits& limits, std::string* error) {
    static std::atomic<std::uint64_t> counter{0};
    if (home.mechanism == LimitMechanism::rlimit) {
        *error = "no cgroup hierarchy is usable";
        return std::nullopt;
    }
    CallCgroup cgroup;
    cgroup.m_mechanism = home.mechanism;
    const std::string name = fmt::format("{}{}-{}", k_call_prefix, ::getpid(), counter.fetch_add(1));
    std::vector<std::pair<fs::path, std::vector<std::pair<std::string, std::string>>>> plan;
    const std::string memory = limits.memory_bytes ? std::to_string(*limits.memory_bytes) : std::string();
    const std::string processes = limits.processes ? std::to_string(*limits.processes) : std::string();
    if (home.mechanism == LimitMechanism::cgroup_v2) {
        std::vector<std::pair<std::string, std::string>> writes;
        writes.emplace_back("memory.max", memory.empty() ? "max" : memory);
        if (!memory.empty()) writes.emplace_back("?memory.swap.max", "0");
        writes.emplace_back("pids.max", processes.empty() ? "max" : processes);
        plan.emplace_back(home.memory_parent / name, writes);
    } else {
        std::vector<std::pair<std::string, std::string>> memory_writes;
        if (!memory.empty()) {
            memory_writes.emplace_back("memory.limit_in_bytes", memory);
            memory_writes.emplace_back("?memory.memsw.limit_in_bytes", memory);  // no swapping past the limit
        }
        plan.emplace_back(home.memory_parent / name, memory_writes);
        plan.emplace_back(home.pids_parent / name,
                          std::vector<std::pair<std::string, std::string>>{
                              {"pids.max", processes.empty() ? "max" : processes}});
    }
    for (const auto& [dir, writes] : plan) {
        if (::mkdir(dir.c_str(), 0755) != 0) {
            *error = fmt::format("cannot create cgroup {}: {}", dir.string(), std::strerror(errno));
            return std::nullopt;  // the destructor removes what was made
        }
        cgroup.m_dirs.push_back(dir);
        for (const auto& [file, value] : writes) {
            const bool optional = file.front() == '?';
            const fs::path control = dir / (optional ? file.substr(1) : file);
            if (optional && !fs::exists(control)) continue;
            if (!write_control(control, value, error) && !optional) return std::nullopt;
        }
        int fd = ::open((dir / "cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
            *error = fmt::format("cannot open {}: {}", (dir / "cgroup.procs").string(), std::strerror(errno));
            return std::nullopt;
        }
        cgroup.m_procs_fds.push_back(fd);
    }
    return cgroup;
}

CallCgroup::CallCgroup(CallCgroup&& other) noexcept
    : m_mechanism(other.m_mechanism),
      m_dirs(std::move(other.m_dirs)),
      m_procs_fds(std::move(other.m_procs_fds)),
      m_finished(other.m_finished) {
    other.m_dirs.clear();
    other.m_procs_fds.clear();
    other.m_finished = true;
}

CallCgroup::~CallCgroup() {
    if (!m_finished) finish();
}

void CallCgroup::close_fds() {
    for (int fd : m_procs_fds) ::close(fd);
    m_procs_fds.clear();
}

void CallCgroup::kill_all() const {
    for (const auto& dir : m_dirs) {
        if (m_mechanism == LimitMechanism::cgroup_v2 && fs::exists(dir / "cgroup.kill")) {
            write_control(dir / "cgroup.kill", "1");
            continue;
        }
        std::stringstream procs(read_text(dir / "cgroup.procs"));
        std::string pid_text;
        while (std::getline(procs, pid_text)) {
            try {
                pid_t pid = static_cast<pid_t>(std::stol(pid_text));
                if (pid > 0) ::kill(pid, SIGKILL);
            } catch (const std::exception&) {
            }
        }
    }
}

CgroupReport CallCgroup::finish() {
    CgroupReport report;
    if (m_finished) return report;
    m_finished = true;
    close_fds();
    auto empty = [&] {
        for (const auto& dir : m_dirs) {
            if (!read_text(dir / "cgroup.procs").empty()) return false;
        }
        return true;
    };
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(k_empty_wait_secs);
    while (!empty() && std::chrono::steady_clock::now() < until) {
        kill_all();
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (const auto& dir : m_dirs) {
        if (fs::exists(dir / "memory.peak")) report.memory_peak_bytes = number_file(dir / "memory.peak");
        if (fs::exists(dir / "memory.max_usage_in_bytes")) {
            report.memory_peak_bytes = number_file(dir / "memory.max_usage_in_bytes");
        }
        const std::string memory_events = read_text(dir / (m_mechanism == LimitMechanism::cgroup_v2
                                                                 ? "memory.events"
                                                                 : "memory.oom_control"));
        if (keyed_counter(memory_events, "oom_kill").value_or(0) > 0) report.memory_limit_hit = true;
        if (keyed_counter(read_text(dir / "pids.events"), "max").value_or(0) > 0) report.process_limit_hit = true;
    }
    for (const auto& dir : m_dirs) {
        const auto rmdir_until = std::chrono::steady_clock::now() + std::chrono::duration<double>(k_rmdir_wait_secs);
        while (::rmdir(dir.c_str()) != 0 && errno == EBUSY && std::chrono::steady_clock::now() < rmdir_until) {
            kill_all();
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        std::error_code ignored;
        if (fs::exists(dir, ignored)) {
            log::warn("proc: cannot remove the call's cgroup {}: {}", dir.string(), std::strerror(errno));
        }
    }
    m_dirs.clear();
    return report;
}

}  // namespace npuopt::proc::detail

namespace npuopt::proc {

std::string_view limit_mechanism_name(LimitMechanism mechanism) {
    switch (mechanism) {
        case LimitMechanism::cgroup_v2: return "cgroup-v2";
        case LimitMechanism::cgroup_v1: return "cgroup-v1";
        case LimitMechanism::rlimit: return "rlimit";
    }
    return "rlimit";
}

LimitSupport limit_support() {
    const detail::CgroupHome& home = detail::cached_cgroup_home();
    LimitSupport support;
    support.mechanism = home.mechanism;
    if (home.mechanism != LimitMechanism::rlimit) {
        support.detail = fmt::format("memory and process count summed over each call, in a per-call cgroup under {}",
                                     home.detail);
        return support;
    }
    support.detail = "rlimits per process: cgroups are not usable here (" + home.detail + ")";
    support.unenforced.emplace_back("memory is limited per process (RLIMIT_AS), not summed over a call's processes");
    if (::geteuid() == 0) {
        support.unenforced.emplace_back("process count: RLIMIT_NPROC is not enforced for root, so a fork bomb is "
                                        "stopped only by the timeout and the sandbox's pid namespace");
    } else {
        support.unenforced.emplace_back("process count is limited per user (RLIMIT_NPROC counts every process of "
                                        "this uid), not per call");
    }
    return support;
}

}  // namespace npuopt::proc
