// The campaign loop (driver.hpp): picks a kernel, asks its search for a proposal, has the
// evaluator judge it and commits the step — the evaluation's records, the tree edge, the
// champion, the counters and the event — in one transaction. Persistence lives in
// campaign_records, the search and its learning in search/kernel_search.

#include "campaign/driver.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "campaign/campaign_records.hpp"
#include "campaign/kernel_runtime.hpp"
#include "campaign/lock.hpp"
#include "campaign/porting.hpp"
#include "campaign/records_io.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "core/interrupt.hpp"
#include "store/tree_store.hpp"
#include "target/toolchain.hpp"

namespace npuopt::campaign {

namespace {

std::uint64_t mix_seed(std::uint64_t seed, const std::string& kernel, std::int64_t step, std::uint64_t salt = 0) {
    std::string hash = content_hash(fmt::format("{}|{}|{}|{}", seed, kernel, step, salt));
    return std::stoull(hash.substr(0, 15), nullptr, 16);
}

std::string last_stage(const eval::Outcome& outcome) {
    return outcome.stages.empty() ? "" : eval::stage_name(outcome.stages.back().stage);
}

std::string final_reason(const eval::Outcome& outcome) {
    if (!outcome.final_reason.empty()) return outcome.final_reason;
    return outcome.stages.empty() ? "" : outcome.stages.back().reason;
}

/// The tree's verdict for a cascade outcome: accepted, or what its last stage's verdict means for the step.
eval::StepVerdict step_verdict(const eval::Outcome& outcome) {
    if (outcome.accepted) return eval::StepVerdict::accepted;
    if (outcome.stages.empty()) return eval::StepVerdict::error;
    return eval::step_verdict_of(outcome.stages.back().verdict);
}

std::string queue_key(const std::string& kernel) { return "user_queue/" + kernel; }

std::vector<std::int64_t> read_queue(store::TreeStore tree, const std::string& kernel) {
    std::vector<std::int64_t> ids;
    const auto text = tree.state(queue_key(kernel));
    if (!text || text->empty()) return ids;
    const nlohmann::json json = nlohmann::json::parse(*text, nullptr, false);
    if (!json.is_array()) return ids;
    for (const auto& id : json) {
        if (id.is_number_integer()) ids.push_back(id.get<std::int64_t>());
    }
    return ids;
}

}  // namespace

bool queue_design(store::CampaignStore& store, const std::string& kernel, std::int64_t design_id) {
    store::TreeStore tree(store.database());
    std::vector<std::int64_t> queue = read_queue(tree, kernel);
    if (std::find(queue.begin(), queue.end(), design_id) != queue.end()) return false;
    queue.push_back(design_id);
    tree.set_state(queue_key(kernel), nlohmann::json(queue).dump());
    return true;
}

std::int64_t queue_user_design(store::CampaignStore& store, const std::string& target, const config::KernelSpec& kernel,
                               const std::string& source, const std::string& file_name) {
    const search::Design design =
        search::design_from_source(target, kernel.name, target::format_shape(kernel.shape), source, "user",
                                   kernel.baseline.has_extension() ? kernel.baseline.extension().string() : ".rs");
    store::Transaction transaction = store.database().transaction();
    store::DesignRecord record;
    record.content_hash = design.content_hash;
    record.target = target;
    record.kernel = kernel.name;
    record.shape = design.shape_text;
    record.template_name = design.template_name;
    record.source = design.source;
    const std::int64_t id = store.record_design(record);
    queue_design(store, kernel.name, id);
    store.record_event("design_added", nlohmann::json{{"kernel", kernel.name},
                                                      {"design_id", id},
                                                      {"hash", design.content_hash},
                                                      {"file", file_name}}
                                           .dump());
    transaction.commit();
    return id;
}

std::string stop_reason_name(StopReason reason) {
    switch (reason) {
        case StopReason::finished: return "finished";
        case StopReason::wall_budget: return "wall_budget";
        case StopReason::device_budget: return "device_budget";
        case StopReason::interrupted: return "interrupted";
        case StopReason::step_limit: return "step_limit";
        case StopReason::all_failed: return "all_failed";
        case StopReason::toolchain_changed: return "toolchain_changed";
        case StopReason::toolchain_missing: return "toolchain_missing";
        case StopReason::token_budget: return "token_budget";
    }
    return "unknown";
}

std::vector<KernelSetup> prepare_kernels(const config::KernelsConfig& kernels, const std::vector<std::string>& selected,
                                         const std::filesystem::path& templates_dir, const std::string& target) {
    std::vector<std::string> dir_errors;
    std::vector<config::TemplateSpec> specs;
    try {
        specs = config::load_template_dir(templates_dir, &dir_errors);
    } catch (const Error& error) {
        dir_errors.push_back(error.what());
    }
    std::vector<KernelSetup> result;
    for (const auto& spec : kernels.kernels) {
        if (!selected.empty() && std::find(selected.begin(), selected.end(), spec.name) == selected.end()) continue;
        KernelSetup setup;
        setup.spec = spec;
        setup.context.spec = spec;
        setup.context.shape = spec.shape;
        for (const auto& error : dir_errors) {
            // A template file that does not parse cannot say its kernel: every kernel hears of it.
            setup.template_errors.push_back(error);
        }
        setup.templates = search::load_kernel_templates(specs, spec, target, setup.template_errors);
        result.push_back(std::move(setup));
    }
    return result;
}

struct CampaignDriver::Impl {
    Impl(store::CampaignStore& campaign_store, Evaluator& step_evaluator, CampaignOptions campaign_options)
        : evaluator(&step_evaluator),
          options(std::move(campaign_options)),
          records(campaign_store, options.dir, options.target) {}

