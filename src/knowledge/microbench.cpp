#include "knowledge/microbench.hpp"

#include "numerics/robust.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <chrono>
#include <exception>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/interrupt.hpp"
#include "target/toolchain.hpp"
#include "core/log.hpp"

namespace npuopt::knowledge {
namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string read_text(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(ErrorKind::io, fmt::format("cannot read probe template {}", file.string()));
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

/// "bytes-4096_packet-256": a file-name-safe rendering of a design point.
std::string point_label(const config::ProbeParams& params) {
    std::string label;
    for (const auto& [name, value] : params) {
        if (!label.empty()) label += "_";
        label += fmt::format("{}-{}", name, value);
    }
    return label.empty() ? "default" : label;
}

/// A unit of work: one point, or a monotone probe's points in order.
struct Task {
    const config::ProbeSpec* probe = nullptr;
    std::vector<std::size_t> point_indices;
};

class SuiteRunner {
public:
    SuiteRunner(const config::TargetConfig& target, const config::MicrobenchSuite& suite,
                const MicrobenchOptions& options, fs::path work_dir, std::size_t total)
        : m_target(target), m_suite(suite), m_options(options), m_work_dir(std::move(work_dir)), m_total(total) {}

    void run_point(const config::ProbeSpec& probe, const std::string& template_text, MicrobenchPoint& point) const {
        const auto start = std::chrono::steady_clock::now();
        std::map<std::string, std::string> values = {{"kernel", probe.kernel}};
        for (const auto& [name, value] : point.params) values[name] = std::to_string(value);
        const std::string source = instantiate_probe(template_text, values, probe.file);
        point.source_sha256 = sha256_hex(source);
        const fs::path dir = m_work_dir / probe.name;
        fs::create_directories(dir);
        const fs::path file = dir / fmt::format("{}__{}{}", probe.name, point_label(point.params), probe.file.extension().string());
        {
            std::ofstream out(file, std::ios::binary | std::ios::trunc);
            out << source;
            if (!out) throw Error(ErrorKind::io, fmt::format("cannot write probe instance {}", file.string()));
        }

        config::TargetConfig target = m_target;
        target.toolchain.run.timeout_secs = probe.timeout_secs;
        target::Toolchain toolchain(std::move(target), m_options.sandbox, m_options.limits);
        target::RunRequest request;
        request.file = file;
        request.kernel = probe.kernel;
        request.seed = point.seed;
        request.repeat = probe.repeats;
        request.shape = m_suite.shape;

        for (int attempt = 0; attempt <= probe.retries; ++attempt) {
            throw_if_interrupted();
            point.attempts = attempt + 1;
            target::RunResult result = toolchain.run(request);
            point.diagnostic_codes.clear();
            for (const auto& diagnostic : result.diagnostics) point.diagnostic_codes.push_back(diagnostic.code);
            const auto status = result.call.status;
            if (status == target::CallStatus::ok && !result.cycles.empty()) {
                point.status = PointStatus::ok;
                point.cycles = result.cycles;
                point.cycles_median = numerics::median(point.cycles);
                point.cycles_mad = numerics::mad(point.cycles);
                point.message.clear();
                break;
            }
            if (status == target::CallStatus::not_started) {
                throw Error(ErrorKind::toolchain, fmt::format("microbenchmark '{}': the toolchain could not be started: {}",
                                                              probe.name, result.call.message));
            }
            point.message = result.call.message;
            if (status == target::CallStatus::timed_out) {
                point.status = PointStatus::timed_out;
                point.message = fmt::format("no answer within {} s (the device may hang on this design)", probe.timeout_secs);
                break;
            }
            point.status = PointStatus::failed;
            if (status != target::CallStatus::transient) break;  // only transient failures are retried
        }
        point.wall_secs = seconds_since(start);
    }

    void run_task(const Task& task, std::vector<MicrobenchPoint>& points, const std::string& template_text) {
        bool stop = false;
        for (std::size_t point_idx : task.point_indices) {
            MicrobenchPoint& point = points[point_idx];
            if (stop) {
                point.status = PointStatus::skipped;
                point.message = "a smaller point of this monotone probe failed";
            } else {
                run_point(*task.probe, template_text, point);
                if (task.probe->monotone_failure && point.status != PointStatus::ok) stop = true;
            }
            std::lock_guard lock(m_callback_mutex);
            ++m_done;
            if (m_options.on_point) m_options.on_point(point);
            if (m_options.on_count) m_options.on_count(m_done, m_total);
        }
    }

private:
    const config::TargetConfig& m_target;
    const config::MicrobenchSuite& m_suite;
    const MicrobenchOptions& m_options;
    fs::path m_work_dir;
    std::mutex m_callback_mutex;
    std::size_t m_total = 0;
    std::size_t m_done = 0;  ///< under m_callback_mutex
};

}  // namespace

std::string_view point_status_name(PointStatus status) {
    switch (status) {
        case PointStatus::ok: return "ok";
        case PointStatus::failed: return "failed";
        case PointStatus::timed_out: return "timed_out";
        case PointStatus::skipped: return "skipped";
    }
    return "skipped";
}

std::optional<PointStatus> parse_point_status(std::string_view name) {
    for (auto status : {PointStatus::ok, PointStatus::failed, PointStatus::timed_out, PointStatus::skipped}) {
        if (point_status_name(status) == name) return status;
    }
    return std::nullopt;
}

std::vector<const MicrobenchPoint*> MicrobenchRun::points_measuring(std::string_view measures) const {
    std::vector<const MicrobenchPoint*> selected;
    for (const auto& point : points) {
        if (point.measures == measures) selected.push_back(&point);
    }
    return selected;
}

nlohmann::json to_json(const MicrobenchPoint& point) {
    return {{"probe", point.probe},
            {"measures", point.measures},
            {"params", point.params},
            {"status", point_status_name(point.status)},
            {"cycles", point.cycles},
            {"cycles_median", point.cycles_median},
            {"cycles_mad", point.cycles_mad},
            {"attempts", point.attempts},
            {"seed", point.seed},
            {"message", point.message},
            {"diagnostic_codes", point.diagnostic_codes},
            {"source_sha256", point.source_sha256},
            {"wall_secs", point.wall_secs}};
}

nlohmann::json to_json(const MicrobenchRun& run) {
    nlohmann::json points = nlohmann::json::array();
    for (const auto& point : run.points) points.push_back(to_json(point));
    return {{"target", run.target},
            {"toolchain_name", run.toolchain_name},
            {"toolchain_version", run.toolchain_version},
            {"suite_file", run.suite_file.string()},
            {"wall_secs", run.wall_secs},
            {"points", points}};
}

MicrobenchRun microbench_run_from_json(const nlohmann::json& json) {
    try {
        MicrobenchRun run;
        run.target = json.at("target").get<std::string>();
        run.toolchain_name = json.value("toolchain_name", "");
        run.toolchain_version = json.value("toolchain_version", "");
        run.suite_file = json.value("suite_file", "");
        run.wall_secs = json.value("wall_secs", 0.0);
        for (const auto& item : json.at("points")) {
            MicrobenchPoint point;
            point.probe = item.at("probe").get<std::string>();
            point.measures = item.at("measures").get<std::string>();
            point.params = item.at("params").get<config::ProbeParams>();
            auto status = parse_point_status(item.at("status").get<std::string>());
            if (!status) throw Error(ErrorKind::invalid_input, fmt::format("unknown point status '{}'", item.at("status").dump()));
            point.status = *status;
            point.cycles = item.value("cycles", std::vector<double>{});
            point.cycles_median = item.value("cycles_median", 0.0);
            point.cycles_mad = item.value("cycles_mad", 0.0);
            point.attempts = item.value("attempts", 0);
            point.seed = item.value("seed", std::uint64_t{0});
            point.message = item.value("message", "");
            point.diagnostic_codes = item.value("diagnostic_codes", std::vector<std::string>{});
            point.source_sha256 = item.value("source_sha256", "");
            point.wall_secs = item.value("wall_secs", 0.0);
            run.points.push_back(std::move(point));
        }
        return run;
    } catch (const nlohmann::json::exception& error) {
        throw Error(ErrorKind::invalid_input, fmt::format("microbenchmark results: {}", error.what()));
    }
}

std::string instantiate_probe(const std::string& text, const std::map<std::string, std::string>& values,
                              const fs::path& template_file) {
    std::string out;
    out.reserve(text.size());
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t open = text.find("${", pos);
        if (open == std::string::npos) break;
        std::size_t close = text.find('}', open + 2);
        if (close == std::string::npos) break;
        std::string name = text.substr(open + 2, close - open - 2);
        auto value = values.find(name);
        if (value == values.end()) {
            throw Error(ErrorKind::invalid_config,
                        fmt::format("probe template {}: no value for placeholder ${{{}}}", template_file.string(), name));
        }
        out.append(text, pos, open - pos);
        out += value->second;
        pos = close + 1;
    }
    out.append(text, pos, std::string::npos);
    return out;
}

