#include "proc/executor.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/files.hpp"
#include "core/interrupt.hpp"

namespace npuopt::proc {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

template <typename T>
json optional_json(const std::optional<T>& value) {
    return value ? json(*value) : json();
}

template <typename T>
std::optional<T> optional_of(const json& object, const char* key) {
    if (!object.contains(key) || object.at(key).is_null()) return std::nullopt;
    return object.at(key).get<T>();
}

json paths_json(const std::vector<fs::path>& paths) {
    json out = json::array();
    for (const auto& path : paths) out.push_back(path.string());
    return out;
}

std::vector<fs::path> paths_of(const json& array) {
    std::vector<fs::path> paths;
    for (const auto& item : array) paths.emplace_back(item.get<std::string>());
    return paths;
}

std::string_view mechanism_name(LimitMechanism mechanism) {
    switch (mechanism) {
        case LimitMechanism::cgroup_v2: return "cgroup_v2";
        case LimitMechanism::cgroup_v1: return "cgroup_v1";
        case LimitMechanism::rlimit: return "rlimit";
    }
    return "rlimit";
}

LimitMechanism mechanism_of(const std::string& name) {
    if (name == "cgroup_v2") return LimitMechanism::cgroup_v2;
    if (name == "cgroup_v1") return LimitMechanism::cgroup_v1;
    return LimitMechanism::rlimit;
}

}  // namespace

json to_json(const Command& command) {
    const Limits& limits = command.limits;
    const SandboxPolicy& sandbox = command.sandbox;
    return {{"argv", command.argv},
            {"env", command.env},
            {"cwd", command.cwd ? json(command.cwd->string()) : json()},
            {"stdin", optional_json(command.stdin_data)},
            {"limits",
             {{"timeout_secs", limits.timeout_secs},
              {"kill_grace_secs", limits.kill_grace_secs},
              {"cpu_secs", optional_json(limits.cpu_secs)},
              {"memory_bytes", optional_json(limits.memory_bytes)},
              {"file_bytes", optional_json(limits.file_bytes)},
              {"processes", optional_json(limits.processes)},
              {"output_cap_bytes", limits.output_cap_bytes},
              {"use_cgroups", limits.use_cgroups}}},
            {"sandbox",
             {{"enabled", sandbox.enabled},
              {"required", sandbox.required},
              {"allow_network", sandbox.allow_network},
              {"scratch_dir", sandbox.scratch_dir.string()},
              {"writable_paths", paths_json(sandbox.writable_paths)},
              {"read_only_paths", paths_json(sandbox.read_only_paths)},
              {"system_paths", sandbox.system_paths ? paths_json(*sandbox.system_paths) : json()},
              {"bwrap_path", sandbox.bwrap_path.string()}}}};
}

Command command_from_json(const json& in) {
    try {
        Command command;
        command.argv = in.at("argv").get<std::vector<std::string>>();
        command.env = in.at("env").get<std::map<std::string, std::string>>();
        if (auto cwd = optional_of<std::string>(in, "cwd")) command.cwd = fs::path(*cwd);
        command.stdin_data = optional_of<std::string>(in, "stdin");
        const json& limits = in.at("limits");
        command.limits.timeout_secs = limits.at("timeout_secs").get<double>();
        command.limits.kill_grace_secs = limits.at("kill_grace_secs").get<double>();
        command.limits.cpu_secs = optional_of<std::uint64_t>(limits, "cpu_secs");
        command.limits.memory_bytes = optional_of<std::uint64_t>(limits, "memory_bytes");
        command.limits.file_bytes = optional_of<std::uint64_t>(limits, "file_bytes");
        command.limits.processes = optional_of<std::uint64_t>(limits, "processes");
        command.limits.output_cap_bytes = limits.at("output_cap_bytes").get<std::size_t>();
        command.limits.use_cgroups = limits.at("use_cgroups").get<bool>();
        const json& sandbox = in.at("sandbox");
        command.sandbox.enabled = sandbox.at("enabled").get<bool>();
        command.sandbox.required = sandbox.at("required").get<bool>();
        command.sandbox.allow_network = sandbox.at("allow_network").get<bool>();
        command.sandbox.scratch_dir = sandbox.at("scratch_dir").get<std::string>();
        command.sandbox.writable_paths = paths_of(sandbox.at("writable_paths"));
        command.sandbox.read_only_paths = paths_of(sandbox.at("read_only_paths"));
        if (!sandbox.at("system_paths").is_null()) command.sandbox.system_paths = paths_of(sandbox.at("system_paths"));
        command.sandbox.bwrap_path = sandbox.at("bwrap_path").get<std::string>();
        if (command.argv.empty()) throw Error(ErrorKind::invalid_input, "a call with an empty argv");
        return command;
    } catch (const json::exception& error) {
        throw Error(ErrorKind::invalid_input, fmt::format("not a call: {}", error.what()));
    }
}