    Evaluator* evaluator;
    CampaignOptions options;
    CampaignRecords records;
    search::RuleCheck rule_check;
    std::vector<std::unique_ptr<KernelRuntime>> kernels;
    Counters counters;
    bool strict_phase = false;           ///< the evaluator runs its strict preset (campaign age ≥ strict_after)
    std::string toolchain_version;
    std::string toolchain_identity;      ///< Evaluator::toolchain_identity at the last check
    std::string last_step_reason;        ///< the final reason of the last evaluated step
    bool port_measure_only = false;      ///< evaluate_step checks and measures without an opponent (a port)
    bool port_unclear = false;           ///< the last measure-only step was not clearly below the baseline
    std::vector<knowledge::SourceRewrite> rewrites;  ///< applied to every source before it is hashed

    // ---- rewrites and known failures --------------------------------------------------------

    /// Every template's instantiations pass through the rewrites of this toolchain version.
    void install_rewrites() {
        if (!options.source_rules) return;
        rewrites = options.source_rules->rewrites();
        install_source_rewrites(kernels, rewrites);
    }

    std::optional<search::Design> ported(const KernelRuntime& kernel, const search::Design& design) const {
        return rewritten_design(kernel, design, rewrites);
    }

    std::vector<std::shared_ptr<search::Template>> open_templates(const KernelRuntime& kernel, std::string* why) const {
        return campaign::open_templates(kernel, options.source_rules, why);
    }

    void block_kernel(KernelRuntime& kernel, const std::string& why) {
        kernel.state = KernelState::blocked;
        kernel.reason = fmt::format("every family fails under {} with a known failure: {}", toolchain_version, why);
        store::Transaction transaction = records.store().database().transaction();
        records.save_kernel(kernel);
        records.emit("kernel_blocked", {{"kernel", kernel.name()}, {"toolchain_version", toolchain_version}, {"reason", kernel.reason}});
        transaction.commit();
    }

    double age() const { return counters.age(options.wall_budget_secs, options.device_run_budget); }

    /// Device runs the budget still allows (none: no device-run budget).
    std::optional<std::int64_t> device_runs_left() const {
        if (options.device_run_budget <= 0) return std::nullopt;
        return std::max<std::int64_t>(0, options.device_run_budget - counters.device_runs);
    }

    // ---- evaluation ------------------------------------------------------------------------

    std::optional<eval::Champion> champion_of(KernelRuntime& kernel) {
        if (!kernel.champion) return std::nullopt;
        eval::Champion champion;
        // The champion's estimate comes from the same (family-corrected) cost model as the
        // candidates' predictions, so that the estimate stage compares like with like; a design
        // that declares no quantities (the baseline) falls back to the toolchain's static schedule.
        std::optional<double> predicted;
        if (!kernel.champion->is_baseline) {
            predicted = kernel.search.cost_model().predict(kernel.champion->family, kernel.champion->quantities_and_features(),
                                                           &kernel.champion->params);
        }
        champion.candidate = records.candidate_of(*kernel.champion, kernel.champion_design_id, predicted);
        champion.cycles_median = kernel.champion_cycles;
        return champion;
    }

    /// The evaluator's outcome; an error that does not end the command becomes an error stage.
    eval::Outcome evaluate(const eval::Candidate& candidate, const std::optional<eval::Champion>& champion,
                           const KernelRuntime& kernel) {
        try {
            evaluator->set_device_run_allowance(device_runs_left());
            return evaluator->evaluate(candidate, champion, kernel.setup.context);
        } catch (const Error& error) {
            if (error.kind() == ErrorKind::interrupted || error.kind() == ErrorKind::store) throw;
            eval::Outcome outcome;
            outcome.final_reason = fmt::format("evaluation ended with an error ({}): {}",
                                               error_kind_name(error.kind()), error.what());
            eval::StageRecord stage;
            stage.stage = eval::StageKind::compile;
            stage.verdict = eval::Verdict::error;
            stage.reason = outcome.final_reason;
            outcome.stages.push_back(stage);
            return outcome;
        }
    }

    store::TreeEdgeRecord edge_of(const KernelRuntime& kernel, const search::Proposal& proposal, std::int64_t design_id,
                                  std::optional<std::int64_t> parent, eval::StepVerdict verdict,
                                  const eval::Outcome& outcome) const {
        std::optional<double> speedup = outcome.speedup;
        const double champion_before = kernel.champion_cycles;
        if (!speedup && outcome.cycles_median && champion_before > 0 && *outcome.cycles_median > 0) {
            speedup = champion_before / *outcome.cycles_median;
        }
        nlohmann::json quantities = proposal.design.quantities;
        for (const auto& [name, value] : proposal.design.features) quantities[name] = value;
        store::TreeEdgeRecord edge;
        edge.kernel = kernel.name();
        edge.design_id = design_id;
        edge.parent_design_id = parent;
        edge.role = proposal.role;
        edge.move = proposal.move;
        edge.reason = proposal.reason;
        edge.step = counters.step + 1;
        edge.verdict = std::string(eval::step_verdict_name(verdict));
        edge.last_stage = last_stage(outcome);
        edge.final_reason = final_reason(outcome);
        edge.cycles = outcome.cycles_median;
        edge.predicted_cycles = proposal.predicted_cycles;
        edge.speedup = speedup;
        edge.device_runs = outcome.device_runs;
        edge.device_secs = outcome.device_secs;
        edge.quantities_json = quantities.dump();
        if (proposal.llm) {
            edge.llm_call_id = proposal.llm->call_id > 0 ? std::optional<std::int64_t>(proposal.llm->call_id) : std::nullopt;
            edge.prompt_hash = proposal.llm->prompt_hash;
            edge.reply_hash = proposal.llm->reply_hash;
            edge.llm_tokens = proposal.llm->tokens;
        }
        return edge;
    }

