#include "knowledge/hardware_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "core/error.hpp"

namespace npuopt::knowledge {
namespace {

constexpr double k_infinity = std::numeric_limits<double>::infinity();

/// The model's plain fields by parameter name (one table for fitting, JSON and the store).
struct FieldInfo {
    std::string_view name;
    double HardwareModel::*field;
    std::string_view unit;
};
constexpr FieldInfo k_fields[] = {
    {"dma_startup_cycles", &HardwareModel::dma_startup_cycles, "cycles"},
    {"dma_engine_bytes_per_cycle", &HardwareModel::dma_engine_bytes_per_cycle, "bytes/cycle"},
    {"dma_packet_overhead_cycles", &HardwareModel::dma_packet_overhead_cycles, "cycles"},
    {"dma_max_packet_bytes", &HardwareModel::dma_max_packet_bytes, "bytes"},
    {"dma_effective_bytes_per_cycle", &HardwareModel::dma_effective_bytes_per_cycle, "bytes/cycle"},
    {"sustained_bytes_per_cycle", &HardwareModel::sustained_bytes_per_cycle, "bytes/cycle"},
    {"engines_per_cluster", &HardwareModel::engines_per_cluster, "count"},
    {"clusters", &HardwareModel::clusters, "count"},
    {"pass_issue_cycles", &HardwareModel::pass_issue_cycles, "cycles"},
    {"tensor_macs_per_cycle", &HardwareModel::tensor_macs_per_cycle, "MACs/cycle"},
    {"chip_macs_per_cycle", &HardwareModel::chip_macs_per_cycle, "MACs/cycle"},
    {"vector_op_cycles", &HardwareModel::vector_op_cycles, "cycles"},
    {"vector_elems_per_cycle", &HardwareModel::vector_elems_per_cycle, "elements/cycle"},
    {"switch_startup_cycles", &HardwareModel::switch_startup_cycles, "cycles"},
    {"switch_bytes_per_cycle", &HardwareModel::switch_bytes_per_cycle, "bytes/cycle"},
    {"unaligned_write_penalty", &HardwareModel::unaligned_write_penalty, "ratio"},
    {"bank_conflict_penalty", &HardwareModel::bank_conflict_penalty, "ratio"},
    {"bank_safe_run", &HardwareModel::bank_safe_run, "accesses"},
    {"bank_hang_run", &HardwareModel::bank_hang_run, "accesses"},
};

const FieldInfo* field_info(std::string_view name) {
    for (const auto& info : k_fields) {
        if (info.name == name) return &info;
    }
    return nullptr;
}

/// A fitted straight line (or plane): coefficients with intervals, R² on the cycle scale.
struct Fit {
    LinearFitSummary summary;
    double r_squared = 0.0;
    std::size_t points = 0;
    double coefficient(std::size_t idx) const { return summary.coefficients.at(idx); }
    double lower(std::size_t idx) const { return summary.coefficient_ci95.at(idx).first; }
    double upper(std::size_t idx) const { return summary.coefficient_ci95.at(idx).second; }
    /// Half-width of the 95% interval relative to the coefficient.
    double relative_half_width(std::size_t idx) const {
        return (upper(idx) - lower(idx)) / 2.0 / std::abs(coefficient(idx));
    }
};

/// Weighted least squares y ≈ X b with weights 1/y (the device's noise is multiplicative, so each
/// point counts by its relative error). nullopt with `why` filled when it cannot be fitted.
std::optional<Fit> fit_relative(const Statistics& stats, const std::vector<std::vector<double>>& rows,
                                const std::vector<double>& response, std::string* why) {
    const std::size_t columns = rows.empty() ? 0 : rows.front().size();
    if (rows.size() <= columns) {
        *why = fmt::format("{} usable points for {} unknowns", rows.size(), columns);
        return std::nullopt;
    }
    Eigen::MatrixXd design(static_cast<Eigen::Index>(rows.size()), static_cast<Eigen::Index>(columns));
    Eigen::VectorXd scaled(static_cast<Eigen::Index>(rows.size()));
    for (std::size_t row_idx = 0; row_idx < rows.size(); ++row_idx) {
        const double weight = 1.0 / response[row_idx];
        for (std::size_t column_idx = 0; column_idx < columns; ++column_idx) {
            design(static_cast<Eigen::Index>(row_idx), static_cast<Eigen::Index>(column_idx)) =
                rows[row_idx][column_idx] * weight;
        }
        scaled(static_cast<Eigen::Index>(row_idx)) = 1.0;
    }
    Fit fit;
    try {
        fit.summary = stats.fit_linear(design, scaled);
    } catch (const Error& error) {
        *why = error.what();
        return std::nullopt;
    }
    double mean = 0.0;
    for (double value : response) mean += value;
    mean /= static_cast<double>(response.size());
    double residual_sum = 0.0, total_sum = 0.0;
    for (std::size_t row_idx = 0; row_idx < rows.size(); ++row_idx) {
        double predicted = 0.0;
        for (std::size_t column_idx = 0; column_idx < columns; ++column_idx) {
            predicted += rows[row_idx][column_idx] * fit.summary.coefficients[column_idx];
        }
        residual_sum += (response[row_idx] - predicted) * (response[row_idx] - predicted);
        total_sum += (response[row_idx] - mean) * (response[row_idx] - mean);
    }
    fit.r_squared = total_sum > 0 ? 1.0 - residual_sum / total_sum : 1.0;
    fit.points = rows.size();
    return fit;
}

double param_of(const MicrobenchPoint& point, const std::string& name) {
    auto found = point.params.find(name);
    if (found == point.params.end()) {
        throw Error(ErrorKind::invalid_config,
                    fmt::format("probe '{}' (measures {}) has no parameter '{}', which the hardware model needs",
                                point.probe, point.measures, name));
    }
    return static_cast<double>(found->second);
}

std::vector<const MicrobenchPoint*> ok_points(const MicrobenchRun& run, std::string_view measures) {
    std::vector<const MicrobenchPoint*> selected;
    for (const auto* point : run.points_measuring(measures)) {
        if (point->status == PointStatus::ok && point->cycles_median > 0) selected.push_back(point);
    }
    return selected;
}

class ModelBuilder {
public:
    ModelBuilder(HardwareModel& model) : m_model(model) {}

