// One evaluated step of the campaign loop: the design recorded, measured by the evaluator, the
// decision taken, the search told, and the step committed in one transaction.

#include "campaign/driver_impl.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "core/error.hpp"

namespace npuopt::campaign {

using namespace driver_detail;

std::optional<std::int64_t> CampaignDriver::Impl::device_runs_left() const {
    if (options.device_run_budget <= 0) return std::nullopt;
    return std::max<std::int64_t>(0, options.device_run_budget - counters.device_runs);
}

double CampaignDriver::Impl::wall_limit() const {
    if (options.wall_budget_secs <= 0) return 0.0;
    if (!options.wall_reserve_secs) return options.wall_budget_secs;
    const double mean_launch =
        counters.device_runs > 0 ? counters.device_secs / static_cast<double>(counters.device_runs) : 0.0;
    return std::max(1e-9, options.wall_budget_secs - std::max(0.0, options.wall_reserve_secs(mean_launch)));
}

void CampaignDriver::Impl::apply_budgets(Evaluator& to, std::int64_t share) {
    auto runs = device_runs_left();
    if (runs && share > 1) *runs = *runs / share;
    to.set_device_run_allowance(runs);
    if (options.wall_budget_secs > 0) {
        const double left = std::max(0.0, wall_limit() - counters.wall_used());
        to.set_deadline(std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(left)));
    } else {
        to.set_deadline(std::nullopt);
    }
}

std::optional<eval::Champion> CampaignDriver::Impl::champion_of(KernelRuntime& kernel) {
    if (!kernel.champion) return std::nullopt;
    eval::Champion champion;
    // The champion's estimate comes from the same (family-corrected) cost model as the
    // candidates' predictions, so that the estimate stage compares like with like; a design
    // that declares no quantities (the baseline) falls back to the toolchain's static schedule.
    std::optional<double> predicted;
    if (!kernel.champion->is_baseline) {
        predicted = kernel.search.cost_model().predict(
            kernel.champion->family, kernel.champion->quantities_and_features(), &kernel.champion->params);
    }
    champion.candidate = records.candidate_of(*kernel.champion, kernel.champion_design_id, predicted);
    champion.cycles_median = kernel.champion_cycles;
    return champion;
}

eval::Outcome CampaignDriver::Impl::evaluate(Evaluator& by, const eval::Candidate& candidate,
                                             const std::optional<eval::Champion>& champion,
                                             const KernelRuntime& kernel) {
    try {
        return by.evaluate(candidate, champion, kernel.setup.context);
    } catch (const Error& error) {
        if (error.kind() == ErrorKind::interrupted || error.kind() == ErrorKind::store) throw;
        eval::Outcome outcome;
        outcome.final_reason =
            fmt::format("evaluation ended with an error ({}): {}", error_kind_name(error.kind()), error.what());
        eval::StageRecord stage;
        stage.stage = eval::StageKind::compile;
        stage.verdict = eval::Verdict::error;
        stage.reason = outcome.final_reason;
        outcome.stages.push_back(stage);
        return outcome;
    }
}

store::TreeEdgeRecord CampaignDriver::Impl::edge_of(const KernelRuntime& kernel, const search::Proposal& proposal,
                                                    std::int64_t design_id, std::optional<std::int64_t> parent,
                                                    eval::StepVerdict verdict, const eval::Outcome& outcome) const {
    std::optional<double> speedup = outcome.speedup;
    const double champion_before = kernel.champion_cycles;
    if (!speedup && outcome.cycles_median && champion_before > 0 && *outcome.cycles_median > 0) {
        speedup = champion_before / *outcome.cycles_median;
    }
    nlohmann::json quantities = proposal.design.quantities;
    for (const auto& [name, value] : proposal.design.features)
        quantities[name] = value;
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
        edge.llm_call_id =
            proposal.llm->call_id > 0 ? std::optional<std::int64_t>(proposal.llm->call_id) : std::nullopt;
        edge.prompt_hash = proposal.llm->prompt_hash;
        edge.reply_hash = proposal.llm->reply_hash;
        edge.llm_tokens = proposal.llm->tokens;
    }
    return edge;
}

eval::StepVerdict CampaignDriver::Impl::evaluate_step(KernelRuntime& kernel, const search::Proposal& proposal,
                                                      int fixit_depth) {
    PreparedStep step = prepare_step(kernel, proposal);
    apply_budgets(*evaluator);
    measure_step(step, *evaluator);
    return finish_step(step, *evaluator, fixit_depth);
}

