#include "eval/judge.hpp"

#include <fmt/format.h>

#include <array>
#include <optional>

namespace npuopt::eval {

JudgeReport run_race(std::shared_ptr<const SequentialDesign> design, const RaceConfig& config,
                     const Launcher& launcher, const LaunchObserver& observer) {
    JudgeReport report;
    Race race(std::move(design), config);
    while (auto plan = race.next_pair()) {
        PairOutcome outcome;
        std::array<std::optional<double>, 2> wall_ms;
        for (std::size_t position = 0; position < 2; ++position) {
            const Side side = plan->order[position];
            JudgedLaunch launch = launcher(side, plan->input_seed);
            report.device_secs += launch.device_secs;
            wall_ms[position] = launch.wall_ms;
            if (launch.result.secs && !launch.result.error) {
                (side == Side::champion ? report.champion_cycles : report.candidate_cycles).push_back(*launch.result.secs);
            }
            (side == Side::champion ? outcome.champion : outcome.candidate) = std::move(launch.result);
        }
        const std::size_t seen = race.observations().size();
        race.record_pair(*plan, outcome);
        report.wall_ms.push_back(wall_ms[0]);
        report.wall_ms.push_back(wall_ms[1]);
        if (observer) {
            const auto observations = race.observations();
            for (std::size_t idx = seen; idx < observations.size(); ++idx) {
                observer(idx, observations[idx], idx < report.wall_ms.size() ? report.wall_ms[idx] : std::nullopt);
            }
        }
    }
    report.verdict = race.verdict();
    report.observations.assign(race.observations().begin(), race.observations().end());
    return report;
}

std::string incorrect_reason(const target::RunResult& result) {
    if (!result.verify) {
        return "incorrect: a correctness check was requested and the launch reported no verify line";
    }
    if (!result.verify->passed) {
        return fmt::format("incorrect: the device's check failed ({} of {} elements mismatched, {} non-finite, max abs "
                           "err {:.4g})",
                           result.verify->mismatches, result.verify->elements, result.verify->nonfinite,
                           result.verify->max_abs_err);
    }
    return {};
}

JudgedLaunch to_judged_launch(const target::RunResult& result, bool checked) {
    JudgedLaunch launch;
    launch.device_secs = result.call.process.wall_secs;
    launch.wall_ms = result.call.process.wall_secs * 1000.0;
    const auto status = result.call.status;
    // A transient failure (nothing ran to completion) is retried whatever the check says.
    const bool transient_status = status == target::CallStatus::transient || status == target::CallStatus::crashed;
    if (checked && !transient_status && status != target::CallStatus::timed_out) {
        if (auto why = incorrect_reason(result); !why.empty()) {
            launch.result = LaunchResult::failed(why, false);
            launch.result.incorrect = true;
            return launch;
        }
    }
    if (status == target::CallStatus::ok && !result.cycles.empty()) {
        launch.result = LaunchResult::timed(result.cycles.front());
        return launch;
    }
    const bool transient = status == target::CallStatus::transient || status == target::CallStatus::crashed;
    std::string message = result.call.message.empty() ? std::string(target::call_status_name(status))
                                                      : result.call.message;
    if (status == target::CallStatus::ok) message = "the run printed no cycles";
    launch.result = LaunchResult::failed(fmt::format("{}: {}", target::call_status_name(status), message), transient);
    return launch;
}

Judge::Judge(const target::Runner& runner, std::shared_ptr<const SequentialDesign> design)
    : m_runner(&runner), m_design(std::move(design)) {}

JudgedLaunch Judge::launch(const LaunchSpec& spec, std::uint64_t seed, bool check) const {
    target::RunRequest request;
    request.file = spec.file;
    request.kernel = spec.kernel;
    request.seed = seed;
    request.repeat = 1;
    request.check = check;
    request.shape = spec.shape;
    request.extra_args = spec.extra_args;
    return to_judged_launch(m_runner->run(request), check);
}

JudgeReport Judge::race(const LaunchSpec& champion, const LaunchSpec& candidate, const RaceConfig& config,
                        const LaunchObserver& observer, const CheckChooser& check) const {
    return run_race(
        m_design, config,
        [&](Side side, std::uint64_t seed) {
            const bool checked = check ? check(side) : true;
            return launch(side == Side::champion ? champion : candidate, seed, checked);
        },
        observer);
}

}  // namespace npuopt::eval