    /// Evaluate one design of `kernel`, let the search learn from it and commit the step. A
    /// design that failed but whose fix-its were kept is proposed again at once, rewritten
    /// (`fixit_depth` bounds how often in a row).
    eval::StepVerdict evaluate_step(KernelRuntime& kernel, const search::Proposal& proposal, int fixit_depth = 0) {
        std::optional<std::int64_t> parent;
        if (kernel.champion) parent = kernel.champion_design_id;
        const std::int64_t design_id = records.record_design(proposal.design, parent);
        const eval::Candidate candidate = records.candidate_of(proposal.design, design_id, proposal.predicted_cycles);
        // A port re-verifies and re-measures a design already accepted under the old toolchain:
        // checked without an opponent, and kept when clearly below the re-measured baseline
        // (else raced as any other design).
        const bool measure_only = port_measure_only && kernel.champion.has_value();
        eval::Outcome outcome = evaluate(candidate, measure_only ? std::nullopt : champion_of(kernel), kernel);
        port_unclear = false;
        if (measure_only && outcome.accepted) {
            constexpr double k_clearly_below = 0.9;
            const double measured = outcome.cycles_median.value_or(0.0);
            outcome.accepted = measured > 0.0 && measured < k_clearly_below * kernel.champion_cycles;
            port_unclear = !outcome.accepted;
            outcome.final_reason =
                outcome.accepted
                    ? fmt::format("re-verified and re-measured on {}: {:.0f} cycles, {:.2f}x below the re-measured "
                                  "baseline's {:.0f}",
                                  toolchain_version, measured, kernel.champion_cycles / measured, kernel.champion_cycles)
                    : fmt::format("re-measured on {}: {:.0f} cycles, not clearly below the baseline's {:.0f}: raced instead",
                                  toolchain_version, measured, kernel.champion_cycles);
        }

        const bool is_baseline = proposal.design.is_baseline && !kernel.champion;
        const bool is_reference = !kernel.champion;  // the first champion is what speedups are measured against
        const bool becomes_champion = outcome.accepted || (is_baseline && outcome.correct && outcome.cycles_median);
        const bool fix_again = !becomes_champion && outcome.fixit && outcome.fixit->kept && fixit_depth < 2;
        const eval::StepVerdict verdict = becomes_champion ? eval::StepVerdict::accepted : step_verdict(outcome);
        const double champion_before = kernel.champion_cycles;
        const double new_champion_cycles =
            becomes_champion ? outcome.cycles_median.value_or(champion_before) : champion_before;
        const store::TreeEdgeRecord edge = edge_of(kernel, proposal, design_id, parent, verdict, outcome);

        // The search learns (cost model, scheduler, roles) before the step is committed, so that
        // the scheduler's new statistics are saved with it. Steps taken against the baseline
        // itself are not scored: any proposal wins them.
        search::StepFeedback feedback;
        feedback.kernel = kernel.name();
        feedback.proposal = proposal;
        feedback.verdict = verdict;
        feedback.cycles = outcome.cycles_median;
        feedback.device_secs = outcome.device_secs;
        feedback.became_champion = becomes_champion;
        feedback.champion_cycles_before = champion_before;
        feedback.scored = !is_reference && !kernel.champion->is_baseline && proposal.role != "porter";
        feedback.speed_of_light_cycles = kernel.sol_cycles;
        feedback.last_stage = edge.last_stage;
        feedback.final_reason = edge.final_reason;
        kernel.search.notify(feedback);

        kernel.steps_since_accept = becomes_champion ? 0 : kernel.steps_since_accept + 1;
        kernel.runs_since_accept = becomes_champion ? 0 : kernel.runs_since_accept + outcome.device_runs;
        if (becomes_champion && !is_baseline) kernel.accepts_since_revalidation += 1;
        // A baseline that fails for want of a toolchain ends the kernel until the next run (which
        // tries it again); one that fails as a design does not: the search goes on, and the first
        // correct design becomes the reference. One cut short by the budget is tried again.
        bool baseline_failed_now = false;
        if (is_baseline && !becomes_champion && !outcome.budget_exhausted && !fix_again) {
            const std::string why = fmt::format("{} at {}: {}", edge.verdict, edge.last_stage.empty() ? "?" : edge.last_stage,
                                                edge.final_reason);
            if (verdict == eval::StepVerdict::error) {
                kernel.state = KernelState::failed;
                kernel.failure_kind = "toolchain";
                kernel.reason = fmt::format("the baseline did not become champion ({})", why);
            } else {
                kernel.baseline_tried = true;
                kernel.baseline_failure = why;
                baseline_failed_now = true;
            }
        } else if (is_baseline && becomes_champion) {
            kernel.baseline_tried = true;
        }
        counters.step += 1;
        counters.device_runs += outcome.device_runs;
        counters.device_secs += outcome.device_secs;

        std::int64_t link_id = 0;
        evaluator->commit_step([&] {
            store::Transaction transaction = records.store().database().transaction();
            auto tree = records.trees();
            if (tree.find_edge(kernel.name(), design_id)) tree.remove_edge(kernel.name(), design_id);
            tree.record_edge(edge);
            if (becomes_champion) {
                store::ChampionRecord link;
                link.kernel = kernel.name();
                link.design_id = design_id;
                link.step = counters.step;
                link.cycles = new_champion_cycles;
                link.reason = is_baseline    ? "baseline: the first champion"
                              : is_reference ? fmt::format("reference: {} ({}: {})", kernel.reference(), proposal.role,
                                                           proposal.move)
                                             : fmt::format("{}: {} ({})", proposal.role, proposal.move, edge.final_reason);
                link_id = tree.push_champion(link);
            }
            records.save_counters(counters);
            records.save_kernel(kernel);
            records.emit("step", {{"kernel", kernel.name()},
                                  {"step", counters.step},
                                  {"role", proposal.role},
                                  {"design", proposal.design.label()},
                                  {"hash", proposal.design.content_hash},
                                  {"verdict", edge.verdict},
                                  {"cycles", outcome.cycles_median ? nlohmann::json(*outcome.cycles_median) : nlohmann::json()},
                                  {"device_runs", outcome.device_runs}});
            if (kernel.state == KernelState::failed) {
                records.emit("kernel_failed", {{"kernel", kernel.name()}, {"reason", kernel.reason}});
            }
            if (baseline_failed_now) {
                records.emit("baseline_failed", {{"kernel", kernel.name()},
                                                 {"shape", kernel.setup.spec.shape_name},
                                                 {"reason", kernel.baseline_failure},
                                                 {"then", "the search goes on; the first correct design becomes the reference"}});
            }
            if (becomes_champion && is_reference && !is_baseline) {
                records.emit("reference_chosen", {{"kernel", kernel.name()},
                                                  {"design", proposal.design.label()},
                                                  {"cycles", new_champion_cycles},
                                                  {"reference", kernel.reference()}});
            }
            transaction.commit();
        });
        counters.steps_this_run += 1;
        counters.device_runs_this_run += outcome.device_runs;
        if (becomes_champion) {
            if (is_reference) kernel.baseline_cycles = new_champion_cycles;
            kernel.champion = proposal.design;
            kernel.champion_design_id = design_id;
            kernel.champion_link_id = link_id;
            kernel.champion_cycles = new_champion_cycles;
        }
        report(kernel, proposal, edge.verdict);
        last_step_reason = edge.final_reason;
        if (fix_again) return evaluate_fixed(kernel, proposal, *outcome.fixit, fixit_depth);
        return verdict;
    }

