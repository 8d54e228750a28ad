#include "knowledge/rule_sweep.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

namespace npuopt::knowledge {

namespace {

bool is_checkable_kind(const std::string& kind) {
    return kind == k_rule_upper_bound || kind == k_rule_lower_bound || kind == k_rule_multiple_of ||
           kind == k_rule_runtime;
}

/// Whether the rule reads a quantity the design declares (a runtime rule: all of its features).
bool reads_declared(const store::KbRuleRecord& rule, const Quantities& quantities) {
    if (rule.kind == k_rule_runtime) {
        // A runtime rule matches only on equal features; it is exercised when every feature is declared.
        auto json = nlohmann::json::parse(rule.features_json, nullptr, false);
        if (!json.is_object() || json.empty()) return false;
        for (const auto& [name, value] : json.items()) {
            if (!quantities.contains(name)) return false;
        }
        return true;
    }
    return !rule.quantity.empty() && quantities.contains(rule.quantity);
}

}  // namespace

RuleAudit audit_rules(const std::vector<store::KbRuleRecord>& rules, const std::vector<AcceptedDesign>& accepted) {
    RuleAudit audit;
    for (const auto& rule : rules) {
        RuleAuditRow row;
        row.rule = rule;
        row.active = is_rule_active(rule);
        row.checkable = is_checkable_kind(rule.kind);
        // evaluate_rule ignores the status: the rule as mined, enforced or not.
        for (const auto& design : accepted) {
            if (row.checkable && reads_declared(rule, design.quantities)) row.exercised = true;
            if (evaluate_rule(rule, design.quantities)) row.rejects.push_back(design.label);
        }
        ++audit.rules;
        if (rule.status == "demoted") ++audit.demoted;
        audit.codes.insert(rule.code);
        if (row.checkable) {
            ++audit.mined_checkable;
            if (!row.rejects.empty()) ++audit.mined_imprecise;
        }
        if (row.active) {
            ++audit.active;
            audit.codes_active.insert(rule.code);
            if (row.checkable) {
                ++audit.active_checkable;
                audit.codes_checkable.insert(rule.code);
                if (row.exercised) ++audit.active_exercised;
            }
            if (!row.rejects.empty()) ++audit.active_imprecise;
        }
        audit.rows.push_back(std::move(row));
    }
    audit.precision = audit.active == 0 ? 1.0
                                        : static_cast<double>(audit.active - audit.active_imprecise) /
                                              static_cast<double>(audit.active);
    return audit;
}

RuleSweepReport run_rule_sweep(const target::Toolchain& toolchain, RuleBook& rules,
                               const std::vector<SweepDesign>& designs, const RuleSweepOptions& options) {
    using Clock = std::chrono::steady_clock;
    const auto started = Clock::now();
    RuleSweepReport report;
    report.toolchain_version = rules.version();

    // The checks, in parallel: the toolchain is the slow part and a check has no side effects.
    std::vector<target::CheckResult> checks(designs.size());
    std::vector<double> secs(designs.size(), 0.0);
    std::atomic<std::size_t> next{0};
    auto worker = [&] {
        for (std::size_t index = next++; index < designs.size(); index = next++) {
            const auto start = Clock::now();
            for (int attempt = 0; attempt <= options.transient_retries; ++attempt) {
                checks[index] = toolchain.check(designs[index].file);
                if (checks[index].call.status != target::CallStatus::transient) break;
            }
            secs[index] = std::chrono::duration<double>(Clock::now() - start).count();
        }
    };
    const int workers = std::clamp(options.parallel, 1, 64);
    std::vector<std::thread> threads;
    for (int idx = 0; idx < workers; ++idx) threads.emplace_back(worker);
    for (auto& thread : threads) thread.join();

    // Mining and acceptance in sweep order, as a campaign would meet the designs.
    for (std::size_t index = 0; index < designs.size(); ++index) {
        const SweepDesign& design = designs[index];
        const target::CheckResult& check = checks[index];
        SweepResult result;
        result.label = design.label;
        result.group = design.group;
        result.status = std::string(target::call_status_name(check.call.status));
        result.secs = secs[index];
        for (const auto& diagnostic : check.diagnostics) result.codes.push_back(diagnostic.code);
        const DesignRef ref{design.design_hash, design.file, design.declared};
        if (!check.diagnostics.empty()) result.rule_ids = rules.mine_diagnostics(check.diagnostics, ref, "check");
        if (check.ok && check.call.status == target::CallStatus::ok) {
            result.accepted = true;
            result.demoted = rules.record_acceptance(design.declared, ref);
            report.accepted.push_back({design.label, design.declared});
        } else if (check.call.status != target::CallStatus::failed || check.diagnostics.empty()) {
            result.error = true;
        }
        if (options.on_result) options.on_result(result);
        report.results.push_back(std::move(result));
    }
    report.audit = audit_rules(rules.list(false), report.accepted);
    report.wall_secs = std::chrono::duration<double>(Clock::now() - started).count();
    return report;
}

}  // namespace npuopt::knowledge
