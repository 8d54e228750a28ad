// target::Toolchain: resolve the toolchain binary, expand a command's argv, run it through
// proc::run in the sandbox with a fresh scratch dir, and map what came back to typed results.
//
//   resolve bin ─► expand {placeholders} ─► proc::run (sandbox, scratch, limits) ─► parse lines
//                                                                                     │
//   status: not_started / timed_out / crashed / unparsable / transient / failed / ok ◄┘

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/log.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "target/protocol.hpp"
#include "target/toolchain.hpp"

namespace npuopt::target {

namespace fs = std::filesystem;

std::string_view call_status_name(CallStatus status) {
    switch (status) {
        case CallStatus::ok: return "ok";
        case CallStatus::failed: return "failed";
        case CallStatus::transient: return "transient";
        case CallStatus::timed_out: return "timed_out";
        case CallStatus::crashed: return "crashed";
        case CallStatus::unparsable: return "unparsable";
        case CallStatus::not_started: return "not_started";
    }
    return "not_started";
}

std::string_view applicability_name(Applicability applicability) {
    switch (applicability) {
        case Applicability::machine_applicable: return "MachineApplicable";
        case Applicability::maybe_incorrect: return "MaybeIncorrect";
        case Applicability::has_placeholders: return "HasPlaceholders";
        case Applicability::unspecified: return "Unspecified";
    }
    return "Unspecified";
}

namespace {

/// rustc-json/1: a check or compile speaks cargo/rustc JSON and has no result line of ours. Its
/// result is cargo's `build-finished`, else the exit status, and in either case no error
/// diagnostic; the errors and warnings are counted from the diagnostics.
template <typename Line>
std::optional<Line> rustc_result(const detail::ParsedOutput& parsed, const proc::Result& process) {
    const std::int64_t errors = std::count_if(parsed.diagnostics.begin(), parsed.diagnostics.end(),
                                              [](const Diagnostic& d) { return d.level == "error"; });
    const std::int64_t warnings = static_cast<std::int64_t>(parsed.diagnostics.size()) - errors;
    const bool exited_ok = process.exit_code && *process.exit_code == 0 && !process.term_signal && !process.timed_out;
    if (!parsed.build_finished && !process.exit_code) return std::nullopt;
    Line line;
    line.ok = parsed.build_finished.value_or(exited_ok) && exited_ok && errors == 0;
    line.errors = errors;
    line.warnings = warnings;
    line.compile_secs = process.wall_secs;
    return line;
}

constexpr int k_exit_ok = 0;
constexpr int k_exit_failed = 1;
constexpr int k_exit_usage = 2;
constexpr int k_exit_transient = 3;

constexpr std::size_t k_stderr_line_max_chars = 300;

/// The first line of free text (stderr), capped: it ends up in messages that may be recorded.
std::string first_line(const std::string& text) {
    return detail::cap_text(text.substr(0, text.find('\n')), k_stderr_line_max_chars);
}

/// What the call's limits did, to append to a failure's message.
std::string limit_note(const proc::Result& process) {
    if (!process.process_limit_hit) return {};
    return "; the call reached its process limit (a fork was refused)";
}

/// Sets call.status and call.message from the process outcome and the parsed lines.
/// `required_type` is the line a successful call must contain ("" when none).
void classify(CallInfo& call, const detail::ParsedOutput& parsed, bool has_required_line,
              std::string_view required_type) {
    const proc::Result& process = call.process;
    call.raw_events = parsed.raw_events;
    call.bad_line = parsed.bad_line;
    const std::string program = call.argv.empty() ? std::string("toolchain") : call.argv[0];

    if (!process.started) {
        call.status = CallStatus::not_started;
        call.message = process.error.value_or("the toolchain did not start");
        return;
    }
    if (process.error) {  // started, but the sandbox could not be set up around it
        call.status = CallStatus::not_started;
        call.message = *process.error;
        return;
    }
    if (process.timed_out) {
        call.status = CallStatus::timed_out;
        call.message = fmt::format("{} gave no answer within its time limit and was killed (a hang) after {:.1f} s",
                                   program, process.wall_secs);
        return;
    }
    if (process.memory_limit_hit) {
        call.status = CallStatus::crashed;
        call.message = fmt::format("{} was killed: the call went over its memory limit (summed over all its processes{})",
                                   program,
                                   process.call_memory_peak_bytes
                                       ? fmt::format(", peak {} MiB", *process.call_memory_peak_bytes >> 20)
                                       : std::string());
        return;
    }
    if (process.stdout_truncated) {
        call.status = CallStatus::unparsable;
        call.message = fmt::format("{} printed {} bytes on stdout, over the output cap: an output flood (only the "
                                   "head and tail were kept, and are not trusted)",
                                   program, process.stdout_bytes);
        return;
    }
    if (process.term_signal) {
        call.status = CallStatus::crashed;
        const char* name = sigabbrev_np(*process.term_signal);
        call.message = fmt::format("{} crashed: killed by signal {}{}{}", program, *process.term_signal,
                                   name ? fmt::format(" (SIG{})", name) : std::string(), limit_note(process));
        return;
    }
    const int exit_code = process.exit_code.value_or(-1);
    if (exit_code != k_exit_ok && exit_code != k_exit_failed && exit_code != k_exit_usage &&
        exit_code != k_exit_transient) {
        call.status = CallStatus::crashed;
        call.message = fmt::format("{} crashed: exit status {} (the protocol defines 0-3)", program, exit_code);
        return;
    }
    if (parsed.bad_line) {
        call.status = CallStatus::unparsable;
        call.message = parsed.parse_error;
        return;
    }
    const detail::ErrorLine* error_line = parsed.errors.empty() ? nullptr : &parsed.errors.front();
    for (const auto& line : parsed.errors) {
        if (line.kind == "transient") error_line = &line;
    }
    if (exit_code == k_exit_transient || (error_line && error_line->kind == "transient")) {
        call.status = CallStatus::transient;
        call.message = error_line ? error_line->message : "transient device failure (exit status 3)";
        return;
    }
    if (exit_code == k_exit_usage) {
        call.status = CallStatus::failed;
        call.message = fmt::format("usage error (exit status 2): the target's command line is wrong: {}",
                                   error_line ? error_line->message : first_line(process.stderr_text));
        return;
    }
    if (exit_code == k_exit_failed) {
        call.status = CallStatus::failed;
        if (error_line && error_line->kind == "cache") {
            call.message = fmt::format("compile cache error: entry {}: {}", error_line->entry, error_line->message);
        } else if (error_line) {
            call.message = fmt::format("{} error: {}", error_line->kind, error_line->message);
        } else if (!parsed.diagnostics.empty()) {
            call.message = fmt::format("{} diagnostic(s), first: {} {}", parsed.diagnostics.size(),
                                       parsed.diagnostics.front().code, parsed.diagnostics.front().message);
        } else if (parsed.verify && !parsed.verify->passed) {
            call.message = fmt::format("verification failed: {} mismatches, {} non-finite", parsed.verify->mismatches,
                                       parsed.verify->nonfinite);
        } else {
            call.message = "exit status 1: " + first_line(process.stderr_text);
        }
        call.message += limit_note(process);
        return;
    }
    if (!has_required_line) {
        call.status = CallStatus::unparsable;
        call.message = fmt::format("{} exited 0 but printed no \"{}\" line", program, required_type);
        return;
    }
    call.status = CallStatus::ok;
}

fs::path against(const fs::path& base, const fs::path& path) {
    return path.is_absolute() || base.empty() ? path : base / path;
}

}  // namespace

Toolchain::Toolchain(config::TargetConfig target, proc::SandboxPolicy sandbox, proc::Limits limits)
    : m_target(std::move(target)), m_sandbox(std::move(sandbox)), m_limits(limits) {}

std::optional<fs::path> Toolchain::resolve_bin(std::string* why) const {
    const std::string& bin = m_target.toolchain.bin;
    auto fail = [&](std::string reason) -> std::optional<fs::path> {
        if (why) *why = std::move(reason);
        return std::nullopt;
    };
    if (bin.empty()) return fail(fmt::format("target '{}': toolchain.bin is empty", m_target.name));
    std::error_code ignored;
    if (bin.find('/') != std::string::npos) {
        fs::path path = against(m_target.dir, bin);
        if (auto found = proc::find_executable(path.string(), "")) return fs::absolute(*found, ignored);
        return fail(fmt::format("toolchain '{}' of target '{}' not found: {} is not an executable file", bin,
                                m_target.name, path.string()));
    }
    std::vector<std::string> searched;
    for (const auto& search_path : m_target.toolchain.search_paths) {
        fs::path dir = against(m_target.dir, search_path);
        searched.push_back(dir.string());
        if (auto found = proc::find_executable((dir / bin).string(), "")) return fs::absolute(*found, ignored);
    }
    const char* path_env = std::getenv("PATH");
    std::string path_text = path_env ? path_env : "";
    if (auto found = proc::find_executable(bin, path_text)) return fs::absolute(*found, ignored);
    return fail(fmt::format("toolchain '{}' of target '{}' not found; searched {}{}PATH ({})", bin, m_target.name,
                            fmt::join(searched, ", "), searched.empty() ? "" : " and ", path_text));
}

namespace {

/// What a `paths` command printed: run once per process for each argv and environment.
std::optional<std::vector<fs::path>> declared_paths(const std::vector<std::string>& argv,
                                                    const std::map<std::string, std::string>& env, double timeout_secs,
                                                    const std::string& target_name) {
    // By argv and environment: the toolchain's answer may depend on both (a path named in its
    // environment may be one it needs visible).
    using Key = std::pair<std::vector<std::string>, std::map<std::string, std::string>>;
    static std::mutex mutex;
    static std::map<Key, std::optional<std::vector<fs::path>>> cache;
    std::lock_guard lock(mutex);
    const Key key{argv, env};
    if (auto found = cache.find(key); found != cache.end()) return found->second;
    proc::Command command;
    command.argv = argv;
    command.env = env;
    command.limits.timeout_secs = timeout_secs;
    command.limits.output_cap_bytes = 64 * 1024;
    command.sandbox.enabled = false;  // the toolchain is trusted; only kernels are not
    proc::Result ran = proc::run(command);
    auto parsed = detail::parse_output(ran.stdout_text);
    std::optional<std::vector<fs::path>> paths;
    if (ran.ok() && parsed.paths && !parsed.bad_line) {
        paths.emplace();
        for (const auto& path : parsed.paths->read_only) paths->emplace_back(fs::path(path).lexically_normal());
    } else {
        log::warn("target '{}': the toolchain's `paths` command failed ({}); its calls see the system paths, "
                     "read_only_paths and the toolchain's install root instead",
                     target_name,
                     ran.error ? *ran.error
                     : parsed.bad_line ? parsed.parse_error
                     : !ran.ok() ? fmt::format("exit status {}", ran.exit_code.value_or(-1))
                                 : "no \"paths\" line");
    }
    cache.emplace(key, paths);
    return paths;
}

/// Whether `path` lies strictly inside `dir` (both absolute and lexically normal).
bool strictly_inside(const fs::path& path, const fs::path& dir) {
    auto path_part = path.begin();
    for (auto dir_part = dir.begin(); dir_part != dir.end(); ++dir_part, ++path_part) {
        if (dir_part->empty()) continue;  // a trailing '/'
        if (path_part == path.end() || *path_part != *dir_part) return false;
    }
    for (; path_part != path.end(); ++path_part) {
        if (!path_part->empty() && *path_part != ".") return true;
    }
    return false;
}

/// The first {"type":"error","kind":"cache"} line, if any.
const detail::ErrorLine* cache_error(const detail::ParsedOutput& parsed) {
    for (const auto& line : parsed.errors) {
        if (line.kind == "cache") return &line;
    }
    return nullptr;
}

void replace_all(std::string& text, std::string_view from, const std::string& to) {
    for (auto pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size())) {
        text.replace(pos, from.size(), to);
    }
}

}  // namespace

