// A run of the campaign loop begins (counters, budgets, kernels restored, a toolchain change
// noticed) and ends (the result); between steps, why it must stop.

#include "campaign/driver_impl.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/interrupt.hpp"

namespace npuopt::campaign {

using namespace driver_detail;

void CampaignDriver::Impl::begin_run() {
    records.begin_run();
    counters = records.load_counters();
    const bool resumed = counters.step > 0;
    std::string why_missing;
    toolchain_version = evaluator->toolchain_version(&why_missing);
    why_toolchain_missing = why_missing;
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
    records.emit(
        resumed ? "campaign_resumed" : "campaign_started",
        {{"step", counters.step}, {"device_runs", counters.device_runs}, {"toolchain_version", toolchain_version}});
    transaction.commit();
}

void CampaignDriver::Impl::restore_kernels() {
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
                                         why_toolchain_missing.empty() ? "no version" : why_toolchain_missing);
            records.emit("kernel_failed",
                         {{"kernel", kernel->name()}, {"kind", "toolchain"}, {"reason", kernel->reason}});
        }
        if (version_changed && kernel->state == KernelState::failed) {  // another toolchain, another chance
            kernel->state = KernelState::active;
            kernel->reason.clear();
            kernel->failure_kind.clear();
        }
        if (version_changed) {
            // What an old toolchain counted beyond the templates' formulas is not what the new
            // one counts: the offsets are learnt again from its own diagnostics.
            nlohmann::json dropped = kernel->clear_quantity_offsets();
            if (!dropped.empty()) {
                records.emit("quantity_offsets_cleared", {{"kernel", kernel->name()},
                                                          {"from", *previous_version},
                                                          {"to", toolchain_version},
                                                          {"offsets", std::move(dropped)}});
            }
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
            const std::int64_t version_id = records.store().record_toolchain_version(
                options.target, evaluator->toolchain_name(), toolchain_version);
            const std::int64_t stale = records.store().mark_stale_except(options.target, version_id);
            records.emit("toolchain_changed",
                         {{"from", *previous_version}, {"to", toolchain_version}, {"records_marked_stale", stale}});
        }
        tree.set_state("toolchain_version", toolchain_version);
    }
    install_rewrites();
    toolchain_identity = evaluator->toolchain_identity();
    for (auto& kernel : kernels)
        kernel->search.start();
    for (auto& kernel : kernels) {
        if (kernel->revalidate_pending && kernel->active()) {
            revalidate(*kernel, fmt::format("toolchain changed to {}", toolchain_version));
        }
    }
}

std::optional<CampaignResult> CampaignDriver::Impl::toolchain_moved() {
    if (toolchain_version.empty()) return std::nullopt;
    const std::string identity = evaluator->toolchain_identity();
    if (identity == toolchain_identity) return std::nullopt;
    std::string why;
    const std::string version = identity.empty() ? std::string() : evaluator->toolchain_version(&why);
    CampaignResult result;
    if (version.empty()) {
        result.stop = StopReason::toolchain_missing;
        result.message = fmt::format(
            "the toolchain ({}) disappeared under the running campaign: {}; everything "
            "recorded is kept — restore it (or set toolchain.bin) and run again to resume",
            toolchain_version, why.empty() ? "it is no longer found" : why);
    } else if (version != toolchain_version) {
        result.stop = StopReason::toolchain_changed;
        result.message =
            fmt::format("the toolchain changed from {} to {} under the running campaign", toolchain_version, version);
    } else {
        toolchain_identity = identity;  // reinstalled, same version
        return std::nullopt;
    }
    records.emit("toolchain_moved", {{"from", toolchain_version}, {"to", version}, {"message", result.message}});
    return result;
}

std::optional<CampaignResult> CampaignDriver::Impl::stop_condition() const {
    CampaignResult result;
    if (options.stop_requested ? options.stop_requested() : interrupted()) {
        result.stop = StopReason::interrupted;
        result.message = "stopped by a signal after the step in flight";
    } else if (options.max_steps && counters.steps_this_run >= *options.max_steps) {
        result.stop = StopReason::step_limit;
        result.message = fmt::format("stopped after {} steps (step limit)", counters.steps_this_run);
    } else if (options.device_run_budget > 0 && counters.device_runs >= options.device_run_budget) {
        result.stop = StopReason::device_budget;
        result.message =
            fmt::format("device-run budget spent ({} of {})", counters.device_runs, options.device_run_budget);
    } else if (options.llm_budget && options.llm_budget->exhausted()) {
        result.stop = StopReason::token_budget;
        result.message = fmt::format("LLM token budget spent ({} of {} tokens this run{})",
                                     options.llm_budget->spent_tokens(), options.llm_budget->limit_tokens(),
                                     options.llm_budget->remaining_tokens() > 0 ? "; the rest affords no call" : "");
    } else if (options.wall_budget_secs > 0 && counters.wall_used() >= wall_limit()) {
        result.stop = StopReason::wall_budget;
        const double reserve = options.wall_budget_secs - wall_limit();
        result.message = reserve > 0.5 ? fmt::format("wall-time budget spent ({:.0f} s of {:.0f} s, {:.0f} s kept for "
                                                     "the submission)",
                                                     counters.wall_used(), options.wall_budget_secs, reserve)
                                       : fmt::format("wall-time budget spent ({:.0f} s of {:.0f} s)",
                                                     counters.wall_used(), options.wall_budget_secs);
    } else {
        return std::nullopt;
    }
    return result;
}

CampaignResult CampaignDriver::Impl::end_run(CampaignResult result) {
    for (auto& kernel : kernels)
        kernel->search.finish();
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

}  // namespace npuopt::campaign