    /// The fix-its of `attempt` were kept as rewrites: the design proposed again, rewritten.
    eval::StepVerdict evaluate_fixed(KernelRuntime& kernel, const search::Proposal& failed, const eval::FixitAttempt& attempt,
                                     int fixit_depth) {
        install_rewrites();
        auto design = ported(kernel, failed.design);
        if (!design || design->content_hash == failed.design.content_hash) return eval::StepVerdict::failed;
        std::vector<std::string> edits;
        for (const auto& edit : attempt.edits) {
            const std::string text = fmt::format("`{}` → `{}`", edit.from, edit.to);
            if (std::find(edits.begin(), edits.end(), text) == edits.end()) edits.push_back(text);
        }
        search::Proposal retry = failed;
        retry.design = *design;
        retry.role = failed.role == "baseline" ? "baseline" : "porter";
        retry.move = fmt::format("fix-it {}", fmt::join(edits, ", "));
        retry.reason = fmt::format("{} {} suggested it for {} ({}); the rewrite applies to every source from now on",
                                   edits.size() == 1 ? "the toolchain" : "the toolchain's fix-its", toolchain_version,
                                   failed.design.label(), attempt.reason);
        records.emit("fixit_kept", {{"kernel", kernel.name()}, {"design", failed.design.label()},
                                    {"edits", edits}, {"toolchain_version", toolchain_version}});
        return evaluate_step(kernel, retry, fixit_depth + 1);
    }

    void report(const KernelRuntime& kernel, const search::Proposal& proposal, const std::string& verdict) {
        if (!options.progress) return;
        Progress progress;
        progress.kernel = kernel.name();
        progress.step = counters.step;
        progress.role = proposal.role;
        progress.design = proposal.design.label();
        progress.verdict = verdict;
        if (kernel.champion) progress.champion_cycles = kernel.champion_cycles;
        progress.baseline_cycles = kernel.baseline_cycles;
        progress.reference = kernel.reference();
        if (kernel.baseline_cycles && kernel.champion_cycles > 0) progress.speedup = *kernel.baseline_cycles / kernel.champion_cycles;
        if (kernel.sol_cycles > 0 && kernel.champion_cycles > 0) progress.sol_fraction = kernel.sol_cycles / kernel.champion_cycles;
        progress.device_runs_used = counters.device_runs;
        progress.device_runs_budget = options.device_run_budget;
        progress.wall_secs_used = counters.wall_used();
        progress.wall_secs_budget = options.wall_budget_secs;
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - counters.run_start).count();
        double eta = std::max(0.0, options.wall_budget_secs - counters.wall_used());
        if (counters.device_runs_this_run > 0 && options.device_run_budget > 0) {
            const double per_run = elapsed / static_cast<double>(counters.device_runs_this_run);
            eta = std::min(eta, per_run * static_cast<double>(std::max<std::int64_t>(0, options.device_run_budget - counters.device_runs)));
        }
        progress.eta_secs = eta;
        options.progress(progress);
    }

    // ---- revalidation ----------------------------------------------------------------------