std::vector<fs::path> Toolchain::toolchain_paths() const {
    std::vector<fs::path> paths;
    std::error_code error;
    auto bin = resolve_bin();
    std::optional<std::vector<fs::path>> declared;
    if (m_target.toolchain.paths && bin) {
        std::map<std::string, std::string> values = {{"bin", bin->string()}};
        auto argv = expand_argv(m_target.toolchain.paths->argv, values, "paths");
        declared = declared_paths(argv, m_target.toolchain.env, m_target.toolchain.paths->timeout_secs, m_target.name);
    }
    if (bin) {
        // The executable itself, where it was found and where it really is.
        paths.push_back(*bin);
        fs::path real = fs::weakly_canonical(*bin, error);
        if (!error && real != *bin) paths.push_back(real);
        if (!declared) {
            // Nothing declared: the install root (<root>/bin/tool beside <root>/lib, <root>/share ...)
            // unless that is a home or system root, then the executable's own directory.
            const fs::path bin_dir = real.parent_path();
            fs::path root = bin_dir.filename() == "bin" ? bin_dir.parent_path() : bin_dir;
            const char* home = std::getenv("HOME");
            if (root == root.root_path() || root == "/root" || root == "/home" || (home && root == fs::path(home))) {
                root = bin_dir;
            }
            paths.push_back(root);
        }
    }
    for (const auto& path : m_target.toolchain.read_only_paths) paths.push_back(against(m_target.dir, path));
    if (declared) paths.insert(paths.end(), declared->begin(), declared->end());
    return paths;
}

