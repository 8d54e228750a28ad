// target::Toolchain: resolve the toolchain binary, expand a command's argv, run it through
// proc::run in the sandbox with a fresh scratch dir, and map what came back to typed results.
//
//   resolve bin ─► expand {placeholders} ─► proc::run (sandbox, scratch, limits) ─► parse lines
//                                                                                     │
//   status: not_started / timed_out / crashed / unparsable / transient / failed / ok ◄┘

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
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

namespace {

constexpr int k_exit_ok = 0;
constexpr int k_exit_failed = 1;
constexpr int k_exit_usage = 2;
constexpr int k_exit_transient = 3;

std::string first_line(const std::string& text) {
    std::string line = text.substr(0, text.find('\n'));
    return line;
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
    if (process.term_signal) {
        call.status = CallStatus::crashed;
        const char* name = sigabbrev_np(*process.term_signal);
        call.message = fmt::format("{} crashed: killed by signal {}{}", program, *process.term_signal,
                                   name ? fmt::format(" (SIG{})", name) : std::string());
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
        if (error_line) {
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

CallInfo Toolchain::call(std::string_view command_name, const config::CommandSpec& spec,
                         std::map<std::string, std::string> values, const fs::path* file,
                         const std::vector<std::string>& append_args) const {
    CallInfo info;
    std::string why;
    auto bin = resolve_bin(&why);
    values["bin"] = bin ? bin->string() : m_target.toolchain.bin;
    if (spec.argv.empty()) {
        throw Error(ErrorKind::invalid_config,
                    fmt::format("target '{}': toolchain command '{}' has an empty argv", m_target.name, command_name));
    }
    info.argv = expand_argv(spec.argv, values, command_name);
    info.argv.insert(info.argv.end(), append_args.begin(), append_args.end());
    if (!bin) {
        info.status = CallStatus::not_started;
        info.message = why;
        info.process.error = why;
        return info;
    }

    proc::Command command;
    command.argv = info.argv;
    command.env = m_target.toolchain.env;
    command.limits = m_limits;
    command.limits.timeout_secs = spec.timeout_secs;
    command.sandbox = m_sandbox;

    // A fresh scratch dir per call, removed after: nothing of one call leaks into the next.
    std::error_code error;
    fs::path scratch_base = m_sandbox.scratch_dir.empty() ? fs::temp_directory_path(error) : m_sandbox.scratch_dir;
    if (scratch_base.empty()) scratch_base = "/tmp";
    fs::create_directories(scratch_base, error);
    std::string pattern = (fs::absolute(scratch_base, error) / "npuopt-call-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
        info.status = CallStatus::not_started;
        info.message = fmt::format("cannot create a scratch directory under {}: {}", scratch_base.string(),
                                   std::strerror(errno));
        info.process.error = info.message;
        return info;
    }
    const fs::path scratch = pattern;
    command.sandbox.scratch_dir = scratch;
    struct Cleanup {
        fs::path path;
        ~Cleanup() {
            std::error_code ignored;
            fs::remove_all(path, ignored);
        }
    } cleanup{scratch};

    // {cache_dir} in env values: the kept compile cache (bound writable), else this call's scratch.
    fs::path cache_dir = scratch;
    if (!m_cache_dir.empty()) {
        fs::create_directories(m_cache_dir, error);
        if (fs::is_directory(m_cache_dir, error)) {
            cache_dir = fs::absolute(m_cache_dir, error);
            command.sandbox.writable_paths.push_back(cache_dir);
        }
    }
    for (auto& [name, value] : command.env) {
        for (auto pos = value.find("{cache_dir}"); pos != std::string::npos; pos = value.find("{cache_dir}", pos)) {
            value.replace(pos, std::string_view("{cache_dir}").size(), cache_dir.string());
            pos += cache_dir.string().size();
        }
    }

    auto add_read_only = [&](const fs::path& path) {
        if (path.empty()) return;
        if (!fs::exists(path, error)) {
            spdlog::warn("target '{}': read-only path {} does not exist; not exposed to the toolchain", m_target.name,
                         path.string());
            return;
        }
        command.sandbox.read_only_paths.push_back(path);
    };
    // The toolchain's install root (<root>/bin/tool beside <root>/lib, <root>/share ...): a
    // toolchain installed under /tmp would otherwise vanish behind the sandbox's private /tmp.
    const fs::path bin_dir = fs::weakly_canonical(*bin, error).parent_path();
    add_read_only(bin_dir.has_parent_path() && bin_dir.parent_path() != bin_dir.root_path() ? bin_dir.parent_path()
                                                                                            : bin_dir);
    for (const auto& path : m_target.toolchain.read_only_paths) add_read_only(against(m_target.dir, path));
    if (file) add_read_only(file->parent_path());

    info.process = proc::run(command);  // throws only when a required sandbox is missing
    return info;
}

VersionResult Toolchain::version() const {
    VersionResult result;
    result.call = call("version", m_target.toolchain.version, {}, nullptr);
    auto parsed = detail::parse_output(result.call.process.stdout_text);
    if (parsed.version) {
        result.name = parsed.version->name;
        result.version = parsed.version->version;
    }
    classify(result.call, parsed, parsed.version.has_value(), "version");
    return result;
}

CheckResult Toolchain::check(const fs::path& file) const {
    CheckResult result;
    const fs::path absolute = fs::absolute(file);
    result.call = call("check", m_target.toolchain.check, {{"file", absolute.string()}}, &absolute);
    auto parsed = detail::parse_output(result.call.process.stdout_text);
    result.diagnostics = parsed.diagnostics;
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
    result.call = call("schedule", m_target.toolchain.schedule,
                       {{"file", absolute.string()}, {"kernel", kernel}, {"shape", format_shape(shape)}}, &absolute);
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
    result.call = call("run", m_target.toolchain.run, std::move(values), &absolute, append_args);
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
