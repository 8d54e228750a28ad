#pragma once
// The hardware model: what npuopt believes about a target's speed, fitted by least squares from
// the microbenchmark suite's measurements (knowledge/microbench.hpp) on top of the target's
// public facts. Evaluation uses it for the speed-of-light bound, search for its cost model.
// Every parameter carries its 95% interval, its fit quality and the measurements behind it.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/target_config.hpp"
#include "knowledge/microbench.hpp"
#include "store/campaign_store.hpp"

namespace npuopt::knowledge {

/// One fitted (or fact-given) parameter with its uncertainty.
struct HardwareParam {
    std::string name;          ///< e.g. dma_startup_cycles
    std::string unit;          ///< e.g. cycles, bytes/cycle, ratio
    double value = 0.0;
    double ci95_lower = 0.0;   ///< equal to value when there is no interval (facts, counts)
    double ci95_upper = 0.0;
    std::optional<double> r_squared;  ///< of the fit it came from
    std::size_t points = 0;    ///< design points behind it
    std::string source;        ///< probe name, "fact", or "finding"
    std::string method;        ///< how it was derived, in words
};

/// The fitted model. Plain fields for the consumers; `params` holds the same values with their
/// evidence. A field is 0 when its probe did not run or could not be fitted (see `missing`).
struct HardwareModel {
    std::string target;
    std::string toolchain_version;

    double dma_startup_cycles = 0.0;              ///< fixed cost of one DMA command
    double dma_engine_bytes_per_cycle = 0.0;      ///< raw bandwidth of one engine
    double dma_packet_overhead_cycles = 0.0;      ///< extra cycles per packet
    double dma_max_packet_bytes = 0.0;            ///< public fact (0 when unknown)
    double dma_effective_bytes_per_cycle = 0.0;   ///< one engine with the largest packets
    double sustained_bytes_per_cycle = 0.0;       ///< HBM bandwidth all engines together reach
    double engines_per_cluster = 0.0;             ///< DMA engines per cluster
    double clusters = 0.0;                        ///< public fact
    double pass_issue_cycles = 0.0;               ///< fixed cost of one tensor-unit pass
    double tensor_macs_per_cycle = 0.0;           ///< per slice
    double chip_macs_per_cycle = 0.0;             ///< every slice together (needs the slice count as a fact)
    double vector_op_cycles = 0.0;                ///< fixed cost of one vector op
    double vector_elems_per_cycle = 0.0;
    double switch_startup_cycles = 0.0;
    double switch_bytes_per_cycle = 0.0;
    double unaligned_write_penalty = 0.0;         ///< time ratio, unaligned / aligned HBM write
    double bank_conflict_penalty = 0.0;           ///< time ratio, conflicting / conflict-free DM access
    double bank_safe_run = 0.0;                   ///< longest same-bank run that did not hang
    double bank_hang_run = 0.0;                   ///< shortest same-bank run that hung (0: none seen)

    std::vector<HardwareParam> params;            ///< every value above that was determined
    std::vector<std::string> findings;            ///< runtime findings, in words
    std::vector<std::string> missing;             ///< parameters that could not be determined, with why

    /// The parameter named `name`, or nullptr.
    const HardwareParam* param(std::string_view name) const;
    /// Lower bound on the cycles to move `bytes` between HBM and the chip: bytes / sustained
    /// bandwidth (the weight-movement minimum). 0 when the sustained bandwidth is unknown.
    double weight_movement_min_cycles(double bytes) const;
    /// Cycles of one DMA command of `bytes` in `packet_bytes` packets on one otherwise idle engine.
    double dma_command_cycles(double bytes, double packet_bytes) const;
};

/// Fit the model to a suite run; facts come from the target (clusters, dma_max_packet_bytes, and
/// slices or slices_per_cluster for chip_macs_per_cycle).
HardwareModel fit_hardware_model(const MicrobenchRun& run, const config::TargetConfig& target, const Statistics& stats);

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
/// hardware_param entries; nullopt when there is none.
std::optional<HardwareModel> load_hardware_model(store::CampaignStore& store, const std::string& target,
                                                 const std::string& toolchain_version);

}  // namespace npuopt::knowledge