CallInfo Toolchain::call(std::string_view command_name, const config::CommandSpec& spec,
                         std::map<std::string, std::string> values, const fs::path* file,
                         const std::vector<std::string>& append_args, CacheAccess cache_access) const {
    CallInfo info;
    std::string why;
    auto bin = resolve_bin(&why);
    values["bin"] = bin ? bin->string() : m_target.toolchain.bin;
    if (spec.argv.empty()) {
        throw Error(ErrorKind::invalid_config,
                    fmt::format("target '{}': toolchain command '{}' has an empty argv", m_target.name, command_name));
    }

    // A fresh scratch dir per call, removed after: nothing of one call leaks into the next.
    std::error_code error;
    fs::path scratch_base = m_sandbox.scratch_dir.empty() ? fs::temp_directory_path(error) : m_sandbox.scratch_dir;
    if (scratch_base.empty()) scratch_base = "/tmp";
    fs::create_directories(scratch_base, error);
    std::string pattern = (fs::absolute(scratch_base, error) / "npuopt-call-XXXXXX").string();
    std::optional<fs::path> scratch;
    if (bin && ::mkdtemp(pattern.data()) != nullptr) scratch = fs::path(pattern);
    struct Cleanup {
        std::optional<fs::path> path;
        ~Cleanup() {
            std::error_code ignored;
            if (path) fs::remove_all(*path, ignored);
        }
    } cleanup{scratch};

    // {cache_dir}: the kept compile cache, else this call's scratch.
    fs::path cache_dir = scratch.value_or(fs::path());
    bool has_cache = false;
    if (!m_cache_dir.empty()) {
        fs::create_directories(m_cache_dir, error);
        if (fs::is_directory(m_cache_dir, error)) {
            cache_dir = fs::absolute(m_cache_dir, error).lexically_normal();
            has_cache = true;
        }
    }
    values.emplace("cache_dir", cache_dir.string());
    info.argv = expand_argv(spec.argv, values, command_name);
    info.argv.insert(info.argv.end(), append_args.begin(), append_args.end());
    if (!bin) {
        info.status = CallStatus::not_started;
        info.message = why;
        info.process.error = why;
        return info;
    }
    if (!scratch) {
        info.status = CallStatus::not_started;
        info.message = fmt::format("cannot create a scratch directory under {}: {}", scratch_base.string(),
                                   std::strerror(errno));
        info.process.error = info.message;
        return info;
    }

    proc::Command command;
    command.argv = info.argv;
    command.env = m_target.toolchain.env;
    command.limits = m_limits;
    command.limits.timeout_secs = spec.timeout_secs;
    command.sandbox = m_sandbox;
    command.sandbox.scratch_dir = *scratch;
    if (m_target.toolchain.system_paths) command.sandbox.system_paths = m_target.toolchain.system_paths;
    for (auto& [name, value] : command.env) replace_all(value, "{cache_dir}", cache_dir.string());

    auto add_read_only = [&](const fs::path& path) {
        if (path.empty()) return;
        if (!fs::exists(path, error)) {
            log::warn("target '{}': read-only path {} does not exist; not exposed to the toolchain", m_target.name,
                         path.string());
            return;
        }
        command.sandbox.read_only_paths.push_back(path);
    };
    for (const auto& path : toolchain_paths()) add_read_only(path);
    if (file) add_read_only(*file);  // the kernel file only, never its directory (a campaign's, say)
    if (has_cache) {
        if (cache_access == CacheAccess::writable) {
            command.sandbox.writable_paths.push_back(cache_dir);
        } else {
            command.sandbox.read_only_paths.push_back(cache_dir);
        }
    }

    // throws only when a required sandbox is missing
    info.process = m_executor ? m_executor->run(command) : proc::run(command);
    return info;
}

