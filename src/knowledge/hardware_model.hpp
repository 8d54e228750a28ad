#pragma once
// The hardware model: what npuopt believes about a target's speed, fitted from the microbenchmark
// suite's measurements (knowledge/microbench.hpp) on top of the target's public facts. Which
// parameters exist and how each is fitted is the suite's data (`model:`, a small set of model
// forms implemented here generically); npuopt knows no parameter by name. Evaluation uses it for
// the speed-of-light bound, search for its cost model, both through the target's declared
// expressions. Every parameter carries its 95% interval, its fit quality and its measurements.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/microbench_config.hpp"
#include "config/target_config.hpp"
#include "knowledge/microbench.hpp"
#include "store/campaign_store.hpp"

namespace npuopt::knowledge {

/// One fitted (or fact-given) parameter with its uncertainty.
struct HardwareParam {
    std::string name;          ///< as the suite declares it
    std::string unit;          ///< e.g. cycles, bytes/cycle, ratio
    double value = 0.0;
    double ci95_lower = 0.0;   ///< equal to value when there is no interval (facts, counts)
    double ci95_upper = 0.0;
    std::optional<double> r_squared;  ///< of the fit it came from
    std::size_t points = 0;    ///< design points behind it
    std::string source;        ///< probe name, "fact", or "finding"
    std::string method;        ///< how it was derived, in words
};

/// The fitted model: the parameters the target's microbenchmark suite declares (its `model:`
/// section), each with its evidence, and the target's declared cost model (cost terms and
/// speed-of-light bound, knowledge/<target>/cost_model.yaml) that reads them.
struct HardwareModel {
    std::string target;
    std::string toolchain_version;

    std::vector<HardwareParam> params;            ///< every parameter that was determined, in suite order
    std::vector<std::string> findings;            ///< runtime findings, in words
    std::vector<std::string> missing;             ///< parameters that could not be determined, with why
    /// The target's cost model declaration; attached from the target's data when the model is
    /// fitted or loaded (never stored with it). Null: the target declares none.
    std::shared_ptr<const config::CostModelSpec> cost_model;

    /// The parameter named `name`, or nullptr.
    const HardwareParam* param(std::string_view name) const;
    /// The value of parameter `name`, or `fallback` when it was not determined.
    double value(std::string_view name, double fallback = 0.0) const;
    /// Add (or replace) a parameter known exactly (no interval), e.g. a given value in a test.
    void set(std::string_view name, double value, std::string unit = "", std::string source = "given");
    /// A variable of a cost-model expression: `hw.NAME` (the value), `hw.NAME.lower`,
    /// `hw.NAME.upper` (the ends of its 95% interval); 0 for a parameter not determined;
    /// nullopt for a name that does not start with `hw.`.
    std::optional<double> variable(std::string_view name) const;
    /// Lower bound on the cycles to move `bytes` between memory and the chip, from the declared
    /// `weight_movement_min`; 0 when none is declared or it cannot be evaluated.
    double weight_movement_min_cycles(double bytes) const;
};

/// Fit the model declared by `suite.model` to a suite run; facts come from the target, and the
/// target's cost model is attached. A parameter that cannot be determined is listed in `missing`.
HardwareModel fit_hardware_model(const MicrobenchRun& run, const config::TargetConfig& target,
                                 const config::MicrobenchSuite& suite);

nlohmann::json to_json(const HardwareModel& model);
HardwareModel hardware_model_from_json(const nlohmann::json& json);

/// The model and its measurements as knowledge entries: one `hardware_param` per parameter
/// (value, interval, fit quality, evidence), one `measurement` per design point, one
/// `runtime_finding` per finding; keyed by target and the toolchain version id.
std::vector<store::KnowledgeEntry> hardware_knowledge_entries(const HardwareModel& model, const MicrobenchRun& run,
                                                              std::optional<std::int64_t> toolchain_version_id);

/// Record the model in a campaign store (one transaction per entry, through CampaignStore):
/// the toolchain version is recorded first; returns the number of entries written.
std::size_t record_hardware_model(store::CampaignStore& store, const HardwareModel& model, const MicrobenchRun& run);

/// The newest non-stale model recorded for (target, toolchain version), rebuilt from its
/// hardware_model entry, with the target's cost model attached; nullopt when there is none.
std::optional<HardwareModel> load_hardware_model(store::CampaignStore& store, const config::TargetConfig& target,
                                                 const std::string& toolchain_version);

}  // namespace npuopt::knowledge
