#pragma once
// The target adapter: turns requests into the toolchain commands a target.yaml declares,
// runs them through proc/ (sandboxed), and parses their npuopt-jsonl/1 output
// (docs/toolchain-protocol.md) into typed results. Decides nothing.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/target_config.hpp"
#include "proc/executor.hpp"
#include "proc/subprocess.hpp"
#include "target/device.hpp"
#include "target/results.hpp"

namespace npuopt::target {

/// Calls the toolchain a TargetConfig declares: the Device (builder, runner, estimator) of a
/// target that is data.
class Toolchain final : public Device {
public:
    /// `sandbox` is the policy template: each call gets a fresh scratch dir under its scratch_dir
    /// (or the system temp dir when empty), removed after. `limits` is the template for rlimits and
    /// output caps; each command's timeout_secs comes from its CommandSpec.
    Toolchain(config::TargetConfig target, proc::SandboxPolicy sandbox, proc::Limits limits = {});

    /// Absolute path of the toolchain executable, or nullopt with `why` filled.
    std::optional<std::filesystem::path> resolve_bin(std::string* why = nullptr) const;

    VersionResult version() const override;
    /// "path size mtime" of the resolved executable; "" when it is not found.
    std::string identity() const override;
    const std::string& target_name() const override { return m_target.name; }
    /// Compiles `file` into the cache (target.yaml's `compile` command). check/schedule/run call it
    /// themselves, once per file content per process; nothing to do without a compile command or a
    /// cache dir (ok, with call.status not_started and an explaining message).
    CompileResult compile(const std::filesystem::path& file) const;
    /// `kernel` and `shape` fill the check command's {kernel} and {shape}; without a kernel, an
    /// argument that is exactly one of them is dropped with the flag before it (the toolchain's
    /// own default shape applies).
    CheckResult check(const std::filesystem::path& file, const std::string& kernel = {},
                      const std::map<std::string, std::int64_t>& shape = {}) const;
    ScheduleResult schedule(const std::filesystem::path& file, const std::string& kernel,
                            const std::map<std::string, std::int64_t>& shape) const;
    RunResult run(const RunRequest& request) const override;
    /// Builder: `check`. Estimator: `schedule`.
    CheckResult build(const std::filesystem::path& file, const std::string& kernel,
                      const std::map<std::string, std::int64_t>& shape) const override {
        return check(file, kernel, shape);
    }
    ScheduleResult estimate(const std::filesystem::path& file, const std::string& kernel,
                            const std::map<std::string, std::int64_t>& shape) const override {
        return schedule(file, kernel, shape);
    }

    const config::TargetConfig& target() const { return m_target; }
    /// A directory kept across calls (the compiler's cache of content-hashed outputs), substituted
    /// for `{cache_dir}` in toolchain.env values and argv. With a `compile` command it is bound
    /// writable for compile only and read-only for every other command (the kernel's own code runs
    /// there); without one, writable for all. Without a cache dir, `{cache_dir}` is the call's
    /// scratch dir (nothing is reused) and no compile step runs.
    void set_cache_dir(std::filesystem::path dir) { m_cache_dir = std::move(dir); }
    /// Where the toolchain's commands (check, run, schedule, compile) run: here by default, or
    /// as batch jobs (proc::SlurmExecutor). The version query always runs here.
    void set_executor(std::shared_ptr<proc::Executor> executor) { m_executor = std::move(executor); }
    const std::filesystem::path& cache_dir() const { return m_cache_dir; }

    /// What the sandbox exposes besides the system paths: target.yaml's read_only_paths, what the
    /// `paths` command printed (run once per process, unsandboxed: the toolchain is trusted) and the
    /// toolchain executable; without a `paths` command (or when it fails) the toolchain's install root.
    std::vector<std::filesystem::path> toolchain_paths() const;

private:
    enum class CacheAccess { writable, read_only };
    /// A file's compile state in this process, by (cache dir, content hash).
    struct CompileMemo { bool ok = false; std::vector<Diagnostic> diagnostics; double compile_secs = 0.0; CallInfo call; };

    CallInfo call(std::string_view command_name, const config::CommandSpec& spec,
                  std::map<std::string, std::string> values, const std::filesystem::path* file,
                  const std::vector<std::string>& append_args, CacheAccess cache_access) const;
    /// check/schedule/run of a file: compile first (once per content), run, and on a cache error
    /// evict the named entry, recompile and retry once.
    CallInfo call_on_file(std::string_view command_name, const config::CommandSpec& spec,
                          std::map<std::string, std::string> values, const std::filesystem::path& file,
                          const std::vector<std::string>& append_args = {}) const;
    /// The compile memo for `file`, compiling unless already done (or `force`); nullopt when no
    /// compile step applies (no compile command, no cache dir, unreadable file).
    std::optional<CompileMemo> ensure_compiled(const std::filesystem::path& file, bool force) const;
    /// Removes a cache entry the toolchain named, only if it lies inside the cache dir.
    bool evict_cache_entry(const std::string& entry, std::string* why) const;
    bool uses_compile_step() const {
        return m_target.toolchain.compile.has_value() && !m_cache_dir.empty() && !m_compile_unsupported->load();
    }

    config::TargetConfig m_target;
    proc::SandboxPolicy m_sandbox;
    proc::Limits m_limits;
    std::filesystem::path m_cache_dir;
    std::shared_ptr<proc::Executor> m_executor;  ///< null: proc::run here
    std::shared_ptr<std::mutex> m_compile_mutex = std::make_shared<std::mutex>();
    std::shared_ptr<std::atomic<bool>> m_compile_unsupported = std::make_shared<std::atomic<bool>>(false);
    std::shared_ptr<std::map<std::string, CompileMemo>> m_compiled =
        std::make_shared<std::map<std::string, CompileMemo>>();
};

/// Parse one npuopt-jsonl/1 diagnostic object (exposed for tests and knowledge/).
std::optional<Diagnostic> parse_diagnostic_line(const std::string& line, std::string* error = nullptr);

/// `{shape}`'s value: "k=v,k=v" sorted by key.
std::string format_shape(const std::map<std::string, std::int64_t>& shape);

/// Replaces each `{name}` in `argv` with values[name]. A `{name}` not in `values` is an
/// Error(invalid_config) naming the placeholder and `command_name`; other braces stay literal.
std::vector<std::string> expand_argv(const std::vector<std::string>& argv,
                                     const std::map<std::string, std::string>& values,
                                     std::string_view command_name);

}  // namespace npuopt::target