std::optional<Toolchain::CompileMemo> Toolchain::ensure_compiled(const fs::path& file, bool force) const {
    if (!uses_compile_step()) return std::nullopt;
    std::ifstream in(file, std::ios::binary);
    if (!in) return std::nullopt;  // the command itself reports the unreadable file
    std::stringstream bytes;
    bytes << in.rdbuf();
    const std::string key = fs::absolute(m_cache_dir).lexically_normal().string() + "\n" + sha256_hex(bytes.str());
    {
        std::lock_guard lock(*m_compile_mutex);
        auto found = m_compiled->find(key);
        if (found != m_compiled->end() && !force) return found->second;
    }
    CompileResult compiled = compile(file);
    CompileMemo memo;
    memo.ok = compiled.ok;
    memo.diagnostics = std::move(compiled.diagnostics);
    memo.compile_secs = compiled.compile_secs;
    memo.call = std::move(compiled.call);
    memo.call.process.stdout_text.clear();  // the parsed diagnostics are kept; the raw text is not
    memo.call.process.stderr_text.clear();
    // Kept when it said something about the kernel (ok, or rejected with diagnostics); a compile that
    // failed for another reason (timeout, crash, a cache error) is tried again next time.
    const bool definite = memo.ok || (memo.call.status == CallStatus::failed && !memo.diagnostics.empty());
    if (memo.call.status == CallStatus::failed && memo.call.process.exit_code == k_exit_usage &&
        !m_compile_unsupported->exchange(true)) {
        // A toolchain older than its target.yaml: it does not know `compile`. Its commands then
        // keep the cache writable, as for a target without a compile command.
        log::warn("target '{}': the toolchain does not accept its `compile` command ({}); no compile step, and "
                     "the cache stays writable for every command as for a target without one",
                     m_target.name, memo.call.message);
    }
    if (definite) {
        std::lock_guard lock(*m_compile_mutex);
        (*m_compiled)[key] = memo;
    } else if (memo.call.status != CallStatus::ok) {
        log::warn("target '{}': compile of {} failed ({}: {}); the command compiles privately",
                     m_target.name, file.string(), call_status_name(memo.call.status), memo.call.message);
    }
    return memo;
}