json to_json(const Result& result) {
    return {{"started", result.started},
            {"timed_out", result.timed_out},
            {"exit_code", optional_json(result.exit_code)},
            {"term_signal", optional_json(result.term_signal)},
            {"wall_secs", result.wall_secs},
            {"peak_rss_bytes", result.peak_rss_bytes},
            {"stdout", result.stdout_text},
            {"stderr", result.stderr_text},
            {"stdout_truncated", result.stdout_truncated},
            {"stderr_truncated", result.stderr_truncated},
            {"stdout_bytes", result.stdout_bytes},
            {"stderr_bytes", result.stderr_bytes},
            {"sandboxed", result.sandboxed},
            {"limit_mechanism", mechanism_name(result.limit_mechanism)},
            {"call_memory_peak_bytes", optional_json(result.call_memory_peak_bytes)},
            {"memory_limit_hit", result.memory_limit_hit},
            {"process_limit_hit", result.process_limit_hit},
            {"error", optional_json(result.error)}};
}

Result result_from_json(const json& in) {
    try {
        Result result;
        result.started = in.at("started").get<bool>();
        result.timed_out = in.at("timed_out").get<bool>();
        result.exit_code = optional_of<int>(in, "exit_code");
        result.term_signal = optional_of<int>(in, "term_signal");
        result.wall_secs = in.at("wall_secs").get<double>();
        result.peak_rss_bytes = in.at("peak_rss_bytes").get<std::uint64_t>();
        result.stdout_text = in.at("stdout").get<std::string>();
        result.stderr_text = in.at("stderr").get<std::string>();
        result.stdout_truncated = in.at("stdout_truncated").get<bool>();
        result.stderr_truncated = in.at("stderr_truncated").get<bool>();
        result.stdout_bytes = in.at("stdout_bytes").get<std::uint64_t>();
        result.stderr_bytes = in.at("stderr_bytes").get<std::uint64_t>();
        result.sandboxed = in.at("sandboxed").get<bool>();
        result.limit_mechanism = mechanism_of(in.at("limit_mechanism").get<std::string>());
        result.call_memory_peak_bytes = optional_of<std::uint64_t>(in, "call_memory_peak_bytes");
        result.memory_limit_hit = in.at("memory_limit_hit").get<bool>();
        result.process_limit_hit = in.at("process_limit_hit").get<bool>();
        result.error = optional_of<std::string>(in, "error");
        return result;
    } catch (const json::exception& error) {
        throw Error(ErrorKind::invalid_input, fmt::format("not a call result: {}", error.what()));
    }
}

void execute_call_file(const fs::path& call_file, const fs::path& result_file) {
    if (!fs::is_regular_file(call_file)) {
        throw Error(ErrorKind::invalid_input, fmt::format("cannot read the call {}", call_file.string()));
    }
    const json call = json::parse(read_file_text(call_file), nullptr, false);
    if (call.is_discarded()) throw Error(ErrorKind::invalid_input, fmt::format("{} is not JSON", call_file.string()));
    Result result;
    try {
        result = proc::run(command_from_json(call));
    } catch (const Error& error) {
        if (error.kind() == ErrorKind::invalid_input) throw;
        result.error = error.what();  // a required sandbox missing on this node: data, as here
    }
    // A job cancelled or preempted (SIGTERM from Slurm) writes no result: the call's result is
    // the one of the attempt that runs to its end, submitted again by the orchestrator.
    throw_if_interrupted();
    write_file_atomically(result_file, to_json(result).dump());
}

}  // namespace npuopt::proc
