// `npuopt status`: the campaign's state from its database alone.

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "campaign/driver.hpp"
#include "store/llm_store.hpp"
#include "store/tree_store.hpp"

namespace npuopt::campaign {

namespace {

nlohmann::json parse_object(const std::optional<std::string>& text) {
    if (!text) return nlohmann::json::object();
    auto json = nlohmann::json::parse(*text, nullptr, false);
    return json.is_object() ? json : nlohmann::json::object();
}

}  // namespace

CampaignStatus campaign_status(store::CampaignStore& store) {
    store::TreeStore trees(store.database());
    CampaignStatus status;
    auto state = trees.all_state();
    auto lookup = [&](const std::string& key) -> std::optional<std::string> {
        auto found = state.find(key);
        if (found == state.end()) return std::nullopt;
        return found->second;
    };
    auto run = parse_object(lookup("run"));
    if (run.contains("state")) status.state = run.value("state", std::string("stopped"));
    status.stop_reason = run.value("stop_reason", std::string());
    status.started_at = run.value("started_at", std::string());
    status.heartbeat_at = run.value("heartbeat_at", std::string());
    status.pid = run.value("pid", std::int64_t{0});
    auto counters = parse_object(lookup("counters"));
    status.steps = counters.value("step", std::int64_t{0});
    // launches are counted as they start; a step killed in flight has charged them already
    status.device_runs_used = std::max(counters.value("device_runs", std::int64_t{0}), store.device_launches());
    status.wall_secs_used = counters.value("wall_secs", 0.0);
    status.device_secs_used = counters.value("device_secs", 0.0);
    status.screen_calls = counters.value("screen_calls", std::int64_t{0});
    status.screen_secs = counters.value("screen_secs", 0.0);
    auto budgets = parse_object(lookup("budgets"));
    status.device_runs_budget = budgets.value("device_runs", std::int64_t{0});
    status.wall_secs_budget = budgets.value("wall_secs", 0.0);
    status.llm_tokens_budget = budgets.value("llm_tokens", std::int64_t{0});

    std::set<std::string> names;
    for (const auto& kernel : trees.list_kernels()) names.insert(kernel);
    for (const auto& [key, value] : state) {
        if (key.rfind("kernel/", 0) == 0) names.insert(key.substr(7));
    }
    double log_sum = 0.0;
    int with_champion = 0;
    for (const auto& name : names) {
        KernelStatus kernel;
        kernel.kernel = name;
        auto kernel_state = parse_object(lookup("kernel/" + name));
        kernel.status = kernel_state.value("status", std::string("active"));
        kernel.reason = kernel_state.value("reason", std::string());
        kernel.sol_cycles = kernel_state.value("sol_cycles", 0.0);
        kernel.shape = kernel_state.value("shape", std::string());
        kernel.reference = reference_text(kernel_state.value("baseline_failure", std::string()));
        auto edges = trees.list_edges(name);
        kernel.designs = static_cast<std::int64_t>(edges.size());
        auto path = trees.champion_path(name);
        if (!path.empty()) {
            kernel.baseline_cycles = path.front().cycles;
            kernel.champion_cycles = path.back().cycles;
            kernel.accepted = static_cast<std::int64_t>(path.size()) - 1;
            if (auto design = store.find_design(path.back().design_id)) {
                kernel.champion = design->template_name;
                if (design->params_json != "{}") kernel.champion += design->params_json;
            }
            if (path.back().cycles > 0) {
                kernel.speedup = path.front().cycles / path.back().cycles;
                if (kernel.sol_cycles > 0) kernel.sol_fraction = kernel.sol_cycles / path.back().cycles;
                log_sum += std::log(kernel.speedup);
                with_champion += 1;
            }
        }
        status.kernels.push_back(kernel);
    }
    if (with_champion > 0) status.geomean_speedup = std::exp(log_sum / with_champion);
    std::map<std::string, LlmRoleStatus> roles;
    for (const auto& totals : store::LlmStore(store.database()).totals_by_role()) {
        LlmRoleStatus& role = roles[totals.role];
        role.role = totals.role;
        role.calls = totals.calls;
        role.ok_calls = totals.ok_calls;
        role.tokens = totals.prompt_tokens + totals.completion_tokens;
        role.cost = totals.cost;
    }
    if (!roles.empty()) {
        for (const auto& kernel : status.kernels) {
            for (const auto& edge : trees.list_edges(kernel.kernel)) {
                auto found = roles.find(edge.role);
                if (found == roles.end()) continue;
                found->second.designs += 1;
                if (edge.verdict == "accepted") {
                    found->second.accepted += 1;
                    if (edge.speedup && *edge.speedup > 0) found->second.accepted_log_gain += std::log(*edge.speedup);
                }
            }
        }
        for (auto& [name, role] : roles) status.llm_roles.push_back(role);
    }
    return status;
}

double LlmRoleStatus::speedup_per_1k_tokens() const {
    if (tokens <= 0) return 1.0;
    return std::exp(accepted_log_gain * 1000.0 / static_cast<double>(tokens));
}

namespace {

nlohmann::json llm_roles_json(const CampaignStatus& status) {
    nlohmann::json roles = nlohmann::json::array();
    for (const auto& role : status.llm_roles) {
        roles.push_back({{"role", role.role},
                         {"calls", role.calls},
                         {"ok_calls", role.ok_calls},
                         {"tokens", role.tokens},
                         {"cost", role.cost},
                         {"designs", role.designs},
                         {"accepted", role.accepted},
                         {"speedup_per_1k_tokens", role.speedup_per_1k_tokens()}});
    }
    return roles;
}

}  // namespace

nlohmann::json to_json(const CampaignStatus& status) {
    nlohmann::json kernels = nlohmann::json::array();
    for (const auto& kernel : status.kernels) {
        kernels.push_back({{"kernel", kernel.kernel},
                           {"status", kernel.status},
                           {"reason", kernel.reason},
                           {"shape", kernel.shape},
                           {"reference", kernel.reference},
                           {"baseline_cycles", kernel.baseline_cycles ? nlohmann::json(*kernel.baseline_cycles) : nlohmann::json()},
                           {"champion_cycles", kernel.champion_cycles ? nlohmann::json(*kernel.champion_cycles) : nlohmann::json()},
                           {"champion", kernel.champion},
                           {"speedup", kernel.speedup},
                           {"sol_cycles", kernel.sol_cycles},
                           {"sol_fraction", kernel.sol_fraction},
                           {"designs", kernel.designs},
                           {"accepted", kernel.accepted}});
    }
    return {{"state", status.state},
            {"stop_reason", status.stop_reason},
            {"started_at", status.started_at},
            {"heartbeat_at", status.heartbeat_at},
            {"pid", status.pid},
            {"steps", status.steps},
            {"device_runs_used", status.device_runs_used},
            {"device_runs_budget", status.device_runs_budget},
            {"wall_secs_used", status.wall_secs_used},
            {"wall_secs_budget", status.wall_secs_budget},
            {"device_secs_used", status.device_secs_used},
            {"screen_calls", status.screen_calls},
            {"screen_secs", status.screen_secs},
            {"geomean_speedup", status.geomean_speedup},
            {"kernels", kernels},
            {"llm_tokens_budget", status.llm_tokens_budget},
            {"llm_roles", llm_roles_json(status)}};
}

std::string render_status_text(const CampaignStatus& status) {
    std::string out = fmt::format("search     {}{}", status.state,
                                  status.stop_reason.empty() ? "" : fmt::format(" ({})", status.stop_reason));
    if (status.state == "running") out += fmt::format(", pid {}, last step at {}", status.pid, status.heartbeat_at);
    out += fmt::format("\nsteps      {}, device runs {} of {}, wall {:.0f} s of {:.0f} s\n", status.steps,
                       status.device_runs_used, status.device_runs_budget, status.wall_secs_used, status.wall_secs_budget);
    if (status.screen_calls > 0) {
        out += fmt::format("screen     {} static-schedule calls, {:.0f} s against {:.0f} s of device runs\n",
                           status.screen_calls, status.screen_secs, status.device_secs_used);
    }
    for (const auto& kernel : status.kernels) {
        out += fmt::format("  {:<18} {:<9}", kernel.kernel, kernel.status);
        if (!kernel.shape.empty()) out += fmt::format(" shape {}", kernel.shape);
        if (kernel.champion_cycles) {
            out += fmt::format(" champion {:.0f} cycles, {:.2f}x {}", *kernel.champion_cycles, kernel.speedup,
                               kernel.reference == "baseline" ? "baseline" : "reference");
            if (kernel.sol_fraction > 0) out += fmt::format(", {:.0f}% of speed of light", 100.0 * kernel.sol_fraction);
            out += fmt::format(", {} designs, {} accepted", kernel.designs, kernel.accepted);
        }
        if (!kernel.reason.empty()) out += fmt::format(" — {}", kernel.reason);
        out += "\n";
        if (kernel.reference != "baseline") out += fmt::format("  {:<18} reference: {}\n", "", kernel.reference);
    }
    const bool any_reference = std::any_of(status.kernels.begin(), status.kernels.end(),
                                           [](const KernelStatus& kernel) { return kernel.reference != "baseline"; });
    if (status.geomean_speedup > 0) {
        out += fmt::format("geomean speedup {:.3f}x{}\n", status.geomean_speedup,
                           any_reference ? " (over each kernel's reference; not all of them are the baseline)" : "");
    }
    std::int64_t tokens = 0;
    for (const auto& role : status.llm_roles) tokens += role.tokens;
    if (!status.llm_roles.empty()) {
        out += fmt::format("llm        {} of {} tokens\n", tokens, status.llm_tokens_budget);
        for (const auto& role : status.llm_roles) {
            out += fmt::format("  {:<18} {} calls ({} ok), {} tokens, cost {:.4g}, {} designs, {} accepted, {:.4f}x "
                               "accepted speedup per 1k tokens\n",
                               role.role, role.calls, role.ok_calls, role.tokens, role.cost, role.designs, role.accepted,
                               role.speedup_per_1k_tokens());
        }
    }
    return out;
}

}  // namespace npuopt::campaign