bool Toolchain::evict_cache_entry(const std::string& entry, std::string* why) const {
    std::error_code error;
    const fs::path cache = fs::absolute(m_cache_dir, error).lexically_normal();
    const fs::path path = fs::path(entry).lexically_normal();
    if (entry.empty() || !path.is_absolute() || !strictly_inside(path, cache)) {
        *why = fmt::format("the toolchain named cache entry '{}', which is not inside the cache dir {}: not removed",
                           entry, cache.string());
        return false;
    }
    // A symlinked directory inside the cache must not lead the removal outside it.
    const fs::path real_parent = fs::weakly_canonical(path.parent_path(), error);
    const fs::path real_cache = fs::weakly_canonical(cache, error);
    if (!strictly_inside(real_parent / path.filename(), real_cache)) {
        *why = fmt::format("cache entry '{}' resolves outside the cache dir {}: not removed", entry, cache.string());
        return false;
    }
    for (const std::string suffix : {"", ".sha256", ".diag"}) {
        fs::path victim = path.string() + suffix;
        if (!fs::exists(fs::symlink_status(victim, error))) continue;
        std::error_code remove_error;
        fs::remove_all(victim, remove_error);
        if (remove_error) {
            *why = fmt::format("cannot remove cache entry {}: {}", victim.string(), remove_error.message());
            return false;
        }
    }
    return true;
}