MicrobenchRun run_microbench_suite(const config::TargetConfig& target, const config::MicrobenchSuite& suite,
                                   const MicrobenchOptions& options) {
    const auto start = std::chrono::steady_clock::now();
    for (const auto& name : options.only_probes) {
        bool known = std::any_of(suite.probes.begin(), suite.probes.end(), [&](const auto& probe) { return probe.name == name; });
        if (!known) throw Error(ErrorKind::invalid_input, fmt::format("no probe named '{}' in {}", name, suite.file.string()));
    }

    // The work dir: the caller's, or a fresh temp dir removed at the end.
    fs::path work_dir = options.work_dir;
    bool remove_work_dir = false;
    if (work_dir.empty()) {
        std::string pattern = (fs::temp_directory_path() / "npuopt-microbench-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) {
            throw Error(ErrorKind::io, fmt::format("cannot create a work directory {}", pattern));
        }
        work_dir = pattern;
        remove_work_dir = true;
    }
    fs::create_directories(work_dir);
    struct Cleanup {
        fs::path path;
        bool active;
        ~Cleanup() {
            std::error_code ignored;
            if (active) fs::remove_all(path, ignored);
        }
    } cleanup{work_dir, remove_work_dir};

    MicrobenchRun run;
    run.target = target.name;
    run.suite_file = suite.file;
    {
        target::Toolchain toolchain(target, options.sandbox, options.limits);
        auto version = toolchain.version();
        if (version.call.status != target::CallStatus::ok) {
            throw Error(ErrorKind::toolchain, fmt::format("target '{}': cannot read the toolchain version: {}", target.name,
                                                          version.call.message));
        }
        run.toolchain_name = version.name;
        run.toolchain_version = version.version;
    }

    std::vector<Task> tasks;
    std::map<const config::ProbeSpec*, std::string> templates;
    for (const auto& probe : suite.probes) {
        if (!options.only_probes.empty() &&
            std::find(options.only_probes.begin(), options.only_probes.end(), probe.name) == options.only_probes.end()) {
            continue;
        }
        templates[&probe] = read_text(probe.file);
        Task monotone{&probe, {}};
        for (auto& params : config::expand_probe_sweep(probe)) {
            MicrobenchPoint point;
            point.probe = probe.name;
            point.measures = probe.measures;
            point.params = std::move(params);
            point.seed = options.seed + run.points.size();
            run.points.push_back(std::move(point));
            if (probe.monotone_failure) {
                monotone.point_indices.push_back(run.points.size() - 1);
            } else {
                tasks.push_back({&probe, {run.points.size() - 1}});
            }
        }
        if (!monotone.point_indices.empty()) tasks.insert(tasks.begin(), std::move(monotone));  // long chains first
    }

    SuiteRunner runner(target, suite, options, work_dir, run.points.size());
    std::atomic<std::size_t> next_task{0};
    std::mutex error_mutex;
    std::exception_ptr first_error;
    auto worker = [&] {
        while (true) {
            {
                std::lock_guard lock(error_mutex);
                if (first_error) return;
            }
            std::size_t task_idx = next_task.fetch_add(1);
            if (task_idx >= tasks.size()) return;
            try {
                runner.run_task(tasks[task_idx], run.points, templates.at(tasks[task_idx].probe));
            } catch (...) {
                std::lock_guard lock(error_mutex);
                if (!first_error) first_error = std::current_exception();
                return;
            }
        }
    };
    const int workers = std::clamp(options.parallel, 1, 64);
    std::vector<std::thread> threads;
    for (int worker_idx = 0; worker_idx < workers; ++worker_idx) threads.emplace_back(worker);
    for (auto& thread : threads) thread.join();
    if (first_error) std::rethrow_exception(first_error);

    run.wall_secs = seconds_since(start);
    return run;
}

}  // namespace npuopt::knowledge
