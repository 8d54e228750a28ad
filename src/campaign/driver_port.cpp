// Porting across a toolchain update (the baseline re-measured, the old champion ported and
// raced), re-validation of a champion against its predecessor, and the source rewrites fix-its taught.

#include "campaign/driver_impl.hpp"

#include <fmt/format.h>

#include "campaign/porting.hpp"

namespace npuopt::campaign {

using namespace driver_detail;

// ---- rewrites and known failures --------------------------------------------------------

/// Every template's instantiations pass through the rewrites of this toolchain version.
void CampaignDriver::Impl::install_rewrites() {
    if (!options.source_rules) return;
    rewrites = options.source_rules->rewrites();
    install_source_rewrites(kernels, rewrites);
}

std::optional<search::Design> CampaignDriver::Impl::ported(const KernelRuntime& kernel,
                                                           const search::Design& design) const {
    return rewritten_design(kernel, design, rewrites);
}

std::vector<std::shared_ptr<search::Template>> CampaignDriver::Impl::open_templates(const KernelRuntime& kernel,
                                                                                    std::string* why) const {
    return campaign::open_templates(kernel, options.source_rules, why);
}

void CampaignDriver::Impl::block_kernel(KernelRuntime& kernel, const std::string& why) {
    kernel.state = KernelState::blocked;
    kernel.reason = fmt::format("every family fails under {} with a known failure: {}", toolchain_version, why);
    store::Transaction transaction = records.store().database().transaction();
    records.save_kernel(kernel);
    records.emit("kernel_blocked",
                 {{"kernel", kernel.name()}, {"toolchain_version", toolchain_version}, {"reason", kernel.reason}});
    transaction.commit();
}

void CampaignDriver::Impl::revalidate(KernelRuntime& kernel, const std::string& why) {
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
    apply_budgets(*evaluator);
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

void CampaignDriver::Impl::port_kernel(KernelRuntime& kernel) {
    const std::string from = kernel.ported_from;
    std::vector<search::Design> candidates = port_candidates(records, kernel, 2 * options.port_attempts);
    kernel.port_pending = false;
    if (!kernel.port_baseline_done) {
        kernel.port_before = {
            {"champion", kernel.champion ? kernel.champion->label() : std::string()},
            {"champion_cycles", kernel.champion_cycles},
            {"baseline_cycles", kernel.baseline_cycles ? nlohmann::json(*kernel.baseline_cycles) : nlohmann::json()}};
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
        proposal.reason =
            fmt::format("{} under {}{}", design.label(), from.empty() ? "the old toolchain" : from,
                        port->content_hash == design.content_hash ? " (source unchanged)" : " (source rewritten)");
        if (kernel.champion) {
            proposal.predicted_cycles =
                kernel.search.cost_model().predict(port->family, port->quantities_and_features(), &port->params);
        }
        port_measure_only = true;
        eval::StepVerdict verdict = evaluate_step(kernel, proposal);
        port_measure_only = false;
        if (port_unclear) verdict = evaluate_step(kernel, proposal);  // close to the baseline: a race decides
        if (kernel.champion && kernel.champion_design_id != baseline_id) break;
        // No fix-it mended it (or it failed for another reason): where an LLM is configured,
        // the porter tries, with the diagnostics and the new version's release notes.
        if (!eval::step_measured(verdict) && port_with_llm(kernel, *port, design.label(), from, baseline_id)) break;
        if (lost.empty()) {
            lost = fmt::format("{} could not be ported ({}: {})", design.label(), eval::step_verdict_name(verdict),
                               last_step_reason);
        }
    }
    const bool ported_one = kernel.champion && kernel.champion_design_id != baseline_id;
    const bool by_llm = ported_one && kernel.champion && kernel.champion->template_name == "llm-porter";
    const auto runs_left = device_runs_left();
    if (!ported_one && runs_left && *runs_left <= 0 && kernel.active()) {
        kernel.port_pending = true;  // the budget ran out mid-port: the next run goes on from here
        store::Transaction transaction = records.store().database().transaction();
        records.save_kernel(kernel);
        records.emit(
            "port_paused",
            {{"kernel", kernel.name()}, {"reason", "the device-run budget is spent"}, {"last", last_step_reason}});
        transaction.commit();
        return;
    }
    kernel.port_baseline_done = false;
    nlohmann::json event = {
        {"kernel", kernel.name()},
        {"from", from},
        {"to", toolchain_version},
        {"before", kernel.port_before},
        {"baseline_cycles", kernel.baseline_cycles ? nlohmann::json(*kernel.baseline_cycles) : nlohmann::json()},
        {"champion", kernel.champion ? kernel.champion->label() : std::string()},
        {"champion_cycles", kernel.champion_cycles},
        {"champion_ported", ported_one && lost.empty()},
        {"ported_by", !ported_one ? "" : by_llm ? "llm-porter" : "porter"},
        {"attempts", attempts},
        {"lost", lost}};
    store::Transaction transaction = records.store().database().transaction();
    reopen_moved_terms(kernel);
    records.save_kernel(kernel);
    records.emit("port_finished", event);
    transaction.commit();
}

void CampaignDriver::Impl::reopen_moved_terms(KernelRuntime& kernel) {
    constexpr std::int64_t k_reopen_steps = 8;
    kernel.reopened_terms.clear();
    kernel.reopen_steps_left = 0;
    const auto changed = records.store().last_event("hardware_model_changed");
    if (!changed) return;
    const nlohmann::json payload = nlohmann::json::parse(changed->payload_json, nullptr, false);
    if (!payload.is_object() || payload.value("to", std::string()) != toolchain_version) return;
    for (const auto& term : payload.value("terms", nlohmann::json::array())) {
        if (term.is_object() && term.contains("term") && term["term"].is_string()) {
            kernel.reopened_terms.push_back(term["term"].get<std::string>());
        }
    }
    if (kernel.reopened_terms.empty()) return;
    kernel.reopen_steps_left = k_reopen_steps;
    records.mark_stale_designs(kernel);
    records.emit("parameters_reopened", {{"kernel", kernel.name()},
                                         {"terms", kernel.reopened_terms},
                                         {"moved", payload.value("moved", nlohmann::json::array())},
                                         {"steps", k_reopen_steps},
                                         {"then", "the analyst first re-tunes the parameters that move these terms"}});
}

bool CampaignDriver::Impl::port_with_llm(KernelRuntime& kernel, const search::Design& failing, const std::string& label,
                                         const std::string& from, std::int64_t baseline_id) {
    if (!kernel.porter_made) {
        kernel.porter_made = true;
        if (options.porter_factory) kernel.porter = options.porter_factory(kernel.name());
    }
    if (!kernel.porter) return false;
    search::PortRequest request;
    request.design_label = label;
    request.source = failing.source;
    request.diagnostics = last_step_reason;
    request.from = from;
    request.to = toolchain_version;
    for (int turn = 0; turn < std::max(1, options.porter_turns) && kernel.active(); ++turn) {
        std::vector<search::Proposal> proposals = kernel.porter->port(request);
        if (proposals.empty()) return false;
        for (auto& proposal : proposals) {  // best-of-n: the cascade sorts the choices
            if (!kernel.active()) return false;
            proposal.reason = fmt::format("{} under {}, failing under {}: {}", label,
                                          from.empty() ? "the old toolchain" : from, toolchain_version, proposal.reason);
            port_measure_only = true;
            evaluate_step(kernel, proposal);
            port_measure_only = false;
            if (port_unclear) evaluate_step(kernel, proposal);
            if (kernel.champion && kernel.champion_design_id != baseline_id) return true;
            request.repair_of = proposal.design.content_hash;
            request.source = proposal.design.source;
            request.diagnostics = last_step_reason;
        }
    }
    return false;
}

}  // namespace npuopt::campaign
