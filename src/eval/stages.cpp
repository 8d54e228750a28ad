// The six stages of the cascade (stage.hpp). Each returns its verdict and reason; the rule book
// is read here and written only through the recorder (at the step's commit).

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "core/error.hpp"
#include "eval/anti_gaming.hpp"
#include "eval/check_plan.hpp"
#include "eval/judge.hpp"
#include "eval/seed_stream.hpp"
#include "eval/stage.hpp"
#include "eval/stats.hpp"

namespace npuopt::eval {
namespace {

knowledge::Quantities rule_inputs(const Candidate& candidate) {
    knowledge::Quantities merged = candidate.quantities;
    for (const auto& [name, value] : candidate.features) merged.emplace(name, value);
    return merged;
}

/// Every error diagnostic's quantity that exceeds what the candidate declares for it goes on the
/// outcome: the campaign corrects the template's formula by it (QuantityMiss).
void note_quantity_misses(StageContext& context, const std::vector<target::Diagnostic>& diagnostics) {
    for (const auto& diagnostic : diagnostics) {
        if (diagnostic.level != "error") continue;
        for (const auto& quantity : diagnostic.quantities) {
            auto declared = context.candidate.quantities.find(quantity.name);
            if (declared == context.candidate.quantities.end() || !std::isfinite(quantity.value) ||
                quantity.value <= declared->second) {
                continue;
            }
            context.outcome.quantity_misses.push_back({quantity.name, declared->second, quantity.value, diagnostic.code});
        }
    }
}

StageResult ended(Verdict verdict, std::string reason, const LaunchLog* launches = nullptr) {
    StageResult result;
    result.verdict = verdict;
    result.reason = std::move(reason);
    result.launches = launches;
    result.go_on = verdict == Verdict::pass;
    return result;
}

/// A device run's failure, kept for the rule book (a hang or device error becomes a runtime rule).
void learn_from_run(StageContext& context, const target::RunResult& result) {
    note_quantity_misses(context, result.diagnostics);
    if (context.rules == nullptr) return;
    knowledge::RuleBook* rules = context.rules;
    context.recorder.knowledge([rules, result, design = context.design, features = context.candidate.features] {
        rules->record_run_result(result, design, features);
    });
}

target::RunRequest run_request(const StageContext& context, std::uint64_t seed, bool check) {
    target::RunRequest request;
    request.file = context.candidate.source_file;
    request.kernel = context.kernel.spec.name;
    request.seed = seed;
    request.repeat = 1;
    request.check = check;
    request.shape = context.kernel.shape;
    request.extra_args = context.config.run_extra_args;
    return request;
}

// ---- rules: learnt legality rules on the declared quantities, nothing compiled -------------------

class RulesStage final : public Stage {
public:
    StageKind kind() const override { return StageKind::rules; }
    StageResult run(StageContext& context) override {
        if (context.rules == nullptr) {
            StageResult result = ended(Verdict::skip, "no rule book");
            result.go_on = true;  // nothing to check is no reason to stop
            return result;
        }
        const auto violations = context.rules->check_quantities(rule_inputs(context.candidate));
        if (violations.empty()) return ended(Verdict::pass, "no known rule is violated");
        std::vector<std::string> texts;
        for (const auto& violation : violations) {
            texts.push_back(fmt::format("{} = {:g} violates {}", violation.quantity, violation.value, violation.text));
        }
        return ended(Verdict::reject, fmt::format("{}", fmt::join(texts, "; ")));
    }
};

// ---- estimate: cost model or static schedule against the champion's ----------------------------

class EstimateStage final : public Stage {
public:
    StageKind kind() const override { return StageKind::estimate; }
    StageResult run(StageContext& context) override {
        const Estimate estimate = context.estimate(context.candidate, true);
        note_quantity_misses(context, estimate.diagnostics);
        if (estimate.illegal && estimate.fixable && context.source_rules) {
            return ended(Verdict::pass, fmt::format("the static schedule rejects the design with fix-its ({}); the "
                                                    "compile stage tries them",
                                                    estimate.why));
        }
        if (estimate.illegal) {
            return ended(Verdict::fail, fmt::format("the static schedule rejects the design: {}", estimate.why));
        }
        if (!estimate.cycles) return ended(Verdict::pass, fmt::format("no estimate ({}); not screened", estimate.why));
        const double predicted = *estimate.cycles;
        if (!context.champion) {
            return ended(Verdict::pass, fmt::format("predicted {:.0f} cycles; no champion to compare with", predicted));
        }
        const Estimate champion_estimate = context.estimate(context.champion->candidate, false);
        if (!champion_estimate.cycles || *champion_estimate.cycles <= 0.0) {
            return ended(Verdict::pass, fmt::format("predicted {:.0f} cycles; the champion has no estimate ({})",
                                                    predicted, champion_estimate.why));
        }
        const double champion_predicted = *champion_estimate.cycles;
        const double ratio = predicted / champion_predicted;
        const CascadeConfig& config = context.config;
        if (context.candidate.clear_win_only) {
            // a check of the model's own predictions (the defaults check) is not screened out by them
            return ended(Verdict::pass, fmt::format("predicted {:.0f} cycles, {:.2f}x the champion's {:.0f}; a check of "
                                                    "the predictions, not screened by them",
                                                    predicted, ratio, champion_predicted));
        }
        if (ratio <= config.screen_slack) {
            return ended(Verdict::pass, fmt::format("predicted {:.0f} cycles, {:.2f}x the champion's {:.0f}", predicted,
                                                    ratio, champion_predicted));
        }
        SeedStream stream(config.seed, context.candidate.content_hash, "exploration");
        const double draw = stream.uniform();
        if (draw >= config.exploration_allowance) {
            return ended(Verdict::skip, fmt::format("predicted {:.0f} cycles, {:.2f}x the champion's {:.0f} (limit "
                                                    "{:.2f}x; exploration draw {:.3f} >= allowance {:.2f})",
                                                    predicted, ratio, champion_predicted, config.screen_slack, draw,
                                                    config.exploration_allowance));
        }
        return ended(Verdict::pass, fmt::format("predicted {:.2f}x the champion (limit {:.2f}x) but let through by the "
                                                "exploration allowance (draw {:.3f} < {:.2f})",
                                                ratio, config.screen_slack, draw, config.exploration_allowance));
    }
};

// ---- compile: the toolchain's check; diagnostics become rules, success demotes wrong ones -------
// A design that fails with machine-applicable fix-its gets them applied and checked again: a fix
// that passes becomes a rewrite rule (applied to every source from then on), one that does not is
// counter-evidence. The design itself still failed: the campaign proposes its rewritten source.

std::string read_text(const std::filesystem::path& file) {
    std::ifstream stream(file, std::ios::binary);
    std::ostringstream buffer;
    buffer << stream.rdbuf();
    return buffer.str();
}

std::set<std::string> error_codes(const std::vector<target::Diagnostic>& diagnostics) {
    std::set<std::string> codes;
    for (const auto& diagnostic : diagnostics) {
        if (diagnostic.level == "error") codes.insert(diagnostic.code);
    }
    return codes;
}

FixitAttempt try_fixits(StageContext& context, const target::CheckResult& check) {
    FixitAttempt attempt;
    const std::filesystem::path& file = context.candidate.source_file;
    const std::string source = read_text(file);
    target::FixedSource fixed = target::apply_fixits(source, file, check.diagnostics);
    attempt.edits = fixed.edits;
    attempt.skipped = fixed.skipped;
    if (fixed.edits.empty()) {
        attempt.reason = "no suggestion applies to this source";
        return attempt;
    }
    std::filesystem::path fixed_file = file;
    fixed_file.replace_filename(file.stem().string() + ".fixit" + file.extension().string());
    {
        std::ofstream out(fixed_file, std::ios::binary | std::ios::trunc);
        out << fixed.source;
        if (!out) {
            attempt.reason = fmt::format("cannot write {}", fixed_file.string());
            return attempt;
        }
    }
    const target::CheckResult again = context.device.build(fixed_file, context.kernel.spec.name, context.kernel.shape);
    std::error_code ignored;
    std::filesystem::remove(fixed_file, ignored);
    // Kept when the fixed source passes, or when what is left is errors the design had already
    // (another problem of this design, e.g. a capacity): the fix-its' own codes gone, none new.
    std::set<std::string> fixed_codes;
    for (const auto& edit : fixed.edits) fixed_codes.insert(edit.code);
    const auto before = error_codes(check.diagnostics);
    const auto after = error_codes(again.diagnostics);
    bool only_old = again.call.status == target::CallStatus::failed && !after.empty();
    for (const auto& code : after) {
        if (fixed_codes.count(code) != 0 || before.count(code) == 0) only_old = false;
    }
    const bool passes = again.ok && again.call.status == target::CallStatus::ok;
    attempt.kept = passes || only_old;
    if (passes) {
        attempt.reason = fmt::format("{} fix-it(s) applied; the fixed source passes the check", fixed.edits.size());
    } else if (only_old) {
        attempt.reason = fmt::format("{} fix-it(s) applied; the fixed source no longer has their errors (still: {})",
                                     fixed.edits.size(), fmt::join(after, ", "));
    } else {
        attempt.reason = fmt::format("{} fix-it(s) applied, but the fixed source still fails: {}", fixed.edits.size(),
                                     again.call.status == target::CallStatus::failed ? first_error(again.diagnostics)
                                                                                     : again.call.message);
    }
    if (knowledge::SourceRules* rules = context.source_rules) {
        context.recorder.knowledge([rules, attempt, design = context.design] {
            for (const auto& edit : attempt.edits) {
                if (attempt.kept) {
                    rules->record_rewrite(edit, design);
                } else {
                    rules->reject_rewrite(edit, design, attempt.reason);
                }
            }
        });
    }
    return attempt;
}

/// A failure that does not depend on the design's numbers (no quantities): a candidate known failure of its family.
void learn_family_outcome(StageContext& context, const target::CheckResult& check, bool passed) {
    knowledge::SourceRules* rules = context.source_rules;
    if (rules == nullptr || context.candidate.family.empty()) return;
    if (passed) {
        context.recorder.knowledge([rules, family = context.candidate.family, design = context.design] {
            rules->record_pass(family, design);
        });
        return;
    }
    for (const auto& diagnostic : check.diagnostics) {
        if (diagnostic.level != "error" || !diagnostic.quantities.empty()) continue;
        context.recorder.knowledge([rules, family = context.candidate.family, diagnostic, design = context.design] {
            rules->record_failure(family, diagnostic, design);
        });
        break;  // the first error names the failure
    }
}

class CompileStage final : public Stage {
public:
    StageKind kind() const override { return StageKind::compile; }
    StageResult run(StageContext& context) override {
        target::CheckResult check;
        int transient_failures = 0;
        for (int attempt = 0; attempt <= context.config.transient_retries; ++attempt) {
            check = context.device.build(context.candidate.source_file, context.kernel.spec.name, context.kernel.shape);
            if (check.call.status != target::CallStatus::transient) break;
            ++transient_failures;
        }
        knowledge::RuleBook* rules = context.rules;
        note_quantity_misses(context, check.diagnostics);
        std::string mined;
        if (rules && !check.diagnostics.empty()) {
            context.recorder.knowledge([rules, diagnostics = check.diagnostics, design = context.design] {
                rules->mine_diagnostics(diagnostics, design, "check");
            });
            mined = fmt::format("; {} diagnostic(s) go to the rule book", check.diagnostics.size());
        }
        if (check.ok && check.call.status == target::CallStatus::ok) {
            learn_family_outcome(context, check, true);
            if (rules) {
                context.recorder.knowledge([rules, inputs = rule_inputs(context.candidate), design = context.design] {
                    rules->record_acceptance(inputs, design);
                });
            }
            return ended(Verdict::pass, fmt::format("compiled in {:.2f} s{}{}", check.compile_secs, mined,
                                                    transient_note(transient_failures)));
        }
        const std::string error = first_error(check.diagnostics);
        const bool diagnosed = check.call.status == target::CallStatus::failed && !error.empty();
        std::string fixit_note;
        if (diagnosed) {
            learn_family_outcome(context, check, false);
            if (context.source_rules && target::has_machine_applicable(check.diagnostics)) {
                context.outcome.fixit = try_fixits(context, check);
                fixit_note = fmt::format("; fix-its: {}", context.outcome.fixit->reason);
            }
        }
        const Verdict verdict = diagnosed || check.call.status == target::CallStatus::failed ? Verdict::fail : Verdict::error;
        std::string reason = diagnosed ? error
                                       : fmt::format("{}: {}", target::call_status_name(check.call.status),
                                                     check.call.message);
        return ended(verdict, reason + mined + fixit_note + transient_note(transient_failures));
    }
};

// ---- correctness: priming launch, fresh seeds, a re-run; the toolchain's verify + anti-gaming ---
// Every correctness launch is timed too: the screen reuses their cycles, and a first launch that
// is already far slower than the champion ends the evaluation after one device run.

class CorrectnessStage final : public Stage {
public:
    StageKind kind() const override { return StageKind::correctness; }
    StageResult run(StageContext& context) override {
        const CascadeConfig& config = context.config;
        Outcome& outcome = context.outcome;
        SeedStream stream(config.seed, context.candidate.content_hash, "correctness");
        const std::uint64_t priming =
            config.priming_seed ? *config.priming_seed : derive_seed(config.seed, context.candidate.content_hash, "priming");
        std::vector<std::uint64_t> seeds{priming};
        std::set<std::uint64_t> used{priming};
        while (static_cast<int>(seeds.size()) < 1 + std::max(2, config.correctness_seeds)) {
            const std::uint64_t seed = stream.next();
            if (used.insert(seed).second) seeds.push_back(seed);
        }
        seeds.push_back(seeds[1]);  // the first fresh seed again, after others ran: run-order check

        std::vector<CorrectnessRun> runs;
        std::vector<double>& cycles = context.checked_cycles;
        for (std::size_t position = 0; position < seeds.size(); ++position) {
            const auto result = m_launches.run(context.device, run_request(context, seeds[position], true),
                                               config.transient_retries, outcome.device_secs, context.may_launch);
            if (m_launches.budget_stopped()) {
                outcome.budget_exhausted = true;
                return ended(Verdict::inconclusive,
                             fmt::format("the {} is spent after {} of {} correctness launches",
                                         context.spent_budget(), m_launches.launches(), seeds.size()),
                             &m_launches);
            }
            if (result.call.status == target::CallStatus::ok) cycles.insert(cycles.end(), result.cycles.begin(), result.cycles.end());
            // A launch counts only when it ran to the end with its verify line: a passing verify
            // line from a launch that then failed (or printed no time) is no pass. A failing one
            // goes on to the anti-gaming checks, which name the way it is wrong.
            const bool ran = result.call.status == target::CallStatus::ok && !result.cycles.empty();
            if (!result.verify || (result.verify->passed && !ran)) {
                learn_from_run(context, result);
                const bool design_failed = result.call.status == target::CallStatus::ok ||
                                           result.call.status == target::CallStatus::failed ||
                                           result.call.status == target::CallStatus::timed_out;
                std::string why = run_failure(result);
                if (result.call.status == target::CallStatus::ok && result.cycles.empty()) {
                    why = "the launch printed no cycles";
                } else if (result.call.status == target::CallStatus::ok) {
                    why = "the launch printed no verify line although a check was requested";
                }
                return ended(design_failed ? Verdict::fail : Verdict::error,
                             fmt::format("seed {} (launch {}): {}{}", seeds[position], position, why,
                                         transient_note(m_launches.transient_failures())),
                             &m_launches);
            }
            runs.push_back({seeds[position], position, *result.verify});
            const auto& champion = context.champion;
            if (position == 0 && champion && champion->cycles_median > 0.0 && config.quick_reject_ratio > 0.0 &&
                !cycles.empty() && cycles.front() > config.quick_reject_ratio * champion->cycles_median) {
                outcome.cycles_median = cycles.front();
                outcome.champion_cycles_median = champion->cycles_median;
                StageResult result_quick = ended(
                    Verdict::reject,
                    fmt::format("first checked launch (seed {}) took {:.0f} cycles, {:.3f}x the champion's {:.0f} "
                                "(quick-reject limit {:.2f}x): rejected after one launch{}",
                                seeds[position], cycles.front(), cycles.front() / champion->cycles_median,
                                champion->cycles_median, config.quick_reject_ratio,
                                transient_note(m_launches.transient_failures())),
                    &m_launches);
                result_quick.recorded_as = StageKind::screen;
                return result_quick;
            }
            if (position == 1 && champion && champion->cycles_median > 0.0 && config.second_look_ratio > 0.0 &&
                cycles.size() >= 2 &&
                std::min(cycles[0], cycles[1]) > config.second_look_ratio * champion->cycles_median) {
                outcome.cycles_median = median(cycles);
                outcome.champion_cycles_median = champion->cycles_median;
                StageResult result_second = ended(
                    Verdict::reject,
                    fmt::format("both of the first two checked launches ({:.0f} and {:.0f} cycles) are over {:.2f}x the "
                                "champion's {:.0f} (second-look limit): rejected after two launches{}",
                                cycles[0], cycles[1], config.second_look_ratio, champion->cycles_median,
                                transient_note(m_launches.transient_failures())),
                    &m_launches);
                result_second.recorded_as = StageKind::screen;
                return result_second;
            }
        }
        const auto verdict = check_correctness_runs(runs, AntiGamingConfig{config.magnitude_factor});
        if (runs.size() != seeds.size()) {
            throw Error(ErrorKind::internal, fmt::format("cascade: {} of {} correctness launches verified and the stage "
                                                         "did not end", runs.size(), seeds.size()));
        }
        if (!verdict.passed()) {
            return ended(Verdict::fail, verdict.reason + transient_note(m_launches.transient_failures()), &m_launches);
        }
        outcome.correct = true;
        if (!cycles.empty()) {
            if (auto impossible = speed_of_light_violation(median(cycles), context.bound, config.speed_of_light_tolerance)) {
                return ended(Verdict::suspect, "speed_of_light: " + *impossible, &m_launches);
            }
        }
        const std::string notes =
            verdict.notes.empty() ? std::string() : fmt::format("; notes: {}", fmt::join(verdict.notes, "; "));
        return ended(Verdict::pass,
                     fmt::format("every output verified on {} launches (priming seed {}, {} fresh seeds, one re-run); "
                                 "fingerprints change with the inputs and reproduce{}{}",
                                 runs.size(), priming, seeds.size() - 2, notes,
                                 transient_note(m_launches.transient_failures())),
                     &m_launches);
    }

private:
    LaunchLog m_launches;
};

// ---- screen: the correctness launches' cycles (+ screen_runs more); not faster is rejected ------

/// Why the screen's launches already decide (a clear win: even the slowest launch is far under the
/// champion's `reference` cycles, a gain no launch noise or drift explains), or nullopt: the race
/// decides. `reference_name` says what the reference is ("median", "fastest fresh launch").
std::optional<std::string> clear_win(const CascadeConfig& config, const std::vector<double>& cycles,
                                     double reference, std::string_view reference_name) {
    if (config.clear_win_ratio <= 0.0 || reference <= 0.0) return std::nullopt;
    if (std::ssize(cycles) < std::max(config.clear_win_min_launches, 1)) return std::nullopt;
    const double slowest = *std::max_element(cycles.begin(), cycles.end());
    if (slowest >= config.clear_win_ratio * reference) return std::nullopt;
    return fmt::format("clear win: the slowest of {} launches, {:.0f} cycles, is {:.3f}x the champion's {} {:.0f} "
                       "(limit {:.2f}x)",
                       cycles.size(), slowest, slowest / reference, reference_name, reference, config.clear_win_ratio);
}

/// The champion's fresh launches that confirm (or not) a clear win against its recorded median.
struct ChampionCheck {
    std::vector<double> cycles;    ///< the fresh launches' cycles (fewer than asked: one failed)
    bool budget_stopped = false;   ///< the device-run or wall-time allowance ended them
    std::string failure;           ///< why a launch failed, "" when none did
};

/// `config.clear_win_champion_launches` launches of the champion right after the candidate's: its
/// recorded median may come from as few as four launches, two outliers among which inflate it by
/// half the outlier scale, and the device drifts between then and now. Logged as side "champion".
ChampionCheck launch_champion(StageContext& context, LaunchLog& launches, SeedStream& stream) {
    const CascadeConfig& config = context.config;
    ChampionCheck check;
    for (int launch_idx = 0; launch_idx < config.clear_win_champion_launches; ++launch_idx) {
        target::RunRequest request = run_request(context, stream.next(), false);
        request.file = context.champion->candidate.source_file;
        const auto result = launches.run(context.device, request, config.transient_retries,
                                         context.outcome.device_secs, context.may_launch, "champion");
        if (launches.budget_stopped()) {
            check.budget_stopped = true;
            return check;
        }
        if (result.call.status != target::CallStatus::ok || result.cycles.empty()) {
            check.failure = run_failure(result);
            return check;
        }
        check.cycles.push_back(result.cycles.front());
    }
    return check;
}

class ScreenStage final : public Stage {
public:
    StageKind kind() const override { return StageKind::screen; }
    StageResult run(StageContext& context) override {
        const CascadeConfig& config = context.config;
        Outcome& outcome = context.outcome;
        SeedStream stream(config.seed, context.candidate.content_hash, "screen");
        CheckPlan checks(config.check_fraction, config.seed, context.candidate.content_hash, "screen-check");
        std::vector<double> cycles = context.checked_cycles;
        const int extra_runs = std::max(cycles.empty() ? 1 : 0, config.screen_runs);
        for (int run_idx = 0; run_idx < extra_runs; ++run_idx) {
            const target::RunRequest request = run_request(context, stream.next(), checks.next());
            const auto result =
                m_launches.run(context.device, request, config.transient_retries, outcome.device_secs, context.may_launch);
            if (m_launches.budget_stopped()) {
                outcome.budget_exhausted = true;
                return ended(Verdict::inconclusive,
                             fmt::format("the {} is spent after {} screen launches", context.spent_budget(),
                                         m_launches.launches()),
                             &m_launches);
            }
            if (request.check && result.call.status != target::CallStatus::transient) {
                if (auto wrong = incorrect_reason(result); !wrong.empty()) {
                    outcome.correct = false;
                    return ended(Verdict::fail,
                                 fmt::format("seed {}: {}{}", request.seed, wrong,
                                             transient_note(m_launches.transient_failures())),
                                 &m_launches);
                }
            }
            if (result.call.status != target::CallStatus::ok || result.cycles.empty()) {
                learn_from_run(context, result);
                return ended(result.call.status == target::CallStatus::transient ? Verdict::error : Verdict::fail,
                             fmt::format("seed {}: {}{}", request.seed, run_failure(result),
                                         transient_note(m_launches.transient_failures())),
                             &m_launches);
            }
            cycles.push_back(result.cycles.front());
        }
        const double screen_median = median(cycles);
        outcome.cycles_median = screen_median;
        if (auto impossible = speed_of_light_violation(screen_median, context.bound, config.speed_of_light_tolerance)) {
            return ended(Verdict::suspect, "speed_of_light: " + *impossible, &m_launches);
        }
        const std::string note = transient_note(m_launches.transient_failures());
        if (!context.champion) {
            outcome.accepted = true;
            return ended(Verdict::accept,
                         fmt::format("median {:.0f} cycles over {} runs; no champion yet: the first correct design "
                                     "becomes the champion{}",
                                     screen_median, cycles.size(), note),
                         &m_launches);
        }
        const double champion_median = context.champion->cycles_median;
        outcome.champion_cycles_median = champion_median;
        const double ratio = champion_median > 0.0 ? screen_median / champion_median : 0.0;
        std::string unconfirmed;
        if (auto win = clear_win(config, cycles, champion_median, "median")) {
            // Confirmed only against fresh launches of the champion: the reference is the lower of
            // its recorded median and its fastest fresh launch.
            std::optional<std::string> confirmed = win;
            std::string confirmation;
            double reference = champion_median;
            if (config.clear_win_champion_launches > 0) {
                const ChampionCheck check = launch_champion(context, m_launches, stream);
                if (check.budget_stopped) {
                    outcome.budget_exhausted = true;
                    return ended(Verdict::inconclusive,
                                 fmt::format("{}, but the {} is spent before the champion's confirming launches",
                                             *win, context.spent_budget()),
                                 &m_launches);
                }
                if (!check.failure.empty()) {
                    confirmed.reset();
                    unconfirmed = fmt::format("; {}, unconfirmed: a fresh champion launch failed ({}), the race decides",
                                              *win, check.failure);
                } else {
                    const double fastest = *std::min_element(check.cycles.begin(), check.cycles.end());
                    if (fastest < champion_median) {
                        reference = fastest;
                        confirmed = clear_win(config, cycles, fastest, "fastest fresh launch");
                    }
                    confirmation = fmt::format("; the champion's {} fresh launches: fastest {:.0f} cycles ({:.3f}x its "
                                               "recorded median)",
                                               check.cycles.size(), fastest, fastest / champion_median);
                    if (!confirmed) {
                        unconfirmed = fmt::format("; {}, not confirmed{}: the race decides", *win, confirmation);
                    }
                }
            }
            if (confirmed) {
                outcome.accepted = true;
                outcome.speedup = reference / screen_median;
                return ended(Verdict::accept, *confirmed + confirmation + ": accepted without a race" + note,
                             &m_launches);
            }
        }
        if (ratio > config.screen_max_ratio) {
            return ended(Verdict::reject,
                         fmt::format("median {:.0f} cycles over {} runs is {:.3f}x the champion's {:.0f} (limit "
                                     "{:.2f}x){}",
                                     screen_median, cycles.size(), ratio, champion_median, config.screen_max_ratio, note),
                         &m_launches);
        }
        return ended(Verdict::pass, fmt::format("median {:.0f} cycles over {} runs, {:.3f}x the champion's {:.0f}{}{}",
                                                screen_median, cycles.size(), ratio, champion_median, unconfirmed, note),
                     &m_launches);
    }

private:
    LaunchLog m_launches;
};

// ---- race: interleaved launches against the champion, the sequential test decides ---------------

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

/// Why a race is not worth its launches (nullopt: it is): the screen's gain, against the launch
/// noise measured so far, is one the race the budget affords would seldom confirm. The chance is
/// simulated through the race's own test (`capped`, or the configured one) for the pairs it may
/// run (`max_launches` / 2; 0 = the test's cap), with each pair drawn as the screen's log-ratio plus
/// the difference of two pooled launch residuals. A gain of a few percent is cheap to confirm on a
/// quiet device and out of reach on a noisy one, so no fixed screen bar suits both.
std::optional<std::string> undetectable_gain(const StageContext& context,
                                             const std::shared_ptr<const SequentialDesign>& capped,
                                             std::size_t max_launches) {
    const CascadeConfig& config = context.config;
    const Outcome& outcome = context.outcome;
    if (config.race_min_accept_probability <= 0.0) return std::nullopt;
    if (std::ssize(context.launch_residuals) < std::max(config.race_noise_min_launches, 1)) return std::nullopt;
    if (!outcome.cycles_median || !outcome.champion_cycles_median || *outcome.cycles_median <= 0.0 ||
        *outcome.champion_cycles_median <= 0.0 || !context.sequential_design) {
        return std::nullopt;
    }
    const auto design = capped ? capped : context.sequential_design();
    if (!design) return std::nullopt;
    std::size_t pairs = design->config.max_pairs;
    if (max_launches > 0) pairs = std::min(pairs, max_launches / 2);
    const double ratio = *outcome.cycles_median / *outcome.champion_cycles_median;
    const double chance =
        accept_probability(design, pairs, context.launch_residuals, std::log(ratio),
                           SeedStream(config.seed, context.candidate.content_hash, "race-power").next());
    if (chance >= config.race_min_accept_probability) return std::nullopt;
    std::vector<double> magnitudes;
    for (double residual : context.launch_residuals) magnitudes.push_back(std::fabs(residual));
    return fmt::format("not raced: at the screen's {:.3f}x the champion, with the launch noise measured so far "
                       "({} launches, median |deviation| {:.1f}%), a race of at most {} pairs would accept with "
                       "chance {:.2f} (limit {:.2f}): its launches are worth more to the search elsewhere",
                       ratio, context.launch_residuals.size(), 100.0 * median(magnitudes), pairs, chance,
                       config.race_min_accept_probability);
}

class RaceStage final : public Stage {
public:
    StageKind kind() const override { return StageKind::race; }
    StageResult run(StageContext& context) override {
        const CascadeConfig& config = context.config;
        Outcome& outcome = context.outcome;
        const Candidate& candidate = context.candidate;
        const Champion& champion = *context.champion;
        if (candidate.clear_win_only) {
            // A check (the champion's family at its defaults, say), not a bet: past the screen without
            // the clear win, a near tie is not worth a race; a screen median more than half the
            // clear-win margin under the champion's is no tie and is raced like any candidate (the
            // chance gate below still spares a race it could not win). Why: STATISTICS.md.
            const double tie_limit = 0.5 * (1.0 + config.clear_win_ratio);
            const bool gain = outcome.cycles_median && outcome.champion_cycles_median &&
                              *outcome.champion_cycles_median > 0.0 &&
                              *outcome.cycles_median < tie_limit * *outcome.champion_cycles_median;
            if (!gain) {
                return ended(Verdict::reject,
                             fmt::format("not raced: a check taken only on the screen's clear win (slowest launch under "
                                         "{:.2f}x the champion's median) or a median under {:.3f}x, and the screen "
                                         "showed neither",
                                         config.clear_win_ratio, tie_limit));
            }
        }
        RaceConfig race_config;
        std::shared_ptr<const SequentialDesign> capped_design;  ///< null: the configured test
        race_config.seed = SeedStream(config.seed, candidate.content_hash, "race").next();
        race_config.max_retries_per_pair = static_cast<std::size_t>(std::max(0, config.transient_retries));
        if (const auto left = context.launches_left()) {
            if (*left < 2) {
                outcome.budget_exhausted = true;
                return ended(Verdict::inconclusive,
                             fmt::format("the device-run budget leaves {} launch(es), not enough for one pair of the race",
                                         std::max<std::int64_t>(0, *left)));
            }
            race_config.max_launches = static_cast<std::size_t>(*left);
            bool share_caps = false;
            if (config.race_budget_share > 0.0) {
                const auto share = static_cast<std::int64_t>(std::floor(config.race_budget_share * static_cast<double>(*left)));
                share_caps = share < *left;
                race_config.max_launches = static_cast<std::size_t>(std::min(*left, std::max<std::int64_t>(share, 2)));
            }
            // A race its share of the budget caps below the test's last look gets the test placed
            // for the pairs it can afford (alpha and beta spent by then, fixed before its first
            // pair); one that even so cannot reach an accept is not run: it could only reject or end
            // inconclusive, and its launches are worth more to the search elsewhere. (A race cut by
            // the budget itself keeps the configured test: the step is evaluated again first when
            // the campaign next runs.)
            const std::size_t affordable = race_config.max_launches / 2;
            auto full = context.sequential_design();
            if (share_caps && full && affordable < full->config.max_pairs) {
                capped_design = context.sequential_design_within ? context.sequential_design_within(affordable) : full;
                const auto first_accept = earliest_accept_pairs(*capped_design);
                if (!first_accept || *first_accept > affordable) {
                    // The share is a budget for ordinary races, not a ban: a candidate that passed the
                    // screen still gets the smallest race that can accept (its test placed for those
                    // pairs), where the launches left allow one. Without it every candidate late in a
                    // campaign, however much faster, could only end inconclusive.
                    std::optional<std::size_t> floor_pairs;
                    if (context.sequential_design_within) {
                        for (std::size_t pairs = affordable + 1;
                             pairs <= full->config.max_pairs && static_cast<std::int64_t>(2 * pairs) <= *left; ++pairs) {
                            auto design = context.sequential_design_within(pairs);
                            const auto first = earliest_accept_pairs(*design);
                            if (first && *first <= pairs) {
                                floor_pairs = pairs;
                                capped_design = std::move(design);
                                break;
                            }
                        }
                    }
                    if (!floor_pairs) {
                        return ended(Verdict::inconclusive,
                                     fmt::format("not raced: {} launches of the {} the device-run budget leaves (race share {}) "
                                                 "are too few for the test to accept at alpha {}, and so are all {}",
                                                 race_config.max_launches, *left, config.race_budget_share,
                                                 capped_design->config.alpha, *left));
                    }
                    race_config.max_launches = 2 * *floor_pairs;
                }
            }
        }
        if (auto hopeless = undetectable_gain(context, capped_design, race_config.max_launches)) {
            return ended(Verdict::inconclusive, *hopeless);
        }
        if (context.out_of_time && context.out_of_time()) {
            outcome.budget_exhausted = true;
            return ended(Verdict::inconclusive, "the wall-time budget ran out before the race's first pair");
        }
        RaceOutcome race = run_journalled_race(context, champion.candidate, candidate, race_config, config.seed, "race-check",
                                               fmt::format("racing design {} (in progress)", champion.candidate.design_id),
                                               fmt::format("raced by design {} (in progress)", candidate.design_id),
                                               capped_design);
        const JudgeReport& report = race.report;
        const auto& verdict = report.verdict;
        StageRecord record = race.record;
        std::string summary = fmt::format(
            "{} after {} pairs ({} launches, {} failed, {} retried): speedup {:.4f} [{:.4f}, {:.4f}], "
            "Z_accept {:.2f} vs {:.2f}, Z_reject {:.2f} vs {:.2f}; {}",
            decision_name(verdict.decision), verdict.pairs_completed, record.device_runs, record.failed_launches,
            record.retries, verdict.test.speedup, verdict.test.speedup_interval.lower,
            verdict.test.speedup_interval.upper, verdict.test.accept_statistic, verdict.test.accept_bound,
            verdict.test.reject_statistic, verdict.test.reject_bound, verdict.reason);
        Verdict stage_verdict = decision_verdict(verdict.decision);
        if (verdict.candidate_incorrect) {
            outcome.correct = false;
            stage_verdict = Verdict::fail;
        }
        if (verdict.decision == Decision::accept && outcome.cycles_median) {
            if (auto impossible = speed_of_light_violation(*outcome.cycles_median, context.bound,
                                                           config.speed_of_light_tolerance)) {
                stage_verdict = Verdict::suspect;
                summary = "speed_of_light: " + *impossible + "; race: " + summary;
            }
        }
        outcome.accepted = stage_verdict == Verdict::accept;
        record.verdict = stage_verdict;
        record.reason = summary;
        if (race.candidate_journal) context.recorder.close_journal(*race.candidate_journal, record);
        if (race.champion_journal) {
            StageRecord champion_record = record;
            champion_record.verdict = Verdict::champion;
            champion_record.reason = fmt::format("raced by design {}: {}", candidate.design_id, summary);
            context.recorder.close_journal(*race.champion_journal, champion_record);
        }
        StageResult result = ended(record.verdict, record.reason);
        result.recorded = true;
        result.record = record;
        return result;
    }
};

}  // namespace

Verdict decision_verdict(Decision decision) {
    switch (decision) {
        case Decision::accept: return Verdict::accept;
        case Decision::reject: return Verdict::reject;
        case Decision::inconclusive:
        case Decision::continue_racing: return Verdict::inconclusive;
    }
    return Verdict::inconclusive;
}

RaceOutcome run_journalled_race(StageContext& context, const Candidate& side_a, const Candidate& side_b,
                                const RaceConfig& race_config, std::uint64_t check_seed, const char* check_salt,
                                const std::string& b_note, const std::string& a_note,
                                std::shared_ptr<const SequentialDesign> design) {
    const CascadeConfig& config = context.config;
    const auto start = std::chrono::steady_clock::now();
    const Judge judge(context.device, design ? std::move(design) : context.sequential_design());
    CheckPlan race_checks(config.check_fraction, check_seed, side_b.content_hash, check_salt);
    const CheckChooser choose_check = [&](Side) {
        context.race_launch_started();  // the race never exceeds max_launches, set from the allowance
        return race_checks.next();
    };
    const LaunchSpec spec_a{side_a.source_file, context.kernel.spec.name, context.kernel.shape, config.run_extra_args};
    const LaunchSpec spec_b{side_b.source_file, context.kernel.spec.name, context.kernel.shape, config.run_extra_args};
    // Both rows exist before the first launch and every launch is appended as it completes: a
    // killed process leaves a "running" race with its completed launches (interrupted on resume).
    RaceOutcome race;
    race.candidate_journal = context.recorder.open_journal(side_b, StageKind::race, context.kernel, b_note);
    race.champion_journal = context.recorder.open_journal(side_a, StageKind::race, context.kernel, a_note);
    Recorder& recorder = context.recorder;
    const LaunchObserver persist = [&recorder, &race](std::size_t launch_idx, const Observation& observation,
                                                      std::optional<double> wall_ms) {
        const auto& journal = observation.side == Side::candidate ? race.candidate_journal : race.champion_journal;
        if (journal) recorder.append_launch(*journal, race_row(launch_idx, observation, wall_ms));
    };
    RaceConfig gated = race_config;  // the race also stops at the campaign's wall-time budget
    if (!gated.out_of_time) gated.out_of_time = context.out_of_time;
    race.report = judge.race(spec_a, spec_b, gated, persist, choose_check);
    const JudgeReport& report = race.report;
    Outcome& outcome = context.outcome;
    // Cut by the budget itself, not by the race's share of it (race_budget_share): the design is
    // evaluated again when the campaign next runs.
    const auto left_after = context.launches_left ? context.launches_left() : std::nullopt;
    outcome.budget_exhausted = report.verdict.out_of_time ||
                               (report.verdict.aborted && race_config.max_launches > 0 &&
                                report.verdict.launches + 2 > race_config.max_launches && left_after && *left_after < 2);
    outcome.device_runs += static_cast<std::int64_t>(report.verdict.launches);
    outcome.device_secs += report.device_secs;
    if (!report.candidate_cycles.empty()) outcome.cycles_median = median(report.candidate_cycles);
    if (!report.champion_cycles.empty()) outcome.champion_cycles_median = median(report.champion_cycles);
    outcome.speedup = report.verdict.test.speedup;
    outcome.speedup_lower = report.verdict.test.speedup_interval.lower;
    outcome.speedup_upper = report.verdict.test.speedup_interval.upper;
    outcome.race_pairs = report.verdict.pairs_completed;

    race.record.stage = StageKind::race;
    race.record.verdict = decision_verdict(report.verdict.decision);
    race.record.device_runs = static_cast<std::int64_t>(report.observations.size());
    race.record.failed_launches = std::count_if(report.observations.begin(), report.observations.end(),
                                                [](const Observation& observation) { return observation.error.has_value(); });
    race.record.retries = std::count_if(report.observations.begin(), report.observations.end(),
                                        [](const Observation& observation) { return observation.attempt > 0; });
    race.record.secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return race;
}

std::unique_ptr<Stage> make_rules_stage() { return std::make_unique<RulesStage>(); }
std::unique_ptr<Stage> make_estimate_stage() { return std::make_unique<EstimateStage>(); }
std::unique_ptr<Stage> make_compile_stage() { return std::make_unique<CompileStage>(); }
std::unique_ptr<Stage> make_correctness_stage() { return std::make_unique<CorrectnessStage>(); }
std::unique_ptr<Stage> make_screen_stage() { return std::make_unique<ScreenStage>(); }
std::unique_ptr<Stage> make_race_stage() { return std::make_unique<RaceStage>(); }

std::vector<std::unique_ptr<Stage>> cascade_stages() {
    std::vector<std::unique_ptr<Stage>> stages;
    stages.push_back(make_rules_stage());
    stages.push_back(make_estimate_stage());
    stages.push_back(make_compile_stage());
    stages.push_back(make_correctness_stage());
    stages.push_back(make_screen_stage());
    stages.push_back(make_race_stage());
    return stages;
}

double min_bytes(const KernelContext& kernel) {
    if (kernel.min_bytes_moved > 0.0 || kernel.spec.tensors.empty()) return kernel.min_bytes_moved;
    try {
        return kernel_min_bytes(kernel.spec, kernel.shape);
    } catch (const Error&) {
        return 0.0;
    }
}

}  // namespace npuopt::eval
