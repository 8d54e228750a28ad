// The evaluation cascade (cascade.hpp): each stage runs, is recorded in one store transaction,
// and either passes the candidate on or ends the evaluation with a reason.
//
//   rules ─► estimate ─► compile ─► correctness ─────────────► screen ─────► race ─► accept
//   reject   skip        fail       fail (anti-gaming check)   reject        reject / inconclusive
//                                   suspect (speed of light)   suspect       suspect

#include "eval/cascade.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "core/error.hpp"
#include "eval/anti_gaming.hpp"
#include "eval/check_plan.hpp"
#include "eval/judge.hpp"
#include "eval/seed_stream.hpp"
#include "eval/speed_of_light.hpp"
#include "eval/stats.hpp"

namespace npuopt::eval {

std::string stage_name(Stage stage) {
    switch (stage) {
        case Stage::rules: return "rules";
        case Stage::estimate: return "estimate";
        case Stage::compile: return "compile";
        case Stage::correctness: return "correctness";
        case Stage::screen: return "screen";
        case Stage::race: return "race";
    }
    return "rules";
}

CascadeConfig CascadeConfig::strict(CascadeConfig base) {
    const SequentialConfig preset = SequentialConfig::strict();
    base.acceptance.alpha = std::min(base.acceptance.alpha, preset.alpha);
    // The campaign's cap on a race (max_runs_per_race) is the user's: the strict phase asks for
    // more evidence before an accept (smaller alpha, a later first look), not for longer races.
    base.acceptance.min_pairs = std::min(std::max(base.acceptance.min_pairs, preset.min_pairs), base.acceptance.max_pairs);
    base.screen_slack = std::min(base.screen_slack, 1.25);
    base.exploration_allowance = base.exploration_allowance / 2.0;
    base.correctness_seeds = std::max(base.correctness_seeds, 3);
    base.screen_runs = std::max(base.screen_runs, 2);
    base.screen_max_ratio = std::max(base.screen_max_ratio, 0.995);
    return base;
}

namespace {

using Clock = std::chrono::steady_clock;

double secs_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

bool same_sequential_config(const SequentialConfig& a, const SequentialConfig& b) {
    return a.alpha == b.alpha && a.beta == b.beta && a.min_effect == b.min_effect && a.min_pairs == b.min_pairs &&
           a.max_pairs == b.max_pairs && a.looks == b.looks && a.accept_spending == b.accept_spending &&
           a.reject_spending == b.reject_spending && a.interval_level == b.interval_level &&
           a.accept_null_fraction == b.accept_null_fraction && a.calibration_paths == b.calibration_paths &&
           a.calibration_seed == b.calibration_seed;
}

knowledge::Quantities rule_inputs(const Candidate& candidate) {
    knowledge::Quantities merged = candidate.quantities;
    for (const auto& [name, value] : candidate.features) merged.emplace(name, value);
    return merged;
}

knowledge::DesignRef design_ref(const Candidate& candidate) {
    return {candidate.content_hash, candidate.source_file, candidate.quantities};
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

/// The device launches of one stage, failed ones included, as the store's measurement rows.
class LaunchLog {
public:
    /// Run `request`, retrying while it fails transiently (at most `max_retries` times); every
    /// attempt is logged. `start_launch` is asked before each attempt: false (the device-run
    /// budget is spent) ends the call with status not_started and budget_stopped() set.
    target::RunResult run(const target::Toolchain& toolchain, const target::RunRequest& request, int max_retries,
                          double& device_secs, const std::function<bool()>& start_launch) {
        target::RunResult result;
        for (int attempt = 0; attempt <= max_retries; ++attempt) {
            if (!start_launch()) {
                m_budget_stopped = true;
                result = target::RunResult{};
                result.call.status = target::CallStatus::not_started;
                result.call.message = "the device-run budget is spent";
                return result;
            }
            result = toolchain.run(request);
            device_secs += result.call.process.wall_secs;
            add(result, request.seed, attempt);
            if (result.call.status != target::CallStatus::transient) return result;
        }
        return result;
    }

    std::int64_t launches() const { return m_launches; }
    std::int64_t failed() const { return m_failed; }
    std::int64_t retries() const { return m_retries; }
    std::int64_t transient_failures() const { return m_transient; }
    bool budget_stopped() const { return m_budget_stopped; }
    const std::vector<store::MeasurementRecord>& rows() const { return m_rows; }

private:
    void add(const target::RunResult& result, std::uint64_t seed, int attempt) {
        store::MeasurementRecord row;
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

    std::vector<store::MeasurementRecord> m_rows;
    std::int64_t m_launches = 0;
    std::int64_t m_failed = 0;
    std::int64_t m_retries = 0;
    std::int64_t m_transient = 0;
    bool m_budget_stopped = false;
};

/// A stage record's verdict, reason, time and launch counts into its store row.
void copy_outcome(const StageRecord& record, store::EvaluationRecord& row) {
    row.verdict = record.verdict;
    row.reason = record.reason;
    row.secs = record.secs;
    row.launches = record.device_runs;
    row.failed_launches = record.failed_launches;
    row.retries = record.retries;
}

/// One launch of a race as a measurement row (`launch_idx`: its place in the race's launch order).
store::MeasurementRecord race_row(std::size_t launch_idx, const Observation& observation, std::optional<double> wall_ms) {
    store::MeasurementRecord row;
    row.launch_order = static_cast<std::int64_t>(launch_idx);
    row.seed = static_cast<std::int64_t>(observation.input_seed);
    row.wall_ms = wall_ms;
    row.side = std::string(side_name(observation.side));
    row.attempt = static_cast<std::int64_t>(observation.attempt);
    row.pair_idx = static_cast<std::int64_t>(observation.pair_idx);
    if (observation.error) {
        row.outcome = observation.transient ? "transient" : "failed";
        row.error = *observation.error;
    } else {
        row.cycles = observation.secs;
    }
    return row;
}

/// Appends every launch of a race to its side's evaluation row as soon as it completes (a side
/// without a row, e.g. an unrecorded design, is not persisted).
LaunchObserver persist_launches(store::CampaignStore& store, std::optional<std::int64_t> candidate_row,
                                std::optional<std::int64_t> champion_row) {
    return [&store, candidate_row, champion_row](std::size_t launch_idx, const Observation& observation,
                                                 std::optional<double> wall_ms) {
        const auto& row = observation.side == Side::candidate ? candidate_row : champion_row;
        if (row) store.append_measurement(*row, race_row(launch_idx, observation, wall_ms));
    };
}

/// Launch counts of a race for its stage record: every launch, the failed ones, the retries.
void count_race_launches(const JudgeReport& report, StageRecord& record) {
    record.device_runs = static_cast<std::int64_t>(report.observations.size());
    record.failed_launches = std::count_if(report.observations.begin(), report.observations.end(),
                                           [](const Observation& observation) { return observation.error.has_value(); });
    record.retries = std::count_if(report.observations.begin(), report.observations.end(),
                                   [](const Observation& observation) { return observation.attempt > 0; });
}

/// Bytes the kernel must move: the caller's figure, else computed from kernels.yaml's tensors.
double min_bytes(const KernelContext& kernel) {
    if (kernel.min_bytes_moved > 0.0 || kernel.spec.tensors.empty()) return kernel.min_bytes_moved;
    try {
        return kernel_min_bytes(kernel.spec, kernel.shape);
    } catch (const Error&) {
        return 0.0;  // an unknown dtype or dimension: no bound rather than a wrong one
    }
}

}  // namespace

Cascade::Cascade(const target::Toolchain& toolchain, store::CampaignStore& store, knowledge::RuleBook* rules,
                 const knowledge::HardwareModel* model, CascadeConfig config)
    : m_toolchain(&toolchain), m_store(&store), m_rules(rules), m_model(model), m_config(std::move(config)) {}

std::shared_ptr<const SequentialDesign> Cascade::sequential_design() {
    if (!m_sequential_design || !same_sequential_config(m_sequential_config, m_config.acceptance)) {
        m_sequential_design = std::make_shared<const SequentialDesign>(make_sequential_design(m_config.acceptance));
        m_sequential_config = m_config.acceptance;
    }
    return m_sequential_design;
}

std::optional<std::int64_t> Cascade::toolchain_version_id() {
    if (!m_toolchain_version_id) {
        const auto version = m_toolchain->version();
        if (version.call.status == target::CallStatus::ok) {
            m_toolchain_version_id =
                m_store->record_toolchain_version(m_toolchain->target().name, version.name, version.version);
        } else {
            m_toolchain_version_id = std::optional<std::int64_t>();
        }
    }
    return *m_toolchain_version_id;
}

std::string Cascade::bench_config_hash(const KernelContext& kernel) const {
    const auto& acceptance = m_config.acceptance;
    std::string text = fmt::format(
        "kernel={};shape={};alpha={};beta={};min_effect={};pairs={}..{};null={};seeds={};screen={}x{};slack={};"
        "explore={};retries={};priming={};magnitude={};sol={};extra={};checked={}",
        kernel.spec.name, target::format_shape(kernel.shape), acceptance.alpha, acceptance.beta, acceptance.min_effect,
        acceptance.min_pairs, acceptance.max_pairs, acceptance.accept_null_fraction, m_config.correctness_seeds,
        m_config.screen_runs, m_config.screen_max_ratio, m_config.screen_slack, m_config.exploration_allowance,
        m_config.transient_retries, m_config.priming_seed ? fmt::format("{}", *m_config.priming_seed) : "derived",
        m_config.magnitude_factor,
        m_config.speed_of_light_tolerance, fmt::join(m_config.run_extra_args, " "), m_config.check_fraction);
    return fmt::format("{:016x}", fnv1a(text));
}

std::int64_t Cascade::record_stage(const Candidate& candidate, const StageRecord& record, const KernelContext& kernel,
                                   const std::vector<store::MeasurementRecord>& measurements) {
    store::EvaluationRecord evaluation;
    evaluation.design_id = candidate.design_id;
    evaluation.toolchain_version_id = toolchain_version_id();
    evaluation.bench_config_hash = bench_config_hash(kernel);
    evaluation.stage = stage_name(record.stage);
    copy_outcome(record, evaluation);
    return m_store->record_evaluation(evaluation, measurements);
}

std::int64_t Cascade::begin_stage(const Candidate& candidate, Stage stage, const KernelContext& kernel,
                                  const std::string& reason) {
    StageRecord running{stage, "running", reason, 0.0, 0, 0, 0};
    return record_stage(candidate, running, kernel, {});
}

void Cascade::complete_stage(std::int64_t evaluation_id, const StageRecord& record) {
    store::EvaluationRecord final_record;
    copy_outcome(record, final_record);
    m_store->complete_evaluation(evaluation_id, final_record);
}

bool Cascade::start_launch() {
    if (m_allowance && m_launches_started >= *m_allowance) return false;
    ++m_launches_started;
    if (m_launch_hook) m_launch_hook();
    return true;
}

std::uint64_t Cascade::priming_seed(const Candidate& candidate) const {
    return m_config.priming_seed ? *m_config.priming_seed : derive_seed(m_config.seed, candidate.content_hash, "priming");
}

double Cascade::speed_of_light_cycles(const KernelContext& kernel) const {
    return speed_of_light(m_model, min_bytes(kernel)).cycles;
}

Cascade::Estimate Cascade::estimate_cycles(const Candidate& design, const KernelContext& kernel, bool mine) {
    Estimate estimate;
    if (design.predicted_cycles) {
        estimate.cycles = design.predicted_cycles;
        return estimate;
    }
    if (auto cached = m_estimate_cache.find(design.content_hash); cached != m_estimate_cache.end()) {
        estimate.cycles = cached->second;
        return estimate;
    }
    const auto schedule = m_toolchain->schedule(design.source_file, kernel.spec.name, kernel.shape);
    if (schedule.call.status == target::CallStatus::ok && schedule.cycles) {
        m_estimate_cache[design.content_hash] = *schedule.cycles;
        estimate.cycles = schedule.cycles;
        return estimate;
    }
    if (mine && m_rules && !schedule.diagnostics.empty()) {
        m_rules->mine_diagnostics(schedule.diagnostics, design_ref(design), "schedule");
    }
    estimate.why = first_error(schedule.diagnostics);
    estimate.illegal = !estimate.why.empty();
    if (estimate.why.empty()) estimate.why = call_failure(schedule.call, schedule.diagnostics);
    return estimate;
}

Outcome Cascade::evaluate(const Candidate& candidate, const std::optional<Champion>& champion,
                          const KernelContext& kernel) {
    if (candidate.design_id <= 0) {
        throw Error(ErrorKind::internal,
                    fmt::format("cascade: candidate {} has no design id; record the design in the store first",
                                candidate.content_hash));
    }
    Outcome outcome;
    m_launches_started = 0;
    const auto may_launch = [this] { return start_launch(); };
    auto finish_stage = [&](Stage stage, std::string verdict, std::string reason, Clock::time_point start,
                            const LaunchLog* launches = nullptr) {
        StageRecord record{stage, std::move(verdict), std::move(reason), secs_since(start), 0, 0, 0};
        if (launches) {
            record.device_runs = launches->launches();
            record.failed_launches = launches->failed();
            record.retries = launches->retries();
            outcome.device_runs += launches->launches();
        }
        record_stage(candidate, record, kernel, launches ? launches->rows() : std::vector<store::MeasurementRecord>{});
        outcome.stages.push_back(record);
        outcome.final_reason = fmt::format("{}: {}: {}", stage_name(stage), record.verdict, record.reason);
    };
    const SpeedOfLight bound = speed_of_light(m_model, min_bytes(kernel));
    const knowledge::DesignRef design = design_ref(candidate);

    // ---- rules: learnt legality rules on the declared quantities, nothing compiled ---------------
    {
        const auto start = Clock::now();
        if (m_rules == nullptr) {
            finish_stage(Stage::rules, "skip", "no rule book", start);
        } else {
            const auto violations = m_rules->check_quantities(rule_inputs(candidate));
            if (!violations.empty()) {
                std::vector<std::string> texts;
                for (const auto& violation : violations) {
                    texts.push_back(fmt::format("{} = {:g} violates {}", violation.quantity, violation.value,
                                                violation.text));
                }
                finish_stage(Stage::rules, "reject", fmt::format("{}", fmt::join(texts, "; ")), start);
                return outcome;
            }
            finish_stage(Stage::rules, "pass", "no known rule is violated", start);
        }
    }

    // ---- estimate: cost model or static schedule against the champion's -------------------------
    {
        const auto start = Clock::now();
        const Estimate estimate = estimate_cycles(candidate, kernel, true);
        if (estimate.illegal) {
            finish_stage(Stage::estimate, "fail", fmt::format("the static schedule rejects the design: {}", estimate.why),
                         start);
            return outcome;
        }
        const std::optional<double>& predicted = estimate.cycles;
        const std::string& why = estimate.why;
        if (!predicted) {
            finish_stage(Stage::estimate, "pass", fmt::format("no estimate ({}); not screened", why), start);
        } else if (!champion) {
            finish_stage(Stage::estimate, "pass",
                         fmt::format("predicted {:.0f} cycles; no champion to compare with", *predicted), start);
        } else {
            const Estimate champion_estimate = estimate_cycles(champion->candidate, kernel, false);
            const std::optional<double>& champion_predicted = champion_estimate.cycles;
            const std::string& champion_why = champion_estimate.why;
            if (!champion_predicted || *champion_predicted <= 0.0) {
                finish_stage(Stage::estimate, "pass",
                             fmt::format("predicted {:.0f} cycles; the champion has no estimate ({})", *predicted,
                                         champion_why),
                             start);
            } else {
                const double ratio = *predicted / *champion_predicted;
                if (ratio > m_config.screen_slack) {
                    SeedStream stream(m_config.seed, candidate.content_hash, "exploration");
                    const double draw = stream.uniform();
                    if (draw >= m_config.exploration_allowance) {
                        finish_stage(Stage::estimate, "skip",
                                     fmt::format("predicted {:.0f} cycles, {:.2f}x the champion's {:.0f} (limit {:.2f}x; "
                                                 "exploration draw {:.3f} >= allowance {:.2f})",
                                                 *predicted, ratio, *champion_predicted, m_config.screen_slack, draw,
                                                 m_config.exploration_allowance),
                                     start);
                        return outcome;
                    }
                    finish_stage(Stage::estimate, "pass",
                                 fmt::format("predicted {:.2f}x the champion (limit {:.2f}x) but let through by the "
                                             "exploration allowance (draw {:.3f} < {:.2f})",
                                             ratio, m_config.screen_slack, draw, m_config.exploration_allowance),
                                 start);
                } else {
                    finish_stage(Stage::estimate, "pass",
                                 fmt::format("predicted {:.0f} cycles, {:.2f}x the champion's {:.0f}", *predicted, ratio,
                                             *champion_predicted),
                                 start);
                }
            }
        }
    }

    // ---- compile: the toolchain's check; diagnostics become rules, success demotes wrong ones ----
    {
        const auto start = Clock::now();
        target::CheckResult check;
        int transient_failures = 0;
        for (int attempt = 0; attempt <= m_config.transient_retries; ++attempt) {
            check = m_toolchain->check(candidate.source_file);
            if (check.call.status != target::CallStatus::transient) break;
            ++transient_failures;
        }
        std::string mined;
        if (m_rules && !check.diagnostics.empty()) {
            const auto rule_ids = m_rules->mine_diagnostics(check.diagnostics, design, "check");
            mined = fmt::format("; {} rule(s) learnt or reinforced", rule_ids.size());
        }
        if (check.ok && check.call.status == target::CallStatus::ok) {
            std::string demoted;
            if (m_rules) {
                const auto demoted_ids = m_rules->record_acceptance(rule_inputs(candidate), design);
                if (!demoted_ids.empty()) demoted = fmt::format("; {} over-strict rule(s) demoted", demoted_ids.size());
            }
            finish_stage(Stage::compile, "pass",
                         fmt::format("compiled in {:.2f} s{}{}{}", check.compile_secs, mined, demoted,
                                     transient_note(transient_failures)),
                         start);
        } else {
            const bool diagnosed = check.call.status == target::CallStatus::failed && !first_error(check.diagnostics).empty();
            const std::string verdict = diagnosed || check.call.status == target::CallStatus::failed ? "fail" : "error";
            std::string reason = diagnosed ? first_error(check.diagnostics)
                                           : fmt::format("{}: {}", target::call_status_name(check.call.status),
                                                         check.call.message);
            finish_stage(Stage::compile, verdict, reason + mined + transient_note(transient_failures), start);
            return outcome;
        }
    }

    // ---- correctness: priming launch, fresh seeds, a re-run; the toolchain's verify + anti-gaming -
    // Every correctness launch is timed too: the screen reuses their cycles, and a first launch
    // that is already far slower than the champion ends the evaluation after one device run.
    std::vector<double> checked_cycles;
    {
        const auto start = Clock::now();
        SeedStream stream(m_config.seed, candidate.content_hash, "correctness");
        const std::uint64_t priming = priming_seed(candidate);
        std::vector<std::uint64_t> seeds{priming};
        std::set<std::uint64_t> used{priming};
        while (static_cast<int>(seeds.size()) < 1 + std::max(2, m_config.correctness_seeds)) {
            const std::uint64_t seed = stream.next();
            if (used.insert(seed).second) seeds.push_back(seed);
        }
        seeds.push_back(seeds[1]);  // the first fresh seed again, after others ran: run-order check

        std::vector<CorrectnessRun> runs;
        LaunchLog launches;
        std::vector<double>& cycles = checked_cycles;
        for (std::size_t position = 0; position < seeds.size(); ++position) {
            target::RunRequest request;
            request.file = candidate.source_file;
            request.kernel = kernel.spec.name;
            request.seed = seeds[position];
            request.repeat = 1;
            request.check = true;
            request.shape = kernel.shape;
            request.extra_args = m_config.run_extra_args;
            const auto result =
                launches.run(*m_toolchain, request, m_config.transient_retries, outcome.device_secs, may_launch);
            if (launches.budget_stopped()) {
                outcome.budget_exhausted = true;
                finish_stage(Stage::correctness, "inconclusive",
                             fmt::format("the device-run budget is spent after {} of {} correctness launches",
                                         launches.launches(), seeds.size()),
                             start, &launches);
                return outcome;
            }
            if (result.call.status == target::CallStatus::ok) cycles.insert(cycles.end(), result.cycles.begin(), result.cycles.end());
            // A launch counts only when it ran to the end with its verify line: a passing verify
            // line from a launch that then failed (or printed no time) is no pass. A failing one
            // goes on to the anti-gaming checks, which name the way it is wrong.
            const bool ran = result.call.status == target::CallStatus::ok && !result.cycles.empty();
            if (!result.verify || (result.verify->passed && !ran)) {
                if (m_rules) m_rules->record_run_result(result, design, candidate.features);
                const std::string verdict = result.call.status == target::CallStatus::failed ||
                                                    result.call.status == target::CallStatus::timed_out
                                                ? "fail"
                                                : "error";
                std::string why = run_failure(result);
                if (result.call.status == target::CallStatus::ok && result.cycles.empty()) {
                    why = "the launch printed no cycles";
                } else if (result.call.status == target::CallStatus::ok) {
                    why = "the launch printed no verify line although a check was requested";
                }
                finish_stage(Stage::correctness, result.call.status == target::CallStatus::ok ? "fail" : verdict,
                             fmt::format("seed {} (launch {}): {}{}", seeds[position], position, why,
                                         transient_note(launches.transient_failures())),
                             start, &launches);
                return outcome;
            }
            runs.push_back({seeds[position], position, *result.verify});
            if (position == 0 && champion && champion->cycles_median > 0.0 && m_config.quick_reject_ratio > 0.0 &&
                !cycles.empty() && cycles.front() > m_config.quick_reject_ratio * champion->cycles_median) {
                outcome.cycles_median = cycles.front();
                outcome.champion_cycles_median = champion->cycles_median;
                finish_stage(Stage::screen, "reject",
                             fmt::format("first checked launch (seed {}) took {:.0f} cycles, {:.3f}x the champion's "
                                         "{:.0f} (quick-reject limit {:.2f}x): rejected after one launch{}",
                                         seeds[position], cycles.front(), cycles.front() / champion->cycles_median,
                                         champion->cycles_median, m_config.quick_reject_ratio,
                                         transient_note(launches.transient_failures())),
                             start, &launches);
                return outcome;
            }
        }
        const auto verdict = check_correctness_runs(runs, AntiGamingConfig{m_config.magnitude_factor});
        if (runs.size() != seeds.size()) {
            throw Error(ErrorKind::internal, fmt::format("cascade: {} of {} correctness launches verified and the stage "
                                                         "did not end", runs.size(), seeds.size()));
        }
        if (!verdict.passed()) {
            finish_stage(Stage::correctness, "fail", verdict.reason + transient_note(launches.transient_failures()),
                         start, &launches);
            return outcome;
        }
        outcome.correct = true;
        if (!cycles.empty()) {
            if (auto impossible = speed_of_light_violation(median(cycles), bound, m_config.speed_of_light_tolerance)) {
                finish_stage(Stage::correctness, "suspect", "speed_of_light: " + *impossible, start, &launches);
                return outcome;
            }
        }
        std::string notes = verdict.notes.empty() ? std::string() : fmt::format("; notes: {}", fmt::join(verdict.notes, "; "));
        finish_stage(Stage::correctness, "pass",
                     fmt::format("every output verified on {} launches (priming seed {}, {} fresh seeds, one re-run); "
                                 "fingerprints change with the inputs and reproduce{}{}",
                                 runs.size(), priming, seeds.size() - 2, notes,
                                 transient_note(launches.transient_failures())),
                     start, &launches);
    }

    // ---- screen: the correctness launches' cycles (+ screen_runs more); not faster is rejected --
    {
        const auto start = Clock::now();
        SeedStream stream(m_config.seed, candidate.content_hash, "screen");
        CheckPlan checks(m_config.check_fraction, m_config.seed, candidate.content_hash, "screen-check");
        LaunchLog launches;
        std::vector<double> cycles = checked_cycles;
        const int extra_runs = std::max(cycles.empty() ? 1 : 0, m_config.screen_runs);
        for (int run_idx = 0; run_idx < extra_runs; ++run_idx) {
            target::RunRequest request;
            request.file = candidate.source_file;
            request.kernel = kernel.spec.name;
            request.seed = stream.next();
            request.repeat = 1;
            request.check = checks.next();
            request.shape = kernel.shape;
            request.extra_args = m_config.run_extra_args;
            const auto result =
                launches.run(*m_toolchain, request, m_config.transient_retries, outcome.device_secs, may_launch);
            if (launches.budget_stopped()) {
                outcome.budget_exhausted = true;
                finish_stage(Stage::screen, "inconclusive",
                             fmt::format("the device-run budget is spent after {} screen launches", launches.launches()),
                             start, &launches);
                return outcome;
            }
            if (request.check && result.call.status != target::CallStatus::transient) {
                if (auto wrong = incorrect_reason(result); !wrong.empty()) {
                    outcome.correct = false;
                    finish_stage(Stage::screen, "fail",
                                 fmt::format("seed {}: {}{}", request.seed, wrong,
                                             transient_note(launches.transient_failures())),
                                 start, &launches);
                    return outcome;
                }
            }
            if (result.call.status != target::CallStatus::ok || result.cycles.empty()) {
                if (m_rules) m_rules->record_run_result(result, design, candidate.features);
                finish_stage(Stage::screen, result.call.status == target::CallStatus::transient ? "error" : "fail",
                             fmt::format("seed {}: {}{}", request.seed, run_failure(result),
                                         transient_note(launches.transient_failures())),
                             start, &launches);
                return outcome;
            }
            cycles.push_back(result.cycles.front());
        }
        const double screen_median = median(cycles);
        outcome.cycles_median = screen_median;
        if (auto impossible = speed_of_light_violation(screen_median, bound, m_config.speed_of_light_tolerance)) {
            finish_stage(Stage::screen, "suspect", "speed_of_light: " + *impossible, start, &launches);
            return outcome;
        }
        if (!champion) {
            outcome.accepted = true;
            finish_stage(Stage::screen, "accept",
                         fmt::format("median {:.0f} cycles over {} runs; no champion yet: the first correct design "
                                     "becomes the champion{}",
                                     screen_median, cycles.size(), transient_note(launches.transient_failures())),
                         start, &launches);
            return outcome;
        }
        outcome.champion_cycles_median = champion->cycles_median;
        const double ratio = champion->cycles_median > 0.0 ? screen_median / champion->cycles_median : 0.0;
        if (ratio > m_config.screen_max_ratio) {
            finish_stage(Stage::screen, "reject",
                         fmt::format("median {:.0f} cycles over {} runs is {:.3f}x the champion's {:.0f} (limit "
                                     "{:.2f}x){}",
                                     screen_median, cycles.size(), ratio, champion->cycles_median,
                                     m_config.screen_max_ratio, transient_note(launches.transient_failures())),
                         start, &launches);
            return outcome;
        }
        finish_stage(Stage::screen, "pass",
                     fmt::format("median {:.0f} cycles over {} runs, {:.3f}x the champion's {:.0f}{}", screen_median,
                                 cycles.size(), ratio, champion->cycles_median,
                                 transient_note(launches.transient_failures())),
                     start, &launches);
    }

    // ---- race: interleaved launches against the champion, the sequential test decides ------------
    {
        const auto start = Clock::now();
        const Judge judge(*m_toolchain, sequential_design());
        RaceConfig race_config;
        race_config.seed = SeedStream(m_config.seed, candidate.content_hash, "race").next();
        race_config.max_retries_per_pair = static_cast<std::size_t>(std::max(0, m_config.transient_retries));
        if (m_allowance) {
            const std::int64_t left = *m_allowance - m_launches_started;
            if (left < 2) {
                outcome.budget_exhausted = true;
                finish_stage(Stage::race, "inconclusive",
                             fmt::format("the device-run budget leaves {} launch(es), not enough for one pair of the race",
                                         std::max<std::int64_t>(0, left)),
                             start);
                return outcome;
            }
            race_config.max_launches = static_cast<std::size_t>(left);
        }
        CheckPlan race_checks(m_config.check_fraction, m_config.seed, candidate.content_hash, "race-check");
        const CheckChooser choose_check = [&](Side) {
            ++m_launches_started;  // the race never exceeds max_launches, set from the allowance
            if (m_launch_hook) m_launch_hook();
            return race_checks.next();
        };
        const LaunchSpec champion_spec{champion->candidate.source_file, kernel.spec.name, kernel.shape,
                                       m_config.run_extra_args};
        const LaunchSpec candidate_spec{candidate.source_file, kernel.spec.name, kernel.shape, m_config.run_extra_args};
        // Both rows exist before the first launch and every launch is appended as it completes: a
        // killed process leaves a "running" race with its completed launches (interrupted on resume).
        const std::int64_t candidate_row = begin_stage(
            candidate, Stage::race, kernel, fmt::format("racing design {} (in progress)", champion->candidate.design_id));
        std::optional<std::int64_t> champion_row;
        if (champion->candidate.design_id > 0) {
            champion_row = begin_stage(champion->candidate, Stage::race, kernel,
                                       fmt::format("raced by design {} (in progress)", candidate.design_id));
        }
        const JudgeReport report = judge.race(champion_spec, candidate_spec, race_config,
                                              persist_launches(*m_store, candidate_row, champion_row), choose_check);
        outcome.budget_exhausted = report.verdict.aborted && race_config.max_launches > 0 &&
                                   report.verdict.launches + 2 > race_config.max_launches;
        outcome.device_runs += static_cast<std::int64_t>(report.verdict.launches);
        outcome.device_secs += report.device_secs;
        if (!report.candidate_cycles.empty()) outcome.cycles_median = median(report.candidate_cycles);
        if (!report.champion_cycles.empty()) outcome.champion_cycles_median = median(report.champion_cycles);
        outcome.speedup = report.verdict.test.speedup;
        outcome.speedup_lower = report.verdict.test.speedup_interval.lower;
        outcome.speedup_upper = report.verdict.test.speedup_interval.upper;
        outcome.race_pairs = report.verdict.pairs_completed;

        const auto& verdict = report.verdict;
        StageRecord record{Stage::race, "", "", 0.0, 0, 0, 0};
        count_race_launches(report, record);
        std::string summary = fmt::format(
            "{} after {} pairs ({} launches, {} failed, {} retried): speedup {:.4f} [{:.4f}, {:.4f}], "
            "Z_accept {:.2f} vs {:.2f}, Z_reject {:.2f} vs {:.2f}; {}",
            decision_name(verdict.decision), verdict.pairs_completed, record.device_runs, record.failed_launches,
            record.retries, verdict.test.speedup, verdict.test.speedup_interval.lower,
            verdict.test.speedup_interval.upper, verdict.test.accept_statistic, verdict.test.accept_bound,
            verdict.test.reject_statistic, verdict.test.reject_bound, verdict.reason);
        std::string stage_verdict(decision_name(verdict.decision));
        if (verdict.candidate_incorrect) {
            outcome.correct = false;
            stage_verdict = "fail";
        }
        if (verdict.decision == Decision::accept && outcome.cycles_median) {
            if (auto impossible =
                    speed_of_light_violation(*outcome.cycles_median, bound, m_config.speed_of_light_tolerance)) {
                stage_verdict = "suspect";
                summary = "speed_of_light: " + *impossible + "; race: " + summary;
            }
        }
        outcome.accepted = stage_verdict == "accept";

        record.verdict = stage_verdict;
        record.reason = summary;
        record.secs = secs_since(start);
        auto transaction = m_store->database().transaction();
        complete_stage(candidate_row, record);
        if (champion_row) {
            StageRecord champion_record = record;
            champion_record.verdict = "champion";
            champion_record.reason = fmt::format("raced by design {}: {}", candidate.design_id, summary);
            complete_stage(*champion_row, champion_record);
        }
        transaction.commit();
        outcome.stages.push_back(record);
        outcome.final_reason = fmt::format("race: {}: {}", record.verdict, record.reason);
    }
    return outcome;
}

Outcome Cascade::revalidate(const Champion& champion, const Champion& predecessor, const KernelContext& kernel) {
    Outcome outcome;
    outcome.correct = true;
    const auto start = Clock::now();
    const Judge judge(*m_toolchain, sequential_design());
    RaceConfig race_config;
    race_config.seed = SeedStream(m_config.seed ^ static_cast<std::uint64_t>(m_store->list_evaluations(
                                                         champion.candidate.design_id, true).size()),
                                  champion.candidate.content_hash, "revalidate")
                           .next();
    race_config.max_retries_per_pair = static_cast<std::size_t>(std::max(0, m_config.transient_retries));
    m_launches_started = 0;
    if (m_allowance) {
        if (*m_allowance < 2) {
            outcome.budget_exhausted = true;
            outcome.final_reason = fmt::format(
                "race: inconclusive: re-validation skipped, the device-run budget leaves {} launch(es)",
                std::max<std::int64_t>(0, *m_allowance));
            return outcome;
        }
        race_config.max_launches = static_cast<std::size_t>(*m_allowance);
    }
    CheckPlan race_checks(m_config.check_fraction, race_config.seed, champion.candidate.content_hash,
                          "revalidate-check");
    const CheckChooser choose_check = [&](Side) {
        ++m_launches_started;
        if (m_launch_hook) m_launch_hook();
        return race_checks.next();
    };
    const LaunchSpec predecessor_spec{predecessor.candidate.source_file, kernel.spec.name, kernel.shape,
                                      m_config.run_extra_args};
    const LaunchSpec champion_spec{champion.candidate.source_file, kernel.spec.name, kernel.shape,
                                   m_config.run_extra_args};
    // The race's roles: the predecessor runs as its champion (A), the current champion as the candidate (B).
    std::optional<std::int64_t> champion_row;
    std::optional<std::int64_t> predecessor_row;
    if (champion.candidate.design_id > 0) {
        champion_row = begin_stage(champion.candidate, Stage::race, kernel,
                                   fmt::format("re-validation against design {} (in progress)",
                                               predecessor.candidate.design_id));
    }
    if (predecessor.candidate.design_id > 0) {
        predecessor_row = begin_stage(predecessor.candidate, Stage::race, kernel,
                                      fmt::format("raced by design {} (re-validation in progress)",
                                                  champion.candidate.design_id));
    }
    const JudgeReport report = judge.race(predecessor_spec, champion_spec, race_config,
                                          persist_launches(*m_store, champion_row, predecessor_row), choose_check);
    outcome.budget_exhausted = report.verdict.aborted && race_config.max_launches > 0 &&
                               report.verdict.launches + 2 > race_config.max_launches;
    outcome.device_runs = static_cast<std::int64_t>(report.verdict.launches);
    outcome.device_secs = report.device_secs;
    if (!report.candidate_cycles.empty()) outcome.cycles_median = median(report.candidate_cycles);
    if (!report.champion_cycles.empty()) outcome.champion_cycles_median = median(report.champion_cycles);
    outcome.speedup = report.verdict.test.speedup;
    outcome.speedup_lower = report.verdict.test.speedup_interval.lower;
    outcome.speedup_upper = report.verdict.test.speedup_interval.upper;
    outcome.race_pairs = report.verdict.pairs_completed;
    outcome.accepted = report.verdict.decision == Decision::accept;

    StageRecord record{Stage::race, std::string(decision_name(report.verdict.decision)), "", 0.0, 0, 0, 0};
    count_race_launches(report, record);
    const std::string summary = fmt::format(
        "re-validation against design {}: {} after {} pairs ({} launches, {} failed, {} retried): speedup {:.4f} "
        "[{:.4f}, {:.4f}]; {}",
        predecessor.candidate.design_id, decision_name(report.verdict.decision), report.verdict.pairs_completed,
        record.device_runs, record.failed_launches, record.retries, report.verdict.test.speedup,
        report.verdict.test.speedup_interval.lower, report.verdict.test.speedup_interval.upper, report.verdict.reason);
    record.reason = summary;
    record.secs = secs_since(start);
    auto transaction = m_store->database().transaction();
    if (champion_row) complete_stage(*champion_row, record);
    if (predecessor_row) {
        StageRecord predecessor_record = record;
        predecessor_record.verdict = "champion";
        predecessor_record.reason = fmt::format("raced by design {} ({})", champion.candidate.design_id, summary);
        complete_stage(*predecessor_row, predecessor_record);
    }
    transaction.commit();
    outcome.stages.push_back(record);
    outcome.final_reason = "race: " + record.verdict + ": " + summary;
    return outcome;
}

Cascade::Measured Cascade::measure(const Candidate& candidate, const KernelContext& kernel,
                                   const std::vector<std::uint64_t>& seeds) {
    Measured measured;
    measured.all_passed = !seeds.empty();
    const auto start = Clock::now();
    LaunchLog launches;
    double device_secs = 0.0;
    m_launches_started = 0;
    const auto may_launch = [this] { return start_launch(); };
    for (const std::uint64_t seed : seeds) {
        target::RunRequest request;
        request.file = candidate.source_file;
        request.kernel = kernel.spec.name;
        request.seed = seed;
        request.repeat = 1;
        request.check = true;
        request.shape = kernel.shape;
        request.extra_args = m_config.run_extra_args;
        const auto result = launches.run(*m_toolchain, request, m_config.transient_retries, device_secs, may_launch);
        if (launches.budget_stopped()) {
            measured.all_passed = false;
            if (measured.reason.empty()) measured.reason = "the device-run budget is spent";
            break;
        }
        const bool ran = result.call.status == target::CallStatus::ok && !result.cycles.empty();
        if (ran) measured.cycles.push_back(result.cycles.front());
        if (!ran || !result.verify || !result.verify->passed) {
            measured.all_passed = false;
            if (measured.reason.empty()) {
                measured.reason = result.verify && !result.verify->passed
                                      ? fmt::format("seed {}: {} mismatches, {} non-finite", request.seed,
                                                    result.verify->mismatches, result.verify->nonfinite)
                                  : ran ? fmt::format("seed {}: no verify line although a check was requested", request.seed)
                                        : fmt::format("seed {}: {}", request.seed, run_failure(result));
            }
        }
    }
    if (!measured.cycles.empty()) measured.cycles_median = median(measured.cycles);
    const SpeedOfLight bound = speed_of_light(m_model, min_bytes(kernel));
    if (measured.cycles_median) {
        if (auto impossible = speed_of_light_violation(*measured.cycles_median, bound, m_config.speed_of_light_tolerance)) {
            measured.all_passed = false;
            measured.reason = "speed_of_light: " + *impossible;
        }
    }
    if (measured.reason.empty()) {
        measured.reason = measured.cycles_median
                              ? fmt::format("median {:.0f} cycles over {} passing runs{}", *measured.cycles_median,
                                            measured.cycles.size(), transient_note(launches.transient_failures()))
                              : "no runs";
    }
    if (candidate.design_id > 0) {
        store::EvaluationRecord evaluation;
        evaluation.design_id = candidate.design_id;
        evaluation.toolchain_version_id = toolchain_version_id();
        evaluation.bench_config_hash = bench_config_hash(kernel);
        evaluation.stage = "measure";
        evaluation.verdict = measured.all_passed ? "pass" : "fail";
        evaluation.reason = measured.reason;
        evaluation.secs = secs_since(start);
        evaluation.launches = launches.launches();
        evaluation.failed_launches = launches.failed();
        evaluation.retries = launches.retries();
        m_store->record_evaluation(evaluation, launches.rows());
    }
    return measured;
}

}  // namespace npuopt::eval