    void revalidate(KernelRuntime& kernel, const std::string& why) {
        auto tree = records.trees();
        auto path = tree.champion_path(kernel.name());
        kernel.accepts_since_revalidation = 0;
        kernel.revalidate_pending = false;
        if (path.size() < 2 || !kernel.champion) {
            store::Transaction transaction = records.store().database().transaction();
            records.save_kernel(kernel);
            transaction.commit();
            return;
        }
        const auto& predecessor_link = path[path.size() - 2];
        auto predecessor_record = records.store().find_design(predecessor_link.design_id);
        auto predecessor_design =
            predecessor_record ? records.design_from_record(kernel, *predecessor_record) : std::nullopt;
        if (!predecessor_design) return;
        eval::Champion champion = *champion_of(kernel);
        eval::Champion predecessor;
        predecessor.candidate = records.candidate_of(*predecessor_design, predecessor_link.design_id, std::nullopt);
        predecessor.cycles_median = predecessor_link.cycles;
        evaluator->set_device_run_allowance(device_runs_left());
        const eval::Outcome outcome = evaluator->revalidate(champion, predecessor, kernel.setup.context);
        // a re-validation the budget cut short decided nothing: the champion stays
        const bool holds = outcome.accepted || outcome.budget_exhausted;
        counters.device_runs += outcome.device_runs;
        counters.device_secs += outcome.device_secs;
        evaluator->commit_step([&] {
            store::Transaction transaction = records.store().database().transaction();
            if (!holds) {
                tree.end_champion(path.back().id, fmt::format("re-validation ({}) failed: {}", why, final_reason(outcome)));
            }
            records.save_counters(counters);
            records.save_kernel(kernel);
            records.emit("revalidation", {{"kernel", kernel.name()},
                                          {"why", why},
                                          {"champion_design_id", kernel.champion_design_id},
                                          {"holds", holds},
                                          {"reason", final_reason(outcome)}});
            transaction.commit();
        });
        counters.device_runs_this_run += outcome.device_runs;
        if (!holds) records.load_champion(kernel, predecessor_link);
    }

    // ---- porting across a toolchain update ---------------------------------------------------

    /// The toolchain changed: the baseline is measured again under the new version (speedups are
    /// against it from now on), then the old champion is ported — rewritten where fix-its taught
    /// how, re-verified, re-measured and raced against the new baseline. When it cannot be
    /// ported, the next best portable design takes its place, and the event says why.
    void port_kernel(KernelRuntime& kernel) {
        const std::string from = kernel.ported_from;
        std::vector<search::Design> candidates = port_candidates(records, kernel, 2 * options.port_attempts);
        kernel.port_pending = false;
        if (!kernel.port_baseline_done) {
            kernel.port_before = {{"champion", kernel.champion ? kernel.champion->label() : std::string()},
                                  {"champion_cycles", kernel.champion_cycles},
                                  {"baseline_cycles", kernel.baseline_cycles ? nlohmann::json(*kernel.baseline_cycles)
                                                                             : nlohmann::json()}};
            records.emit("port_started", {{"kernel", kernel.name()},
                                          {"from", from},
                                          {"to", toolchain_version},
                                          {"before", kernel.port_before},
                                          {"candidates", candidates.size()}});
            kernel.champion.reset();
            kernel.champion_design_id = 0;
            kernel.champion_cycles = 0.0;
            kernel.baseline_cycles.reset();
            kernel.baseline_tried = false;
            kernel.baseline_failure.clear();
            step_baseline(kernel);
            kernel.port_baseline_done = true;
        }
        const std::int64_t baseline_id = kernel.champion_design_id;
        std::string lost;
        int attempts = 0;
        for (const auto& design : candidates) {
            if (attempts >= options.port_attempts || !kernel.active()) break;
            auto port = ported(kernel, design);
            if (!port) continue;
            ++attempts;
            search::Proposal proposal;
            proposal.design = *port;
            proposal.role = "porter";
            proposal.move = fmt::format("port to {}", toolchain_version);
            proposal.reason = fmt::format("{} under {}{}", design.label(), from.empty() ? "the old toolchain" : from,
                                          port->content_hash == design.content_hash ? " (source unchanged)"
                                                                                     : " (source rewritten)");
            if (kernel.champion) {
                proposal.predicted_cycles = kernel.search.cost_model().predict(port->family, port->quantities_and_features(),
                                                                               &port->params);
            }
            port_measure_only = true;
            eval::StepVerdict verdict = evaluate_step(kernel, proposal);
            port_measure_only = false;
            if (port_unclear) verdict = evaluate_step(kernel, proposal);  // close to the baseline: a race decides
            if (kernel.champion && kernel.champion_design_id != baseline_id) break;
            if (lost.empty()) {
                lost = fmt::format("{} could not be ported ({}: {})", design.label(), eval::step_verdict_name(verdict),
                                   last_step_reason);
            }
        }
        const bool ported_one = kernel.champion && kernel.champion_design_id != baseline_id;
        const auto runs_left = device_runs_left();
        if (!ported_one && runs_left && *runs_left <= 0 && kernel.active()) {
            kernel.port_pending = true;  // the budget ran out mid-port: the next run goes on from here
            store::Transaction transaction = records.store().database().transaction();
            records.save_kernel(kernel);
            records.emit("port_paused", {{"kernel", kernel.name()}, {"reason", "the device-run budget is spent"},
                                         {"last", last_step_reason}});
            transaction.commit();
            return;
        }
        kernel.port_baseline_done = false;
        nlohmann::json event = {{"kernel", kernel.name()},
                                {"from", from},
                                {"to", toolchain_version},
                                {"before", kernel.port_before},
                                {"baseline_cycles", kernel.baseline_cycles ? nlohmann::json(*kernel.baseline_cycles) : nlohmann::json()},
                                {"champion", kernel.champion ? kernel.champion->label() : std::string()},
                                {"champion_cycles", kernel.champion_cycles},
                                {"champion_ported", ported_one && lost.empty()},
                                {"attempts", attempts},
                                {"lost", lost}};
        store::Transaction transaction = records.store().database().transaction();
        records.save_kernel(kernel);
        records.emit("port_finished", event);
        transaction.commit();
    }