CallInfo Toolchain::call_on_file(std::string_view command_name, const config::CommandSpec& spec,
                                 std::map<std::string, std::string> values, const fs::path& file,
                                 const std::vector<std::string>& append_args) const {
    ensure_compiled(file, false);
    const CacheAccess access = m_target.toolchain.compile && !m_compile_unsupported->load() ? CacheAccess::read_only
                                                                                            : CacheAccess::writable;
    CallInfo info = call(command_name, spec, values, &file, append_args, access);
    auto parsed = detail::parse_output(info.process.stdout_text);
    const detail::ErrorLine* failed_entry = cache_error(parsed);
    if (failed_entry == nullptr || !uses_compile_step()) return info;

    const std::string entry = failed_entry->entry;
    std::string why;
    if (!evict_cache_entry(entry, &why)) {
        log::error("target '{}': {} of {}: {}", m_target.name, command_name, file.string(), why);
        return info;
    }
    log::warn("target '{}': compile cache entry {} failed its check ({}); evicted, recompiling {} once",
                 m_target.name, entry, failed_entry->message, file.string());
    ensure_compiled(file, true);
    CallInfo retried = call(command_name, spec, std::move(values), &file, append_args, access);
    auto reparsed = detail::parse_output(retried.process.stdout_text);
    if (const detail::ErrorLine* again = cache_error(reparsed)) {
        log::error("target '{}': compile cache entry {} failed its check again after eviction and recompilation "
                      "({}): {} of {} fails",
                      m_target.name, again->entry, again->message, command_name, file.string());
    }
    return retried;
}

CompileResult Toolchain::compile(const fs::path& file) const {
    CompileResult result;
    const fs::path absolute = fs::absolute(file);
    if (!m_target.toolchain.compile || m_cache_dir.empty()) {
        result.call.status = CallStatus::not_started;
        result.call.message = !m_target.toolchain.compile
                                  ? fmt::format("target '{}' declares no compile command", m_target.name)
                                  : std::string("no compile cache dir is set: each command compiles privately");
        return result;
    }
    result.call = call("compile", *m_target.toolchain.compile, {{"file", absolute.string()}}, &absolute, {},
                       CacheAccess::writable);
    auto parsed = detail::parse_output(result.call.process.stdout_text);
    result.diagnostics = parsed.diagnostics;
    if (!parsed.compile && m_target.toolchain.protocol == config::k_protocol_rustc_json_v1) {
        parsed.compile = rustc_result<detail::CompileLine>(parsed, result.call.process);
        if (parsed.compile) parsed.compile->artifact = parsed.cargo_artifact;
    }
    if (parsed.compile) {
        result.ok = parsed.compile->ok;
        result.compile_secs = parsed.compile->compile_secs;
        result.artifact = parsed.compile->artifact;
        result.sha256 = parsed.compile->sha256;
    }
    classify(result.call, parsed, parsed.compile.has_value(), "compile");
    if (result.call.status != CallStatus::ok) result.ok = false;
    return result;
}

std::string Toolchain::identity() const {
    auto bin = resolve_bin();
    if (!bin) return "";
    std::error_code error;
    const auto size = fs::file_size(*bin, error);
    if (error) return "";
    const auto modified = fs::last_write_time(*bin, error);
    if (error) return "";
    return fmt::format("{} {} {}", bin->string(), size, modified.time_since_epoch().count());
}

VersionResult Toolchain::version() const {
    VersionResult result;
    result.call = call("version", m_target.toolchain.version, {}, nullptr, {}, CacheAccess::read_only);
    auto parsed = detail::parse_output(result.call.process.stdout_text);
    if (parsed.version) {
        result.name = parsed.version->name;
        result.version = parsed.version->version;
    }
    classify(result.call, parsed, parsed.version.has_value(), "version");
    return result;
}

