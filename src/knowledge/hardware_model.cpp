#include "knowledge/hardware_model.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.hpp"
#include "knowledge/model_fit.hpp"
#include "numerics/expression.hpp"

namespace npuopt::knowledge {
namespace {

using model_fit::k_infinity;

nlohmann::json finite_or_null(double value) {
    return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

double number_or_infinity(const nlohmann::json& json, const char* key) {
    auto found = json.find(key);
    if (found == json.end() || found->is_null()) return k_infinity;
    return found->get<double>();
}


}  // namespace

const HardwareParam* HardwareModel::param(std::string_view name) const {
    for (const auto& entry : params) {
        if (entry.name == name) return &entry;
    }
    return nullptr;
}

double HardwareModel::value(std::string_view name, double fallback) const {
    const auto* found = param(name);
    return found ? found->value : fallback;
}

void HardwareModel::set(std::string_view name, double value, std::string unit, std::string source) {
    HardwareParam entry;
    entry.name = std::string(name);
    entry.unit = std::move(unit);
    entry.value = entry.ci95_lower = entry.ci95_upper = value;
    entry.source = std::move(source);
    entry.method = "given";
    for (auto& existing : params) {
        if (existing.name == name) {
            existing = std::move(entry);
            return;
        }
    }
    params.push_back(std::move(entry));
}

std::optional<double> HardwareModel::variable(std::string_view name) const {
    constexpr std::string_view k_prefix = "hw.";
    if (!name.starts_with(k_prefix)) return std::nullopt;
    std::string_view rest = name.substr(k_prefix.size());
    int end = 0;
    if (rest.ends_with(".upper")) {
        end = 1;
        rest.remove_suffix(6);
    } else if (rest.ends_with(".lower")) {
        end = -1;
        rest.remove_suffix(6);
    }
    const auto* found = param(rest);
    if (!found) return 0.0;
    if (end > 0) return std::max(found->value, found->ci95_upper);
    if (end < 0) return std::min(found->value, found->ci95_lower);
    return found->value;
}

double HardwareModel::weight_movement_min_cycles(double bytes) const {
    if (!cost_model || !cost_model->weight_movement_min) return 0.0;
    const auto& text = *cost_model->weight_movement_min;
    const numerics::Expression expression({text.text, text.location, text.key});
    const double cycles = expression.evaluate([&](const std::string& name) -> std::optional<double> {
        if (name == "min_bytes") return bytes;
        return variable(name);
    });
    return std::isfinite(cycles) && cycles > 0 ? cycles : 0.0;
}

HardwareModel fit_hardware_model(const MicrobenchRun& run, const config::TargetConfig& target,
                                 const config::MicrobenchSuite& suite) {
    HardwareModel model;
    model.target = run.target.empty() ? target.name : run.target;
    model.toolchain_version = run.toolchain_version;
    model.cost_model = target.cost_model;
    model_fit::FitContext context(run, target, suite, model);
    model_fit::fit_all(context);
    return model;
}

nlohmann::json to_json(const HardwareModel& model) {
    nlohmann::json params = nlohmann::json::array();
    for (const auto& param : model.params) {
        params.push_back({{"name", param.name},
                          {"unit", param.unit},
                          {"value", finite_or_null(param.value)},
                          {"ci95_lower", finite_or_null(param.ci95_lower)},
                          {"ci95_upper", finite_or_null(param.ci95_upper)},
                          {"r_squared", param.r_squared ? nlohmann::json(*param.r_squared) : nlohmann::json(nullptr)},
                          {"points", param.points},
                          {"source", param.source},
                          {"method", param.method}});
    }
    return {{"target", model.target},         {"toolchain_version", model.toolchain_version},
            {"params", params},               {"findings", model.findings},
            {"missing", model.missing}};
}

HardwareModel hardware_model_from_json(const nlohmann::json& json) {
    try {
        HardwareModel model;
        model.target = json.at("target").get<std::string>();
        model.toolchain_version = json.value("toolchain_version", "");
        for (const auto& item : json.at("params")) {
            HardwareParam param;
            param.name = item.at("name").get<std::string>();
            param.unit = item.value("unit", "");
            param.value = number_or_infinity(item, "value");
            const double lower =
                item.contains("ci95_lower") && !item.at("ci95_lower").is_null() ? item.at("ci95_lower").get<double>() : 0.0;
            const double upper = number_or_infinity(item, "ci95_upper");
            param.ci95_lower = std::min(lower, upper);
            param.ci95_upper = std::max(lower, upper);
            if (item.contains("r_squared") && !item.at("r_squared").is_null()) param.r_squared = item.at("r_squared").get<double>();
            param.points = item.value("points", std::size_t{0});
            param.source = item.value("source", "");
            param.method = item.value("method", "");
            model.params.push_back(std::move(param));
        }
        model.findings = json.value("findings", std::vector<std::string>{});
        model.missing = json.value("missing", std::vector<std::string>{});
        return model;
    } catch (const nlohmann::json::exception& error) {
        throw Error(ErrorKind::invalid_input, fmt::format("hardware model JSON: {}", error.what()));
    }
}

std::vector<store::KnowledgeEntry> hardware_knowledge_entries(const HardwareModel& model, const MicrobenchRun& run,
                                                              std::optional<std::int64_t> toolchain_version_id) {
    std::vector<store::KnowledgeEntry> entries;
    auto entry = [&](std::string kind, std::string key, std::string text, std::optional<double> value,
                     nlohmann::json evidence) {
        store::KnowledgeEntry item;
        item.target = model.target;
        item.kind = std::move(kind);
        item.key = std::move(key);
        item.text = std::move(text);
        item.value = value;
        item.evidence_json = evidence.dump();
        item.toolchain_version_id = toolchain_version_id;
        entries.push_back(std::move(item));
    };
    for (const auto& param : model.params) {
        nlohmann::json evidence = to_json(model).at("params").at(&param - model.params.data());
        evidence["toolchain_version"] = model.toolchain_version;
        entry("hardware_param", param.name,
              fmt::format("{} = {:.4g} {} (95% CI {:.4g} .. {:.4g}{}); {}", param.name, param.value, param.unit,
                          param.ci95_lower, param.ci95_upper,
                          param.r_squared ? fmt::format(", R² {:.4f}", *param.r_squared) : std::string(), param.method),
              param.value, evidence);
    }
    for (const auto& finding : model.findings) {
        entry("runtime_finding", fmt::format("microbench:{}", entries.size()), finding, std::nullopt,
              {{"toolchain_version", model.toolchain_version}});
    }
    for (const auto& point : run.points) {
        entry("measurement", fmt::format("{}:{}", point.probe, nlohmann::json(point.params).dump()),
              fmt::format("{} {} {}: {}", point.probe, nlohmann::json(point.params).dump(), point_status_name(point.status),
                          point.status == PointStatus::ok ? fmt::format("median {:.0f} cycles (MAD {:.0f})",
                                                                        point.cycles_median, point.cycles_mad)
                                                          : point.message),
              point.status == PointStatus::ok ? std::optional<double>(point.cycles_median) : std::nullopt,
              to_json(point));
    }
    entry("hardware_model", model.target, to_json(model).dump(), std::nullopt,
          {{"toolchain_version", model.toolchain_version}, {"suite_file", run.suite_file.string()},
           {"wall_secs", run.wall_secs}});
    return entries;
}

std::size_t record_hardware_model(store::CampaignStore& store, const HardwareModel& model, const MicrobenchRun& run) {
    const std::int64_t version_id =
        store.record_toolchain_version(model.target, run.toolchain_name, model.toolchain_version);
    auto entries = hardware_knowledge_entries(model, run, version_id);
    for (const auto& entry : entries) store.record_knowledge(entry);
    return entries.size();
}

std::optional<HardwareModel> load_hardware_model(store::CampaignStore& store, const config::TargetConfig& target_config,
                                                 const std::string& toolchain_version) {
    const std::string& target = target_config.name;
    std::optional<std::int64_t> version_id;
    for (const auto& version : store.list_toolchain_versions()) {
        if (version.target == target && version.version == toolchain_version) version_id = version.id;
    }
    if (!version_id) return std::nullopt;
    std::optional<HardwareModel> newest;
    std::int64_t newest_id = -1;
    for (const auto& entry : store.list_knowledge(target, false)) {
        if (entry.kind == "hardware_model" && entry.toolchain_version_id == version_id && entry.id > newest_id) {
            newest = hardware_model_from_json(nlohmann::json::parse(entry.text));
            newest_id = entry.id;
        }
    }
    if (newest) newest->cost_model = target_config.cost_model;
    return newest;
}

}  // namespace npuopt::knowledge
