// The evaluation cascade (cascade.hpp): the stages (stages.cpp) run in order, each recorded
// through the recorder; the first that does not pass ends the evaluation with its reason.
//
//   rules ─► estimate ─► compile ─► correctness ─────────────► screen ─────► race ─► accept
//   reject   skip        fail       fail (anti-gaming check)   reject        reject / inconclusive
//                                   suspect (speed of light)   suspect       suspect

#include "eval/cascade.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.hpp"
#include "eval/judge.hpp"
#include "eval/seed_stream.hpp"
#include "eval/speed_of_light.hpp"
#include "eval/stats.hpp"

namespace npuopt::eval {

std::string stage_name(StageKind stage) {
    switch (stage) {
        case StageKind::rules: return "rules";
        case StageKind::estimate: return "estimate";
        case StageKind::compile: return "compile";
        case StageKind::correctness: return "correctness";
        case StageKind::screen: return "screen";
        case StageKind::race: return "race";
    }
    return "rules";
}

std::ostream& operator<<(std::ostream& out, StageKind stage) { return out << stage_name(stage); }

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
    base.second_look_ratio = base.second_look_ratio > 0.0 ? std::max(base.second_look_ratio, base.screen_max_ratio) : 0.0;
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
           a.accept_null_fraction == b.accept_null_fraction && a.score_cap == b.score_cap &&
           a.calibration_paths == b.calibration_paths &&
           a.calibration_seed == b.calibration_seed;
}

knowledge::DesignRef design_ref(const Candidate& candidate) {
    return {candidate.content_hash, candidate.source_file, candidate.quantities};
}

}  // namespace

Cascade::Cascade(const target::Device& device, store::CampaignStore& store, knowledge::RuleBook* rules,
                 const knowledge::HardwareModel* model, CascadeConfig config)
    : m_device(&device), m_store(&store), m_rules(rules), m_model(model), m_recorder(store),
      m_make_stages(cascade_stages), m_config(std::move(config)) {}

std::shared_ptr<const SequentialDesign> Cascade::sequential_design() {
    if (!m_sequential_design || !same_sequential_config(m_sequential_config, m_config.acceptance)) {
        m_sequential_design = std::make_shared<const SequentialDesign>(make_sequential_design(m_config.acceptance));
        m_sequential_config = m_config.acceptance;
        m_capped_designs.clear();
    }
    return m_sequential_design;
}

std::shared_ptr<const SequentialDesign> Cascade::sequential_design_within(std::size_t max_pairs) {
    auto full = sequential_design();
    if (max_pairs >= full->config.max_pairs) return full;
    auto& capped = m_capped_designs[max_pairs];
    if (!capped) capped = std::make_shared<const SequentialDesign>(make_sequential_design(within_pairs(m_config.acceptance, max_pairs)));
    return capped;
}

std::optional<std::int64_t> Cascade::toolchain_version_id() {
    if (!m_toolchain_version_id) {
        const auto version = m_device->version();
        if (version.call.status == target::CallStatus::ok) {
            m_toolchain_version_id =
                m_store->record_toolchain_version(m_device->target_name(), version.name, version.version);
        } else {
            m_toolchain_version_id = std::optional<std::int64_t>();
        }
    }
    return *m_toolchain_version_id;
}

std::string bench_config_hash(const CascadeConfig& config, const KernelContext& kernel) {
    const auto& acceptance = config.acceptance;
    std::string text = fmt::format(
        "kernel={};shape={};alpha={};beta={};min_effect={};pairs={}..{};null={};seeds={};screen={}x{};slack={};"
        "explore={};retries={};priming={};magnitude={};sol={};extra={};checked={}{}",
        kernel.spec.name, target::format_shape(kernel.shape), acceptance.alpha, acceptance.beta, acceptance.min_effect,
        acceptance.min_pairs, acceptance.max_pairs, acceptance.accept_null_fraction, config.correctness_seeds,
        config.screen_runs, config.screen_max_ratio, config.screen_slack, config.exploration_allowance,
        config.transient_retries, config.priming_seed ? fmt::format("{}", *config.priming_seed) : "derived",
        config.magnitude_factor,
        config.speed_of_light_tolerance, fmt::join(config.run_extra_args, " "), config.check_fraction,
        // the plain signed-rank test (score_cap 1) hashes as it did before the capped scores
        acceptance.score_cap < 1.0 ? fmt::format(";scores=cap{}", acceptance.score_cap) : std::string());
    return fmt::format("{:016x}", fnv1a(text));
}