CheckResult Toolchain::check(const fs::path& file, const std::string& kernel,
                             const std::map<std::string, std::int64_t>& shape) const {
    CheckResult result;
    const fs::path absolute = fs::absolute(file);
    // A kernel the compile step rejected with diagnostics: those are check's answer too (check
    // compiles the same way first), without compiling it a second time.
    if (auto compiled = ensure_compiled(absolute, false); compiled && !compiled->ok) {
        if (compiled->call.status == CallStatus::failed && !compiled->diagnostics.empty()) {
            result.call = compiled->call;
            result.diagnostics = compiled->diagnostics;
            result.compile_secs = compiled->compile_secs;
            return result;
        }
    }
    result.call = call_on_file("check", m_target.toolchain.check,
                               {{"file", absolute.string()},
                                {"kernel", kernel},
                                {"shape", kernel.empty() ? std::string() : format_shape(shape)}},
                               absolute);
    auto parsed = detail::parse_output(result.call.process.stdout_text);
    result.diagnostics = parsed.diagnostics;
    if (!parsed.check && m_target.toolchain.protocol == config::k_protocol_rustc_json_v1) {
        parsed.check = rustc_result<detail::CheckLine>(parsed, result.call.process);
    }
    if (parsed.check) {
        result.ok = parsed.check->ok;
        result.compile_secs = parsed.check->compile_secs;
    }
    classify(result.call, parsed, parsed.check.has_value(), "check");
    if (result.call.status != CallStatus::ok) result.ok = false;
    return result;
}

ScheduleResult Toolchain::schedule(const fs::path& file, const std::string& kernel,
                                   const std::map<std::string, std::int64_t>& shape) const {
    ScheduleResult result;
    const fs::path absolute = fs::absolute(file);
    result.call = call_on_file("schedule", m_target.toolchain.schedule,
                               {{"file", absolute.string()}, {"kernel", kernel}, {"shape", format_shape(shape)}},
                               absolute);
    auto parsed = detail::parse_output(result.call.process.stdout_text);
    result.diagnostics = parsed.diagnostics;
    if (parsed.schedule) {
        result.cycles = parsed.schedule->cycles;
        result.breakdown = parsed.schedule->breakdown;
        result.counts = parsed.schedule->counts;
    }
    classify(result.call, parsed, parsed.schedule.has_value(), "schedule");
    return result;
}
RunResult Toolchain::run(const RunRequest& request) const {
    RunResult result;
    const fs::path absolute = fs::absolute(request.file);
    std::map<std::string, std::string> values = {
        {"file", absolute.string()},
        {"kernel", request.kernel},
        {"seed", std::to_string(request.seed)},
        {"repeat", std::to_string(request.repeat)},
        {"shape", format_shape(request.shape)},
        {"check", request.check ? "--check" : ""},
    };
    for (const auto& [name, value] : request.extra) values.emplace(name, value);  // built-ins win
    std::vector<std::string> append_args;
    const auto& run_argv = m_target.toolchain.run.argv;
    const bool has_check_placeholder = std::any_of(run_argv.begin(), run_argv.end(), [](const std::string& argument) {
        return argument.find("{check}") != std::string::npos;
    });
    if (request.check && !has_check_placeholder) append_args.emplace_back("--check");
    append_args.insert(append_args.end(), request.extra_args.begin(), request.extra_args.end());
    result.call = call_on_file("run", m_target.toolchain.run, std::move(values), absolute, append_args);
    auto parsed = detail::parse_output(result.call.process.stdout_text);
    result.diagnostics = parsed.diagnostics;
    result.cycles = parsed.run_cycles;
    result.verify = parsed.verify;
    if (!parsed.errors.empty()) result.error_kind = parsed.errors.front().kind;
    for (const auto& line : parsed.errors) {
        if (line.kind == "transient") result.error_kind = line.kind;
    }
    const bool complete = !parsed.run_cycles.empty() && (!request.check || parsed.verify.has_value());
    classify(result.call, parsed, complete, request.check ? "run\" and \"verify" : "run");
    return result;
}

}  // namespace npuopt::target