PreparedStep CampaignDriver::Impl::prepare_step(KernelRuntime& kernel, const search::Proposal& proposal) {
    PreparedStep step;
    step.kernel = &kernel;
    step.proposal = proposal;
    if (kernel.champion) step.parent = kernel.champion_design_id;
    step.design_id = records.record_design(proposal.design, step.parent);
    step.candidate = records.candidate_of(proposal.design, step.design_id, proposal.predicted_cycles);
    step.candidate.clear_win_only = proposal.clear_win_only;
    // A port re-verifies and re-measures a design already accepted under the old toolchain:
    // checked without an opponent, and kept when clearly below the re-measured baseline
    // (else raced as any other design).
    step.measure_only = port_measure_only && kernel.champion.has_value();
    if (!step.measure_only) step.opponent = champion_of(kernel);
    return step;
}

void CampaignDriver::Impl::measure_step(PreparedStep& step, Evaluator& by) {
    const KernelRuntime& kernel = *step.kernel;
    eval::Outcome outcome = evaluate(by, step.candidate, step.opponent, kernel);
    if (step.measure_only && outcome.accepted) {
        constexpr double k_clearly_below = 0.9;
        const double measured = outcome.cycles_median.value_or(0.0);
        outcome.accepted = measured > 0.0 && measured < k_clearly_below * kernel.champion_cycles;
        step.unclear = !outcome.accepted;
        outcome.final_reason =
            outcome.accepted
                ? fmt::format(
                      "re-verified and re-measured on {}: {:.0f} cycles, {:.2f}x below the re-measured "
                      "baseline's {:.0f}",
                      toolchain_version, measured, kernel.champion_cycles / measured, kernel.champion_cycles)
                : fmt::format(
                      "re-measured on {}: {:.0f} cycles, not clearly below the baseline's {:.0f}: raced instead",
                      toolchain_version, measured, kernel.champion_cycles);
    }
    step.outcome = std::move(outcome);
}

eval::StepVerdict CampaignDriver::Impl::finish_step(PreparedStep& step, Evaluator& by, int fixit_depth) {
    KernelRuntime& kernel = *step.kernel;
    const search::Proposal& proposal = step.proposal;
    const std::int64_t design_id = step.design_id;
    port_unclear = step.unclear;
    StepDecision decision =
        decide_step(kernel, proposal, design_id, step.parent, std::move(step.outcome), fixit_depth);
    // A candidate of a parallel round accepted against the champion the round began with, when an
    // earlier step of the round replaced that champion: its win says nothing about the new one.
    const bool stale = step.replaced_by && decision.becomes_champion;
    if (stale) {
        decision.becomes_champion = false;
        decision.fix_again = false;
        decision.verdict = eval::StepVerdict::inconclusive;
        decision.new_champion_cycles = decision.champion_before;
        decision.edge.verdict = std::string(eval::step_verdict_name(decision.verdict));
        decision.edge.final_reason = fmt::format(
            "stale: {}; but design {} replaced that champion earlier in the same round: raced again against it next",
            decision.edge.final_reason, *step.replaced_by);
    }
    learn_from_step(kernel, proposal, decision);
    const auto corrections = kernel.learn_quantity_misses(proposal.design.template_name, decision.outcome.quantity_misses);
    account_step(kernel, decision);
    std::int64_t link_id = 0;
    // A design whose evaluation a budget cut at a launch boundary is evaluated again, first,
    // when the campaign next runs (a baseline is retried anyway; a port is redone as a port).
    const bool resume = decision.outcome.budget_exhausted && !decision.is_baseline && !decision.becomes_champion &&
                        !port_measure_only;
    by.commit_step([&] {
        link_id = commit_step_records(kernel, proposal, decision);
        for (const auto& correction : corrections) {
            records.emit("quantity_corrected", {{"kernel", kernel.name()},
                                                {"design_id", design_id},
                                                {"template", correction.template_name},
                                                {"quantity", correction.quantity},
                                                {"declared", correction.declared},
                                                {"reported", correction.reported},
                                                {"code", correction.code},
                                                {"offset", correction.offset}});
        }
        if (resume) {
            auto queue = read_resume_queue(records.trees(), kernel.name());
            queue.push_back({design_id, proposal.role, proposal.move, proposal.reason});
            write_resume_queue(records.trees(), kernel.name(), queue);
            records.emit("step_cut", {{"kernel", kernel.name()},
                                      {"design_id", design_id},
                                      {"reason", decision.edge.final_reason},
                                      {"then", "evaluated again first when the campaign next runs"}});
        } else if (stale) {
            auto queue = read_resume_queue(records.trees(), kernel.name());
            queue.push_back({design_id, proposal.role, proposal.move,
                             fmt::format("re-raced: accepted against design {}, which design {} replaced in the "
                                         "same round; {}",
                                         step.opponent->candidate.design_id, *step.replaced_by, proposal.reason)});
            write_resume_queue(records.trees(), kernel.name(), queue);
            records.emit("step_stale", {{"kernel", kernel.name()},
                                        {"design_id", design_id},
                                        {"opponent", step.opponent->candidate.design_id},
                                        {"replaced_by", *step.replaced_by},
                                        {"then", "raced again against the new champion next"}});
        }
    });
    counters.steps_this_run += 1;
    counters.device_runs_this_run += decision.outcome.device_runs;
    if (decision.becomes_champion) {
        if (decision.is_reference) kernel.baseline_cycles = decision.new_champion_cycles;
        kernel.champion = proposal.design;
        kernel.champion_design_id = design_id;
        kernel.champion_link_id = link_id;
        kernel.champion_cycles = decision.new_champion_cycles;
    }
    report(kernel, proposal, decision.edge.verdict);
    last_step_reason = decision.edge.final_reason;
    if (decision.fix_again) return evaluate_fixed(kernel, proposal, *decision.outcome.fixit, fixit_depth);
    return decision.verdict;
}