std::string Cascade::bench_config_hash(const KernelContext& kernel) const {
    return eval::bench_config_hash(m_config, kernel);
}

bool Cascade::start_launch() {
    if (m_allowance && m_launches_started >= *m_allowance) return false;
    if (out_of_time()) return false;
    ++m_launches_started;
    if (m_launch_hook) m_launch_hook();
    return true;
}

double Cascade::speed_of_light_cycles(const KernelContext& kernel) const {
    return speed_of_light(m_model, min_bytes(kernel)).cycles;
}

Estimate Cascade::estimate_cycles(const Candidate& design, const KernelContext& kernel, bool mine) {
    Estimate estimate;
    if (design.predicted_cycles) {
        estimate.cycles = design.predicted_cycles;
        return estimate;
    }
    if (auto cached = m_estimate_cache.find(design.content_hash); cached != m_estimate_cache.end()) {
        estimate.cycles = cached->second;
        return estimate;
    }
    const auto schedule = m_device->estimate(design.source_file, kernel.spec.name, kernel.shape);
    if (schedule.call.status == target::CallStatus::ok && schedule.cycles) {
        m_estimate_cache[design.content_hash] = *schedule.cycles;
        estimate.cycles = schedule.cycles;
        return estimate;
    }
    if (mine && m_rules && !schedule.diagnostics.empty()) {
        recorder().knowledge([rules = m_rules, diagnostics = schedule.diagnostics, ref = design_ref(design)] {
            rules->mine_diagnostics(diagnostics, ref, "schedule");
        });
    }
    estimate.why = first_error(schedule.diagnostics);
    estimate.illegal = !estimate.why.empty();
    estimate.diagnostics = schedule.diagnostics;
    estimate.fixable = estimate.illegal && target::has_machine_applicable(schedule.diagnostics);
    if (estimate.why.empty()) estimate.why = call_failure(schedule.call, schedule.diagnostics);
    return estimate;
}

Estimate Cascade::static_estimate(const Candidate& design, const KernelContext& kernel) {
    Candidate unpredicted = design;
    unpredicted.predicted_cycles.reset();
    return estimate_cycles(unpredicted, kernel, false);
}

StageContext Cascade::context_for(const Candidate& candidate, const std::optional<Champion>& champion,
                                  const KernelContext& kernel, Outcome& outcome) {
    m_recorder.set_row_tags(toolchain_version_id(), bench_config_hash(kernel));
    recorder().discard();
    m_launches_started = 0;
    return StageContext{
        candidate,
        champion,
        kernel,
        m_config,
        *m_device,
        m_rules,
        recorder(),
        speed_of_light(m_model, min_bytes(kernel)),
        design_ref(candidate),
        [this] { return start_launch(); },
        [this]() -> std::optional<std::int64_t> {
            if (!m_allowance) return std::nullopt;
            return *m_allowance - m_launches_started;
        },
        [this] {
            ++m_launches_started;
            if (m_launch_hook) m_launch_hook();
        },
        [this, &kernel](const Candidate& design, bool mine) { return estimate_cycles(design, kernel, mine); },
        [this] { return sequential_design(); },
        outcome,
        {},
        m_source_rules,
        [this] { return out_of_time(); },
        [this](std::size_t max_pairs) { return sequential_design_within(max_pairs); },
        m_launch_residuals,
    };
}

void Cascade::finish_recording() {
    if (!m_deferred) recorder().commit();
}

Outcome Cascade::evaluate(const Candidate& candidate, const std::optional<Champion>& champion,
                          const KernelContext& kernel) {
    if (candidate.design_id <= 0) {
        throw Error(ErrorKind::internal,
                    fmt::format("cascade: candidate {} has no design id; record the design in the store first",
                                candidate.content_hash));
    }
    if (!m_launch_noise_restored) restore_launch_noise();
    Outcome outcome;
    StageContext context = context_for(candidate, champion, kernel, outcome);
    for (auto& stage : m_make_stages()) {
        const auto start = Clock::now();
        StageResult result = stage->run(context);
        StageRecord record = result.record;
        if (!result.recorded) {
            record.stage = result.recorded_as.value_or(stage->kind());
            record.verdict = result.verdict;
            record.reason = std::move(result.reason);
            record.secs = secs_since(start);
            if (result.launches) {
                record.device_runs = result.launches->launches();
                record.failed_launches = result.launches->failed();
                record.retries = result.launches->retries();
                outcome.device_runs += result.launches->launches();
            }
            recorder().stage(candidate, kernel, record,
                             result.launches ? result.launches->rows() : std::vector<store::MeasurementRecord>{});
        }
        outcome.stages.push_back(record);
        outcome.final_reason = fmt::format("{}: {}: {}", stage_name(record.stage), verdict_name(record.verdict), record.reason);
        if (!result.go_on) break;
    }
    pool_launch_noise(context.checked_cycles);
    finish_recording();
    return outcome;
}