    // ---- the loop --------------------------------------------------------------------------

    KernelRuntime* pick_kernel() {
        KernelRuntime* best = nullptr;
        double best_priority = -1e300;
        for (auto& kernel : kernels) {
            if (!kernel->active()) continue;
            if (!kernel->champion && !kernel->baseline_tried) return kernel.get();  // baselines first
            if (kernel->port_pending) return kernel.get();  // then ports after a toolchain update
            if (!read_queue(records.trees(), kernel->name()).empty()) return kernel.get();  // then designs users added
            if (options.only_queued) continue;
            const double reference = kernel->sol_cycles > 0
                                         ? kernel->sol_cycles
                                         : (kernel->baseline_cycles ? *kernel->baseline_cycles / 100.0 : 1.0);
            // A kernel whose baseline failed and that has no correct design yet counts as far
            // from its bound (as a baseline is), discounted like the others by its failed steps.
            const double distance =
                kernel->champion ? std::log(std::max(kernel->champion_cycles / std::max(reference, 1e-9), 1.0 + 1e-9))
                                 : std::log(100.0);
            // Distance from the bound, discounted by what the kernel has cost since it last
            // improved: a kernel stuck near the limit of its families yields its turn to kernels
            // still gaining, since every kernel's log-speedup counts alike in the geomean.
            const double priority = distance / (1.0 + 0.05 * static_cast<double>(kernel->steps_since_accept) +
                                                static_cast<double>(kernel->runs_since_accept) / 25.0);
            if (priority > best_priority) {
                best_priority = priority;
                best = kernel.get();
            }
        }
        return best;
    }

    void step_baseline(KernelRuntime& kernel) {
        auto baseline = std::find_if(kernel.setup.templates.begin(), kernel.setup.templates.end(),
                                     [](const auto& tmpl) { return tmpl->is_baseline(); });
        if (baseline == kernel.setup.templates.end()) {
            kernel.baseline_tried = true;
            kernel.baseline_failure = "the kernel's baseline source could not be loaded";
            store::Transaction transaction = records.store().database().transaction();
            records.save_kernel(kernel);
            records.emit("baseline_failed", {{"kernel", kernel.name()},
                                             {"shape", kernel.setup.spec.shape_name},
                                             {"reason", kernel.baseline_failure},
                                             {"then", "the search goes on; the first correct design becomes the reference"}});
            transaction.commit();
            return;
        }
        search::Proposal proposal;
        proposal.design = (*baseline)->instantiate({});
        proposal.role = "baseline";
        proposal.move = "baseline";
        proposal.reason = "the official baseline of kernels.yaml: measured first, it is the first champion";
        evaluate_step(kernel, proposal);
    }

    /// The oldest design a user queued for `kernel` (`npuopt add`), evaluated and raced; false when none.
    bool step_queued(KernelRuntime& kernel) {
        std::vector<std::int64_t> queue = read_queue(records.trees(), kernel.name());
        if (queue.empty()) return false;
        const std::int64_t id = queue.front();
        auto record = records.store().find_design(id);
        auto design = record ? records.design_from_record(kernel, *record) : std::nullopt;
        if (design) {
            search::Proposal proposal;
            proposal.design = *design;
            const QueuedOrigin origin = queued_origin(records.store(), id);  // `npuopt add` or `npuopt import`
            proposal.role = origin.role;
            proposal.move = origin.move;
            proposal.reason = origin.reason;
            evaluate_step(kernel, proposal);
        }
        queue = read_queue(records.trees(), kernel.name());
        queue.erase(std::remove(queue.begin(), queue.end(), id), queue.end());
        store::Transaction transaction = records.store().database().transaction();
        records.trees().set_state(queue_key(kernel.name()), nlohmann::json(queue).dump());
        transaction.commit();
        return true;
    }

    void step_kernel(KernelRuntime& kernel) {
        if (!kernel.champion && !kernel.baseline_tried) {
            step_baseline(kernel);
            return;
        }
        if (kernel.port_pending) {
            port_kernel(kernel);
            return;
        }
        if (step_queued(kernel)) return;
        std::string blocked_by;
        search::ProposalRequest request;
        request.templates = open_templates(kernel, &blocked_by);
        if (!blocked_by.empty()) {
            block_kernel(kernel, blocked_by);
            return;
        }
        request.champion = kernel.champion;
        request.champion_cycles = kernel.champion_cycles;
        request.speed_of_light_cycles = kernel.sol_cycles;
        request.rule_check = rule_check;
        request.age = age();
        request.seed = mix_seed(options.seed, kernel.name(), counters.step);
        request.pick_seed = [this, &kernel](std::size_t attempt) {
            return mix_seed(options.seed, kernel.name(), counters.step, attempt + 1);
        };
        if (auto proposal = kernel.search.next_proposal(request)) {
            evaluate_step(kernel, *proposal);
            if (options.revalidate_every_accepts > 0 &&
                kernel.accepts_since_revalidation >= options.revalidate_every_accepts) {
                revalidate(kernel, fmt::format("every {} accepts", options.revalidate_every_accepts));
            }
            return;
        }
        kernel.state = KernelState::exhausted;
        kernel.reason = "no role has a new design to propose";
        store::Transaction transaction = records.store().database().transaction();
        records.save_kernel(kernel);
        records.emit("kernel_exhausted", {{"kernel", kernel.name()}, {"reason", kernel.reason}});
        transaction.commit();
    }