StepDecision CampaignDriver::Impl::decide_step(const KernelRuntime& kernel, const search::Proposal& proposal,
                                               std::int64_t design_id, std::optional<std::int64_t> parent,
                                               eval::Outcome outcome, int fixit_depth) const {
    StepDecision decision;
    decision.design_id = design_id;
    decision.parent = parent;
    decision.is_baseline = proposal.design.is_baseline && !kernel.champion;
    decision.is_reference = !kernel.champion;  // the first champion is what speedups are measured against
    decision.becomes_champion = outcome.accepted || (decision.is_baseline && outcome.correct && outcome.cycles_median);
    decision.fix_again = !decision.becomes_champion && outcome.fixit && outcome.fixit->kept && fixit_depth < 2;
    decision.verdict = decision.becomes_champion ? eval::StepVerdict::accepted : step_verdict(outcome);
    decision.champion_before = kernel.champion_cycles;
    decision.new_champion_cycles =
        decision.becomes_champion ? outcome.cycles_median.value_or(decision.champion_before) : decision.champion_before;
    decision.edge = edge_of(kernel, proposal, design_id, parent, decision.verdict, outcome);
    decision.outcome = std::move(outcome);
    return decision;
}

void CampaignDriver::Impl::learn_from_step(KernelRuntime& kernel, const search::Proposal& proposal,
                                           const StepDecision& decision) {
    // Learning comes before the commit, so that the scheduler's new statistics are saved with the
    // step. Steps taken against the baseline itself are not scored: any proposal wins them.
    search::StepFeedback feedback;
    feedback.kernel = kernel.name();
    feedback.proposal = proposal;
    feedback.verdict = decision.verdict;
    feedback.cycles = decision.outcome.cycles_median;
    feedback.device_secs = decision.outcome.device_secs;
    feedback.became_champion = decision.becomes_champion;
    feedback.champion_cycles_before = decision.champion_before;
    feedback.scored = !decision.is_reference && !kernel.champion->is_baseline && proposal.role != "porter" &&
                      proposal.role != "llm-porter";
    feedback.speed_of_light_cycles = kernel.sol_cycles;
    feedback.last_stage = decision.edge.last_stage;
    feedback.final_reason = decision.edge.final_reason;
    kernel.search.notify(feedback);
    if (kernel.porter && proposal.role == "llm-porter") kernel.porter->notify(feedback);
}

