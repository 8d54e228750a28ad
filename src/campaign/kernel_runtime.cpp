#include "campaign/kernel_runtime.hpp"

#include <fmt/format.h>

namespace npuopt::campaign {

std::string_view kernel_state_name(KernelState state) {
    switch (state) {
        case KernelState::active: return "active";
        case KernelState::exhausted: return "exhausted";
        case KernelState::failed: return "failed";
        case KernelState::blocked: return "blocked";
    }
    return "active";
}

KernelState parse_kernel_state(std::string_view name) {
    if (name == "exhausted") return KernelState::exhausted;
    if (name == "failed") return KernelState::failed;
    if (name == "blocked") return KernelState::blocked;
    return KernelState::active;
}

KernelRuntime::KernelRuntime(KernelSetup kernel_setup, std::vector<std::unique_ptr<search::Role>> roles,
                             search::CostModel cost_model)
    : setup(std::move(kernel_setup)), search(setup.spec.name, std::move(roles), std::move(cost_model)) {
    for (const auto& tmpl : setup.templates) templates_by_name[tmpl->name()] = tmpl;
}

nlohmann::json KernelRuntime::state_json() const {
    return {{"status", std::string(kernel_state_name(state))},
            {"reason", reason},
            {"failure_kind", failure_kind},
            {"shape", setup.spec.shape_name},
            {"baseline_tried", baseline_tried},
            {"baseline_failure", baseline_failure},
            {"reference", reference()},
            {"sol_cycles", sol_cycles},
            {"steps_since_accept", steps_since_accept},
            {"runs_since_accept", runs_since_accept},
            {"accepts_since_revalidation", accepts_since_revalidation},
            {"revalidate_pending", revalidate_pending},
            {"port_pending", port_pending},
            {"ported_from", ported_from},
            {"port_baseline_done", port_baseline_done},
            {"port_before", port_before},
            {"reopened_terms", reopened_terms},
            {"reopen_steps_left", reopen_steps_left},
            {"quantity_offsets", quantity_offsets_json()}};
}

nlohmann::json KernelRuntime::quantity_offsets_json() const {
    nlohmann::json offsets = nlohmann::json::object();
    for (const auto& [name, tmpl] : templates_by_name) {
        if (!tmpl->quantity_offsets().empty()) offsets[name] = tmpl->quantity_offsets();
    }
    return offsets;
}

void KernelRuntime::restore_quantity_offsets(const nlohmann::json& offsets) {
    if (!offsets.is_object()) return;
    for (const auto& [name, values] : offsets.items()) {
        auto found = templates_by_name.find(name);
        if (found == templates_by_name.end() || !values.is_object()) continue;
        std::map<std::string, double> restored;
        for (const auto& [quantity, value] : values.items()) {
            if (value.is_number() && value.get<double>() > 0.0) restored[quantity] = value.get<double>();
        }
        found->second->set_quantity_offsets(std::move(restored));
    }
}

nlohmann::json KernelRuntime::clear_quantity_offsets() {
    nlohmann::json dropped = quantity_offsets_json();
    for (auto& [name, tmpl] : templates_by_name)
        tmpl->set_quantity_offsets({});
    return dropped;
}

std::vector<QuantityCorrection> KernelRuntime::learn_quantity_misses(const std::string& template_name,
                                                                      const std::vector<eval::QuantityMiss>& misses) {
    std::vector<QuantityCorrection> corrections;
    auto found = templates_by_name.find(template_name);
    if (found == templates_by_name.end() || found->second->is_baseline()) return corrections;
    search::Template& tmpl = *found->second;
    auto offsets = tmpl.quantity_offsets();
    for (const auto& miss : misses) {
        // The declared value already carries the offset learnt so far: the miss adds to it.
        const double shortfall = miss.reported - miss.declared;
        if (!(shortfall > 0.0)) continue;
        double& offset = offsets[miss.quantity];
        offset += shortfall;
        corrections.push_back({template_name, miss.quantity, miss.declared, miss.reported, offset, miss.code});
    }
    if (!corrections.empty()) tmpl.set_quantity_offsets(std::move(offsets));
    return corrections;
}

std::string reference_text(const std::string& baseline_failure) {
    if (baseline_failure.empty()) return "baseline";
    return fmt::format("first correct design (baseline failed: {})", baseline_failure);
}

std::string KernelRuntime::reference() const { return reference_text(baseline_failure); }

std::string KernelRuntime::family_of(const std::string& template_name) const {
    auto found = templates_by_name.find(template_name);
    return found == templates_by_name.end() ? template_name : found->second->family();
}

}  // namespace npuopt::campaign