    /// Late in the campaign (age ≥ strict_after) the evaluator switches to its strict preset: a
    /// false champion costs more the less budget is left to undo it. Recorded as an event.
    void enter_strict_phase_when_due() {
        if (strict_phase || options.strict_after >= 1.0 || age() < options.strict_after) return;
        strict_phase = true;
        evaluator->set_strict(true);
        records.emit("acceptance_strict", {{"age", age()}, {"strict_after", options.strict_after}, {"step", counters.step}});
    }

    /// The run starts: counters read back, budgets and run state written, interrupted stages marked.
    void begin_run() {
        records.begin_run();
        counters = records.load_counters();
        const bool resumed = counters.step > 0;
        std::string why_missing;
        toolchain_version = evaluator->toolchain_version(&why_missing);
        m_why_toolchain_missing = why_missing;
        store::Transaction transaction = records.store().database().transaction();
        records.trees().set_state("budgets", nlohmann::json{{"wall_secs", options.wall_budget_secs},
                                                           {"device_runs", options.device_run_budget},
                                                           {"llm_tokens", options.llm_token_budget},
                                                           {"seed", options.seed},
                                                           {"target", options.target}}
                                                .dump());
        records.set_run_state("running", "");
        // A stage a killed run left "running" keeps its completed launches and is marked
        // interrupted; its design has no tree edge and is evaluated again when proposed.
        const std::int64_t interrupted_rows = records.store().mark_interrupted_evaluations(
            "its process ended in the middle of this stage (killed or crashed); the launches it completed are kept");
        if (interrupted_rows > 0) records.emit("evaluations_interrupted", {{"count", interrupted_rows}});
        records.emit(resumed ? "campaign_resumed" : "campaign_started",
                     {{"step", counters.step}, {"device_runs", counters.device_runs}, {"toolchain_version", toolchain_version}});
        transaction.commit();
    }

    /// Every kernel's state restored; a toolchain change re-validates the champions.
    void restore_kernels() {
        auto tree = records.trees();
        const auto previous_version = tree.state("toolchain_version");
        const bool version_changed = previous_version && !previous_version->empty() && !toolchain_version.empty() &&
                                     *previous_version != toolchain_version;
        for (auto& kernel : kernels) {
            records.restore_kernel(*kernel);
            // A kernel that failed for want of a toolchain gets another chance on every run.
            if (kernel->state == KernelState::failed && kernel->failure_kind == "toolchain" && !toolchain_version.empty()) {
                kernel->state = KernelState::active;
                kernel->reason.clear();
                kernel->failure_kind.clear();
            }
            // new knowledge may open moves; a blocked kernel's known failures are looked at again
            if (kernel->state == KernelState::exhausted || kernel->state == KernelState::blocked) {
                kernel->state = KernelState::active;
            }
            store::Transaction transaction = records.store().database().transaction();
            for (const auto& error : kernel->setup.template_errors) {
                records.emit("template_failed", {{"kernel", kernel->name()}, {"error", error}});
            }
            if (kernel->sol_cycles <= 0) kernel->sol_cycles = evaluator->speed_of_light_cycles(kernel->setup.context);
            if (toolchain_version.empty() && kernel->active()) {
                kernel->state = KernelState::failed;
                kernel->failure_kind = "toolchain";
                kernel->reason = fmt::format("toolchain missing: {}",
                                             m_why_toolchain_missing.empty() ? "no version" : m_why_toolchain_missing);
                records.emit("kernel_failed", {{"kernel", kernel->name()}, {"kind", "toolchain"}, {"reason", kernel->reason}});
            }
            if (version_changed && kernel->state == KernelState::failed) {  // another toolchain, another chance
                kernel->state = KernelState::active;
                kernel->reason.clear();
                kernel->failure_kind.clear();
            }
            if (version_changed && kernel->champion) {
                kernel->port_pending = true;
                kernel->ported_from = *previous_version;
                kernel->port_baseline_done = false;
                kernel->revalidate_pending = false;
            }
            records.save_kernel(*kernel);
            transaction.commit();
        }
        if (!toolchain_version.empty()) {
            if (version_changed) {
                // Measurements under the old version stay, marked stale; the champions are ported.
                const std::int64_t version_id =
                    records.store().record_toolchain_version(options.target, evaluator->toolchain_name(), toolchain_version);
                const std::int64_t stale = records.store().mark_stale_except(options.target, version_id);
                records.emit("toolchain_changed",
                             {{"from", *previous_version}, {"to", toolchain_version}, {"records_marked_stale", stale}});
            }
            tree.set_state("toolchain_version", toolchain_version);
        }
        install_rewrites();
        toolchain_identity = evaluator->toolchain_identity();
        for (auto& kernel : kernels) kernel->search.start();
        for (auto& kernel : kernels) {
            if (kernel->revalidate_pending && kernel->active()) {
                revalidate(*kernel, fmt::format("toolchain changed to {}", toolchain_version));
            }
        }
    }

    /// The toolchain under the running loop: the same (nullopt), gone, or another version.
    std::optional<CampaignResult> toolchain_moved() {
        if (toolchain_version.empty()) return std::nullopt;
        const std::string identity = evaluator->toolchain_identity();
        if (identity == toolchain_identity) return std::nullopt;
        std::string why;
        const std::string version = identity.empty() ? std::string() : evaluator->toolchain_version(&why);
        CampaignResult result;
        if (version.empty()) {
            result.stop = StopReason::toolchain_missing;
            result.message = fmt::format("the toolchain ({}) disappeared under the running campaign: {}; everything "
                                         "recorded is kept — restore it (or set toolchain.bin) and run again to resume",
                                         toolchain_version, why.empty() ? "it is no longer found" : why);
        } else if (version != toolchain_version) {
            result.stop = StopReason::toolchain_changed;
            result.message = fmt::format("the toolchain changed from {} to {} under the running campaign", toolchain_version,
                                         version);
        } else {
            toolchain_identity = identity;  // reinstalled, same version
            return std::nullopt;
        }
        records.emit("toolchain_moved", {{"from", toolchain_version}, {"to", version}, {"message", result.message}});
        return result;
    }