void CampaignDriver::Impl::account_step(KernelRuntime& kernel, StepDecision& decision) {
    const eval::Outcome& outcome = decision.outcome;
    kernel.steps_since_accept = decision.becomes_champion ? 0 : kernel.steps_since_accept + 1;
    kernel.runs_since_accept = decision.becomes_champion ? 0 : kernel.runs_since_accept + outcome.device_runs;
    if (decision.becomes_champion && !decision.is_baseline) kernel.accepts_since_revalidation += 1;
    // A baseline that fails for want of a toolchain ends the kernel until the next run (which
    // tries it again); one that fails as a design does not: the search goes on, and the first
    // correct design becomes the reference. One cut short by the budget is tried again.
    if (decision.is_baseline && !decision.becomes_champion && !outcome.budget_exhausted && !decision.fix_again) {
        const store::TreeEdgeRecord& edge = decision.edge;
        const std::string why = fmt::format("{} at {}: {}", edge.verdict,
                                            edge.last_stage.empty() ? "?" : edge.last_stage, edge.final_reason);
        if (decision.verdict == eval::StepVerdict::error) {
            kernel.state = KernelState::failed;
            kernel.failure_kind = "toolchain";
            kernel.reason = fmt::format("the baseline did not become champion ({})", why);
        } else {
            kernel.baseline_tried = true;
            kernel.baseline_failure = why;
            decision.baseline_failed_now = true;
        }
    } else if (decision.is_baseline && decision.becomes_champion) {
        kernel.baseline_tried = true;
    }
    counters.step += 1;
    counters.device_runs += outcome.device_runs;
    counters.device_secs += outcome.device_secs;
}

std::int64_t CampaignDriver::Impl::commit_step_records(KernelRuntime& kernel, const search::Proposal& proposal,
                                                       const StepDecision& decision) {
    const store::TreeEdgeRecord& edge = decision.edge;
    const eval::Outcome& outcome = decision.outcome;
    std::int64_t link_id = 0;
    store::Transaction transaction = records.store().database().transaction();
    auto tree = records.trees();
    if (tree.find_edge(kernel.name(), decision.design_id)) tree.remove_edge(kernel.name(), decision.design_id);
    tree.record_edge(edge);
    if (decision.becomes_champion) {
        store::ChampionRecord link;
        link.kernel = kernel.name();
        link.design_id = decision.design_id;
        link.step = counters.step;
        link.cycles = decision.new_champion_cycles;
        link.reason = decision.is_baseline ? "baseline: the first champion"
                      : decision.is_reference
                          ? fmt::format("reference: {} ({}: {})", kernel.reference(), proposal.role, proposal.move)
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
    if (decision.baseline_failed_now) {
        records.emit("baseline_failed",
                     {{"kernel", kernel.name()},
                      {"shape", kernel.setup.spec.shape_name},
                      {"reason", kernel.baseline_failure},
                      {"then", "the search goes on; the first correct design becomes the reference"}});
    }
    if (decision.becomes_champion && decision.is_reference && !decision.is_baseline) {
        records.emit("reference_chosen", {{"kernel", kernel.name()},
                                          {"design", proposal.design.label()},
                                          {"cycles", decision.new_champion_cycles},
                                          {"reference", kernel.reference()}});
    }
    transaction.commit();
    return link_id;
}

eval::StepVerdict CampaignDriver::Impl::evaluate_fixed(KernelRuntime& kernel, const search::Proposal& failed,
                                                       const eval::FixitAttempt& attempt, int fixit_depth) {
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
    records.emit("fixit_kept", {{"kernel", kernel.name()},
                                {"design", failed.design.label()},
                                {"edits", edits},
                                {"toolchain_version", toolchain_version}});
    return evaluate_step(kernel, retry, fixit_depth + 1);
}

void CampaignDriver::Impl::report(const KernelRuntime& kernel, const search::Proposal& proposal,
                                  const std::string& verdict) {
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
    if (kernel.baseline_cycles && kernel.champion_cycles > 0)
        progress.speedup = *kernel.baseline_cycles / kernel.champion_cycles;
    if (kernel.sol_cycles > 0 && kernel.champion_cycles > 0)
        progress.sol_fraction = kernel.sol_cycles / kernel.champion_cycles;
    progress.device_runs_used = counters.device_runs;
    progress.device_runs_budget = options.device_run_budget;
    progress.wall_secs_used = counters.wall_used();
    progress.wall_secs_budget = options.wall_budget_secs;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - counters.run_start).count();
    double eta = std::max(0.0, wall_limit() - counters.wall_used());
    if (counters.device_runs_this_run > 0 && options.device_run_budget > 0) {
        const double per_run = elapsed / static_cast<double>(counters.device_runs_this_run);
        eta = std::min(eta, per_run * static_cast<double>(
                                          std::max<std::int64_t>(0, options.device_run_budget - counters.device_runs)));
    }
    progress.eta_secs = eta;
    options.progress(progress);
}

}  // namespace npuopt::campaign