    void add(std::string_view name, double value, double lower, double upper, std::optional<double> r_squared,
             std::size_t points, std::string source, std::string method) {
        const FieldInfo* info = field_info(name);
        HardwareParam param;
        param.name = std::string(name);
        param.unit = info ? std::string(info->unit) : "";
        param.value = value;
        param.ci95_lower = std::min(lower, upper);
        param.ci95_upper = std::max(lower, upper);
        param.r_squared = r_squared;
        param.points = points;
        param.source = std::move(source);
        param.method = std::move(method);
        if (info) m_model.*(info->field) = value;
        m_model.params.push_back(std::move(param));
    }
    /// A value whose reciprocal was fitted: 1/b with interval [1/upper, 1/lower].
    void add_reciprocal(std::string_view name, const Fit& fit, std::size_t idx, std::string source, std::string method) {
        const double value = 1.0 / fit.coefficient(idx);
        const double lower = fit.upper(idx) > 0 ? 1.0 / fit.upper(idx) : 0.0;
        const double upper = fit.lower(idx) > 0 ? 1.0 / fit.lower(idx) : k_infinity;
        add(name, value, lower, upper, fit.r_squared, fit.points, std::move(source), std::move(method));
    }
    void add_coefficient(std::string_view name, const Fit& fit, std::size_t idx, std::string source, std::string method) {
        add(name, fit.coefficient(idx), fit.lower(idx), fit.upper(idx), fit.r_squared, fit.points, std::move(source),
            std::move(method));
    }
    void missing(std::string_view name, const std::string& why) {
        m_model.missing.push_back(fmt::format("{}: {}", name, why));
    }

private:
    HardwareModel& m_model;
};

std::string probe_name(const std::vector<const MicrobenchPoint*>& points) {
    return points.empty() ? std::string() : points.front()->probe;
}

void fit_dma_single_engine(const MicrobenchRun& run, const Statistics& stats, ModelBuilder& builder,
                           HardwareModel& model) {
    auto points = ok_points(run, "dma_single_engine");
    std::vector<std::vector<double>> rows;
    std::vector<double> response;
    double largest_packet = 0.0;
    for (const auto* point : points) {
        const double bytes = param_of(*point, "bytes"), packet = param_of(*point, "packet");
        const double commands = param_of(*point, "commands");
        rows.push_back({1.0, bytes, bytes / packet});
        response.push_back(point->cycles_median / commands);
        largest_packet = std::max(largest_packet, packet);
    }
    std::string why;
    auto fit = fit_relative(stats, rows, response, &why);
    if (!fit) {
        for (auto name : {"dma_startup_cycles", "dma_engine_bytes_per_cycle", "dma_packet_overhead_cycles"}) {
            builder.missing(name, why.empty() ? "no dma_single_engine measurements" : why);
        }
        return;
    }
    const std::string source = probe_name(points);
    builder.add_coefficient("dma_startup_cycles", *fit, 0, source,
                            "intercept of cycles/command = startup + bytes/bandwidth + packets*overhead (WLS)");
    builder.add_reciprocal("dma_engine_bytes_per_cycle", *fit, 1, source, "1 / slope in bytes of the same fit");
    builder.add_coefficient("dma_packet_overhead_cycles", *fit, 2, source, "slope in packets of the same fit");
    const double packet = model.dma_max_packet_bytes > 0 ? model.dma_max_packet_bytes : largest_packet;
    const double per_byte = fit->coefficient(1) + fit->coefficient(2) / packet;
    const double relative = std::hypot(fit->relative_half_width(1) * fit->coefficient(1),
                                       fit->relative_half_width(2) * fit->coefficient(2) / packet) / per_byte;
    builder.add("dma_effective_bytes_per_cycle", 1.0 / per_byte, 1.0 / (per_byte * (1 + relative)),
                relative < 1 ? 1.0 / (per_byte * (1 - relative)) : k_infinity, fit->r_squared, fit->points, source,
                fmt::format("one engine with {:.0f}-byte packets: 1 / (1/bandwidth + overhead/packet)", packet));
}

void fit_hbm_saturation(const MicrobenchRun& run, const Statistics& stats, ModelBuilder& builder, HardwareModel& model) {
    auto all = run.points_measuring("hbm_saturation");
    auto points = ok_points(run, "hbm_saturation");
    if (points.empty()) {
        builder.missing("sustained_bytes_per_cycle", "no hbm_saturation measurements");
        builder.missing("engines_per_cluster", "no hbm_saturation measurements");
        return;
    }
    const std::string source = probe_name(points);

    // Engines: the largest count that ran; a larger count that the toolchain rejected bounds it.
    double largest_ok = 0.0, smallest_failed = k_infinity;
    for (const auto* point : all) {
        const double engines = param_of(*point, "engines");
        if (point->status == PointStatus::ok) largest_ok = std::max(largest_ok, engines);
        if (point->status == PointStatus::failed) smallest_failed = std::min(smallest_failed, engines);
    }
    const double clusters = model.clusters > 0 ? model.clusters : 1.0;
    const double per_cluster = std::floor(largest_ok / clusters);
    builder.add("engines_per_cluster", per_cluster, per_cluster, per_cluster, std::nullopt, all.size(), source,
                std::isfinite(smallest_failed)
                    ? fmt::format("{} engines ran, {} were rejected; spread over {} clusters", largest_ok,
                                  smallest_failed, clusters)
                    : fmt::format("{} engines ran (no larger count was tried); a lower bound", largest_ok));
    if (!std::isfinite(smallest_failed)) model.findings.push_back("every engine count of the saturation sweep ran: engines_per_cluster is a lower bound");

    // Aggregate bandwidth per engine count, net of the command startup.
    std::vector<std::pair<double, double>> throughput;  // (engines, bytes/cycle)
    for (const auto* point : points) {
        const double engines = param_of(*point, "engines"), bytes = param_of(*point, "bytes");
        const double moving = point->cycles_median - model.dma_startup_cycles;
        if (moving > 0) throughput.emplace_back(engines, engines * bytes / moving);
    }
    std::sort(throughput.begin(), throughput.end());
    if (throughput.empty()) {
        builder.missing("sustained_bytes_per_cycle", "no usable hbm_saturation point");
        return;
    }
    const double per_engine = throughput.front().second / throughput.front().first;
    std::vector<double> saturated;
    for (const auto& [engines, rate] : throughput) {
        if (rate < 0.85 * engines * per_engine) saturated.push_back(rate);
    }
    if (saturated.empty()) {
        const double best = throughput.back().second;
        builder.missing("sustained_bytes_per_cycle",
                        fmt::format("HBM did not saturate up to {} engines; at least {:.1f} bytes/cycle",
                                    throughput.back().first, best));
        return;
    }
    double value = 0.0, lower = 0.0, upper = 0.0;
    if (saturated.size() >= 2) {
        Eigen::MatrixXd ones = Eigen::MatrixXd::Ones(static_cast<Eigen::Index>(saturated.size()), 1);
        Eigen::VectorXd rates = Eigen::Map<Eigen::VectorXd>(saturated.data(), static_cast<Eigen::Index>(saturated.size()));
        auto fit = stats.fit_linear(ones, rates);
        value = fit.coefficients[0];
        lower = fit.coefficient_ci95[0].first;
        upper = fit.coefficient_ci95[0].second;
    } else {
        value = lower = upper = saturated.front();
    }
    builder.add("sustained_bytes_per_cycle", value, lower, upper, std::nullopt, saturated.size(), source,
                fmt::format("mean aggregate bandwidth of the {} engine counts past the knee "
                            "(below 85% of linear scaling from {:.1f} bytes/cycle per engine)",
                            saturated.size(), per_engine));
}

void fit_unaligned_write(const MicrobenchRun& run, const Statistics& stats, ModelBuilder& builder) {
    auto points = ok_points(run, "unaligned_write");
    std::vector<std::vector<double>> rows[2];
    std::vector<double> response[2];
    for (const auto* point : points) {
        const int unaligned = param_of(*point, "offset") != 0 ? 1 : 0;
        rows[unaligned].push_back({1.0, param_of(*point, "bytes")});
        response[unaligned].push_back(point->cycles_median);
    }
    std::string why;
    auto aligned = fit_relative(stats, rows[0], response[0], &why);
    auto misaligned = fit_relative(stats, rows[1], response[1], &why);
    if (!aligned || !misaligned) {
        builder.missing("unaligned_write_penalty", why.empty() ? "no unaligned_write measurements" : why);
        return;
    }
    const double ratio = misaligned->coefficient(1) / aligned->coefficient(1);
    const double relative = std::hypot(misaligned->relative_half_width(1), aligned->relative_half_width(1));
    builder.add("unaligned_write_penalty", ratio, ratio * (1 - relative), ratio * (1 + relative),
                std::min(aligned->r_squared, misaligned->r_squared), aligned->points + misaligned->points,
                probe_name(points), "ratio of the per-byte slopes of unaligned and aligned HBM writes");
}

void fit_bank_conflict(const MicrobenchRun& run, const Statistics& stats, ModelBuilder& builder) {
    auto points = ok_points(run, "bank_conflict");
    std::vector<std::vector<double>> rows;
    std::vector<double> response;
    for (const auto* point : points) {
        const double runs = param_of(*point, "runs"), run_len = param_of(*point, "run_len");
        const double conflicts = param_of(*point, "conflict") != 0 ? runs * (run_len - 1) : 0.0;
        rows.push_back({1.0, runs * run_len, conflicts});
        response.push_back(point->cycles_median);
    }
    std::string why;
    auto fit = fit_relative(stats, rows, response, &why);
    if (!fit) {
        builder.missing("bank_conflict_penalty", why.empty() ? "no bank_conflict measurements" : why);
        return;
    }
    // cycles = base + accesses * cost + conflicts * cost * (penalty - 1)
    const double ratio = fit->coefficient(2) / fit->coefficient(1);
    const double relative = std::hypot(fit->relative_half_width(1), fit->relative_half_width(2));
    builder.add("bank_conflict_penalty", 1.0 + ratio, 1.0 + ratio * (1 - relative), 1.0 + ratio * (1 + relative),
                fit->r_squared, fit->points, probe_name(points),
                "1 + (extra cycles per same-bank access) / (cycles per access), from one WLS fit");
}

void fit_bank_hang(const MicrobenchRun& run, ModelBuilder& builder, HardwareModel& model) {
    auto all = run.points_measuring("bank_hang");
    if (all.empty()) return;
    double safe = 0.0, hang = k_infinity;
    for (const auto* point : all) {
        const double run_len = param_of(*point, "run_len");
        if (point->status == PointStatus::ok) safe = std::max(safe, run_len);
        if (point->status == PointStatus::timed_out) hang = std::min(hang, run_len);
        if (point->status == PointStatus::failed) {
            model.findings.push_back(fmt::format("bank_hang run_len {} failed: {}", run_len, point->message));
        }
    }
    const std::string source = all.front()->probe;
    if (safe > 0) builder.add("bank_safe_run", safe, safe, safe, std::nullopt, all.size(), source, "longest run that completed");
    if (std::isfinite(hang)) {
        builder.add("bank_hang_run", hang, hang, hang, std::nullopt, all.size(), "finding", "shortest run that timed out");
        model.findings.push_back(fmt::format(
            "a DMA command with {} consecutive accesses to one DM bank hangs the device (the run timed out); "
            "{} consecutive accesses complete",
            hang, safe));
    } else {
        model.findings.push_back(fmt::format("no same-bank run up to {} hung the device", safe));
    }
}

void fit_pass_issue(const MicrobenchRun& run, const Statistics& stats, ModelBuilder& builder) {
    auto points = ok_points(run, "pass_issue");
    std::vector<std::vector<double>> rows;
    std::vector<double> response;
    for (const auto* point : points) {
        const double passes = param_of(*point, "passes");
        const double macs = param_of(*point, "rows") * param_of(*point, "cols");
        rows.push_back({1.0, passes, passes * macs});
        response.push_back(point->cycles_median);
    }
    std::string why;
    auto fit = fit_relative(stats, rows, response, &why);
    if (!fit) {
        builder.missing("pass_issue_cycles", why.empty() ? "no pass_issue measurements" : why);
        return;
    }
    const std::string source = probe_name(points);
    builder.add_coefficient("pass_issue_cycles", *fit, 1, source,
                            "slope in passes of cycles = base + passes*issue + passes*MACs/rate (WLS)");
    builder.add_reciprocal("tensor_macs_per_cycle", *fit, 2, source, "1 / slope in MACs of the same fit");
}

void fit_vector_op(const MicrobenchRun& run, const Statistics& stats, ModelBuilder& builder) {
    auto points = ok_points(run, "vector_op");
    std::vector<std::vector<double>> rows;
    std::vector<double> response;
    for (const auto* point : points) {
        const double ops = param_of(*point, "ops"), elems = param_of(*point, "elems");
        rows.push_back({1.0, ops, ops * elems});
        response.push_back(point->cycles_median);
    }
    std::string why;
    auto fit = fit_relative(stats, rows, response, &why);
    if (!fit) {
        builder.missing("vector_op_cycles", why.empty() ? "no vector_op measurements" : why);
        return;
    }
    const std::string source = probe_name(points);
    builder.add_coefficient("vector_op_cycles", *fit, 1, source,
                            "slope in ops of cycles = base + ops*op_cost + ops*elems/rate (WLS)");
    builder.add_reciprocal("vector_elems_per_cycle", *fit, 2, source, "1 / slope in elements of the same fit");
}

void fit_switch_copy(const MicrobenchRun& run, const Statistics& stats, ModelBuilder& builder) {
    auto points = ok_points(run, "switch_copy");
    std::vector<std::vector<double>> rows;
    std::vector<double> response;
    for (const auto* point : points) {
        rows.push_back({1.0, param_of(*point, "bytes")});
        response.push_back(point->cycles_median / param_of(*point, "copies"));
    }
    std::string why;
    auto fit = fit_relative(stats, rows, response, &why);
    if (!fit) {
        builder.missing("switch_bytes_per_cycle", why.empty() ? "no switch_copy measurements" : why);
        return;
    }
    const std::string source = probe_name(points);
    builder.add_coefficient("switch_startup_cycles", *fit, 0, source,
                            "intercept of cycles/copy = startup + bytes/bandwidth (WLS)");
    builder.add_reciprocal("switch_bytes_per_cycle", *fit, 1, source, "1 / slope in bytes of the same fit");
}

double fact_or_zero(const config::TargetConfig& target, const std::string& key) {
    auto found = target.facts.find(key);
    return found == target.facts.end() ? 0.0 : found->second.value;
}

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

double HardwareModel::weight_movement_min_cycles(double bytes) const {
    return sustained_bytes_per_cycle > 0 ? bytes / sustained_bytes_per_cycle : 0.0;
}

double HardwareModel::dma_command_cycles(double bytes, double packet_bytes) const {
    if (dma_engine_bytes_per_cycle <= 0 || packet_bytes <= 0) return 0.0;
    return dma_startup_cycles + bytes / dma_engine_bytes_per_cycle +
           std::ceil(bytes / packet_bytes) * dma_packet_overhead_cycles;
}

HardwareModel fit_hardware_model(const MicrobenchRun& run, const config::TargetConfig& target, const Statistics& stats) {
    HardwareModel model;
    model.target = run.target.empty() ? target.name : run.target;
    model.toolchain_version = run.toolchain_version;
    ModelBuilder builder(model);
    if (double clusters = fact_or_zero(target, "clusters"); clusters > 0) {
        builder.add("clusters", clusters, clusters, clusters, std::nullopt, 0, "fact", "public fact of target.yaml");
    }
    if (double packet = fact_or_zero(target, "dma_max_packet_bytes"); packet > 0) {
        builder.add("dma_max_packet_bytes", packet, packet, packet, std::nullopt, 0, "fact", "public fact of target.yaml");
    }
    fit_dma_single_engine(run, stats, builder, model);
    fit_hbm_saturation(run, stats, builder, model);
    fit_unaligned_write(run, stats, builder);
    fit_bank_conflict(run, stats, builder);
    fit_bank_hang(run, builder, model);
    fit_pass_issue(run, stats, builder);
    if (const auto* per_slice = model.param("tensor_macs_per_cycle")) {
        double slices = fact_or_zero(target, "slices");
        if (slices <= 0) slices = fact_or_zero(target, "slices_per_cluster") * model.clusters;
        if (slices > 0) {
            builder.add("chip_macs_per_cycle", per_slice->value * slices, per_slice->ci95_lower * slices,
                        per_slice->ci95_upper * slices, per_slice->r_squared, per_slice->points, per_slice->source,
                        fmt::format("tensor_macs_per_cycle x {} slices (facts)", slices));
        } else {
            builder.missing("chip_macs_per_cycle", "no slices or slices_per_cluster fact in target.yaml");
        }
    }
    fit_vector_op(run, stats, builder);
    fit_switch_copy(run, stats, builder);
    for (const auto& point : run.points) {
        // bank_hang reports its own; a rejected engine count is how the engine sweep ends
        if (point.status == PointStatus::failed && point.measures != "bank_hang" && point.measures != "hbm_saturation") {
            model.findings.push_back(fmt::format("probe {} failed at {}: {}", point.probe,
                                                 nlohmann::json(point.params).dump(), point.message));
        }
    }
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
        ModelBuilder builder(model);
        for (const auto& item : json.at("params")) {
            std::optional<double> r_squared;
            if (item.contains("r_squared") && !item.at("r_squared").is_null()) r_squared = item.at("r_squared").get<double>();
            builder.add(item.at("name").get<std::string>(), number_or_infinity(item, "value"),
                        item.contains("ci95_lower") && !item.at("ci95_lower").is_null() ? item.at("ci95_lower").get<double>() : 0.0,
                        number_or_infinity(item, "ci95_upper"), r_squared, item.value("points", std::size_t{0}),
                        item.value("source", ""), item.value("method", ""));
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

std::optional<HardwareModel> load_hardware_model(store::CampaignStore& store, const std::string& target,
                                                 const std::string& toolchain_version) {
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
    return newest;
}

}  // namespace npuopt::knowledge