    /// Why the loop must stop before the next step; nullopt to go on.
    std::optional<CampaignResult> stop_condition() const {
        CampaignResult result;
        if (options.stop_requested ? options.stop_requested() : interrupted()) {
            result.stop = StopReason::interrupted;
            result.message = "stopped by a signal after the step in flight";
        } else if (options.max_steps && counters.steps_this_run >= *options.max_steps) {
            result.stop = StopReason::step_limit;
            result.message = fmt::format("stopped after {} steps (step limit)", counters.steps_this_run);
        } else if (options.device_run_budget > 0 && counters.device_runs >= options.device_run_budget) {
            result.stop = StopReason::device_budget;
            result.message = fmt::format("device-run budget spent ({} of {})", counters.device_runs, options.device_run_budget);
        } else if (options.llm_budget && options.llm_budget->exhausted()) {
            result.stop = StopReason::token_budget;
            result.message = fmt::format("LLM token budget spent ({} of {} tokens this run{})",
                                         options.llm_budget->spent_tokens(), options.llm_budget->limit_tokens(),
                                         options.llm_budget->remaining_tokens() > 0 ? "; the rest affords no call" : "");
        } else if (options.wall_budget_secs > 0 && counters.wall_used() >= options.wall_budget_secs) {
            result.stop = StopReason::wall_budget;
            result.message = fmt::format("wall-time budget spent ({:.0f} s of {:.0f} s)", counters.wall_used(),
                                         options.wall_budget_secs);
        } else {
            return std::nullopt;
        }
        return result;
    }

    /// The run ends: counters and run state saved, every kernel's search finished, the result.
    CampaignResult end_run(CampaignResult result) {
        for (auto& kernel : kernels) kernel->search.finish();
        {
            store::Transaction transaction = records.store().database().transaction();
            records.save_counters(counters);
            const bool done = result.stop == StopReason::finished || result.stop == StopReason::all_failed;
            records.set_run_state(done ? "finished" : "stopped", stop_reason_name(result.stop));
            records.emit("campaign_stopped", {{"reason", stop_reason_name(result.stop)},
                                              {"message", result.message},
                                              {"steps", counters.steps_this_run},
                                              {"device_runs", counters.device_runs}});
            transaction.commit();
        }
        result.steps_this_run = counters.steps_this_run;
        result.device_runs_used = counters.device_runs;
        for (const auto& kernel : kernels) {
            KernelOutcome outcome;
            outcome.kernel = kernel->name();
            outcome.status = std::string(kernel_state_name(kernel->state));
            outcome.reason = kernel->reason;
            outcome.shape = kernel->setup.spec.shape_name;
            outcome.baseline_cycles = kernel->baseline_cycles;
            outcome.reference = kernel->reference();
            if (kernel->champion) {
                outcome.champion_cycles = kernel->champion_cycles;
                outcome.champion = kernel->champion->label();
            }
            outcome.designs = kernel->search.designs();
            result.kernels.push_back(outcome);
        }
        return result;
    }

    CampaignResult run_loop() {
        begin_run();
        restore_kernels();
        while (true) {
            if (auto stop = stop_condition()) return end_run(std::move(*stop));
            if (auto stop = toolchain_moved()) return end_run(std::move(*stop));
            enter_strict_phase_when_due();
            KernelRuntime* kernel = pick_kernel();
            if (!kernel) {
                const bool any_champion =
                    std::any_of(kernels.begin(), kernels.end(), [](const auto& k) { return k->champion.has_value(); });
                CampaignResult result;
                result.stop = any_champion ? StopReason::finished : StopReason::all_failed;
                result.message = options.only_queued ? "the designs users added were evaluated"
                                 : any_champion ? "every kernel is exhausted or failed"
                                                : "no kernel could be started: every kernel failed (see kernel reasons)";
                return end_run(std::move(result));
            }
            step_kernel(*kernel);
        }
    }

private:
    std::string m_why_toolchain_missing;
};

CampaignDriver::CampaignDriver(store::CampaignStore& store, Evaluator& evaluator, std::vector<KernelSetup> kernels,
                               CampaignOptions options, std::optional<knowledge::HardwareModel> model,
                               search::RuleCheck rule_check, RoleFactory roles)
    : m_impl(std::make_unique<Impl>(store, evaluator, std::move(options))) {
    m_impl->rule_check = std::move(rule_check);
    const RoleFactory role_factory =
        roles ? std::move(roles) : RoleFactory([](const std::string&) { return search::make_heuristic_roles(); });
    for (auto& setup : kernels) {
        const std::string name = setup.spec.name;
        search::CostModel cost_model = model ? search::CostModel(*model) : search::CostModel();
        m_impl->kernels.push_back(std::make_unique<KernelRuntime>(std::move(setup), role_factory(name), std::move(cost_model)));
        m_impl->kernels.back()->search.set_token_price(m_impl->options.device_secs_per_1k_tokens);
    }
}

CampaignDriver::~CampaignDriver() = default;

CampaignResult CampaignDriver::run() {
    std::optional<CampaignLock> lock;
    if (m_impl->options.take_lock) lock.emplace(CampaignLock::acquire(m_impl->options.dir));
    return m_impl->run_loop();
}

}  // namespace npuopt::campaign
