#include "eval/launch_log.hpp"

#include <fmt/format.h>

namespace npuopt::eval {

target::RunResult LaunchLog::run(const target::Runner& runner, const target::RunRequest& request, int max_retries,
                                 double& device_secs, const LaunchGate& gate, std::string_view side) {
    target::RunResult result;
    for (int attempt = 0; attempt <= max_retries; ++attempt) {
        if (!gate()) {
            m_budget_stopped = true;
            result = target::RunResult{};
            result.call.status = target::CallStatus::not_started;
            result.call.message = "the device-run budget is spent";
            return result;
        }
        result = runner.run(request);
        device_secs += result.call.process.wall_secs;
        add(result, request.seed, attempt, side);
        if (result.call.status != target::CallStatus::transient) return result;
    }
    return result;
}

void LaunchLog::add(const target::RunResult& result, std::uint64_t seed, int attempt, std::string_view side) {
    store::MeasurementRecord row;
    row.side = std::string(side);
    row.launch_order = m_launches++;
    row.seed = static_cast<std::int64_t>(seed);
    row.attempt = attempt;
    row.wall_ms = result.call.process.wall_secs * 1000.0;
    if (attempt > 0) ++m_retries;
    if (result.call.status == target::CallStatus::ok && !result.cycles.empty()) {
        for (std::size_t repeat_idx = 0; repeat_idx < result.cycles.size(); ++repeat_idx) {
            row.repeat_idx = static_cast<std::int64_t>(repeat_idx);
            row.cycles = result.cycles[repeat_idx];
            m_rows.push_back(row);
        }
        return;
    }
    ++m_failed;
    const bool transient = result.call.status == target::CallStatus::transient;
    m_transient += transient ? 1 : 0;
    row.outcome = transient ? "transient" : "failed";
    row.error = result.call.status == target::CallStatus::ok ? "the run printed no cycles" : run_failure(result);
    m_rows.push_back(row);
}

std::string first_error(const std::vector<target::Diagnostic>& diagnostics) {
    for (const auto& diagnostic : diagnostics) {
        if (diagnostic.level == "error") {
            std::string text = fmt::format("{} {}", diagnostic.code, diagnostic.message);
            if (diagnostic.span) text += fmt::format(" ({}:{})", diagnostic.span->file, diagnostic.span->line);
            return text;
        }
    }
    return {};
}

std::string transient_note(std::int64_t transient_failures) {
    return transient_failures == 0 ? std::string()
                                   : fmt::format("; {} transient failure(s) retried", transient_failures);
}

std::string call_failure(const target::CallInfo& call, const std::vector<target::Diagnostic>& diagnostics) {
    if (call.status == target::CallStatus::timed_out) return "hang: " + call.message;
    std::string text = fmt::format("{}: {}", target::call_status_name(call.status), call.message);
    if (auto error = first_error(diagnostics); !error.empty()) text += " — " + error;
    return text;
}

std::string run_failure(const target::RunResult& result) { return call_failure(result.call, result.diagnostics); }

}  // namespace npuopt::eval