void Cascade::restore_launch_noise() {
    m_launch_noise_restored = true;
    // Evaluations a design at a time, oldest first, as they were pooled; enough to fill the pool
    // with four launches each.
    const auto recent = m_store->recent_stage_cycles(stage_name(StageKind::correctness),
                                                     static_cast<std::int64_t>(k_launch_noise_pool));
    for (const auto& cycles : recent) pool_launch_noise(cycles);
}

void Cascade::pool_launch_noise(const std::vector<double>& cycles) {
    // Three launches at least: with two, each lies as far from their median as the other.
    if (cycles.size() < 3) return;
    std::vector<double> logs;
    for (double value : cycles) {
        if (value > 0.0) logs.push_back(std::log(value));
    }
    if (logs.size() < 3) return;
    const double centre = median(logs);
    for (double value : logs) m_launch_residuals.push_back(value - centre);
    if (m_launch_residuals.size() > k_launch_noise_pool) {
        m_launch_residuals.erase(m_launch_residuals.begin(),
                                 m_launch_residuals.end() - static_cast<std::ptrdiff_t>(k_launch_noise_pool));
    }
}

Outcome Cascade::revalidate(const Champion& champion, const Champion& predecessor, const KernelContext& kernel) {
    Outcome outcome;
    outcome.correct = true;
    const std::optional<Champion> opponent = predecessor;
    StageContext context = context_for(champion.candidate, opponent, kernel, outcome);
    RaceConfig race_config;
    race_config.seed = SeedStream(m_config.seed ^ static_cast<std::uint64_t>(m_store->list_evaluations(
                                                         champion.candidate.design_id, true).size()),
                                  champion.candidate.content_hash, "revalidate")
                           .next();
    race_config.max_retries_per_pair = static_cast<std::size_t>(std::max(0, m_config.transient_retries));
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
    if (out_of_time()) {
        outcome.budget_exhausted = true;
        outcome.final_reason = "race: inconclusive: re-validation skipped, the wall-time budget has run out";
        return outcome;
    }
    race_config.out_of_time = [this] { return out_of_time(); };
    // The race's roles: the predecessor runs as its champion (A), the current champion as the candidate (B).
    RaceOutcome race = run_journalled_race(
        context, predecessor.candidate, champion.candidate, race_config, race_config.seed, "revalidate-check",
        fmt::format("re-validation against design {} (in progress)", predecessor.candidate.design_id),
        fmt::format("raced by design {} (re-validation in progress)", champion.candidate.design_id));
    const JudgeReport& report = race.report;
    outcome.accepted = report.verdict.decision == Decision::accept;
    StageRecord record = race.record;
    record.reason = fmt::format(
        "re-validation against design {}: {} after {} pairs ({} launches, {} failed, {} retried): speedup {:.4f} "
        "[{:.4f}, {:.4f}]; {}",
        predecessor.candidate.design_id, decision_name(report.verdict.decision), report.verdict.pairs_completed,
        record.device_runs, record.failed_launches, record.retries, report.verdict.test.speedup,
        report.verdict.test.speedup_interval.lower, report.verdict.test.speedup_interval.upper, report.verdict.reason);
    if (race.candidate_journal) recorder().close_journal(*race.candidate_journal, record);
    if (race.champion_journal) {
        StageRecord predecessor_record = record;
        predecessor_record.verdict = Verdict::champion;
        predecessor_record.reason = fmt::format("raced by design {} ({})", champion.candidate.design_id, record.reason);
        recorder().close_journal(*race.champion_journal, predecessor_record);
    }
    outcome.stages.push_back(record);
    outcome.final_reason = fmt::format("race: {}: {}", verdict_name(record.verdict), record.reason);
    finish_recording();
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
        const auto result = launches.run(*m_device, request, m_config.transient_retries, device_secs, may_launch);
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
        evaluation.verdict = std::string(verdict_name(measured.all_passed ? Verdict::pass : Verdict::fail));
        evaluation.reason = measured.reason;
        evaluation.secs = secs_since(start);
        evaluation.launches = launches.launches();
        evaluation.failed_launches = launches.failed();
        evaluation.retries = launches.retries();
        m_recorder.row(std::move(evaluation), launches.rows());
        m_recorder.commit();
    }
    return measured;
}

}  // namespace npuopt::eval
