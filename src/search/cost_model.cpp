#include "search/cost_model.hpp"

#include <Eigen/Dense>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace npuopt::search {

namespace {

double quantity_or(const std::map<std::string, double>& quantities, const std::string& name, double fallback) {
    auto found = quantities.find(name);
    return found == quantities.end() || !std::isfinite(found->second) ? fallback : found->second;
}

}  // namespace

double CostTerms::combined() const {
    std::vector<double> values = {hbm, dma_stream, dma_startup + dma_packets, pass_issue};
    double largest = *std::max_element(values.begin(), values.end());
    double total = 0.0;
    for (double value : values) total += value;
    return largest + 0.1 * (total - largest);
}

std::map<std::string, double> CostTerms::as_map() const {
    return {{"hbm", hbm}, {"dma_stream", dma_stream}, {"dma_startup", dma_startup}, {"dma_packets", dma_packets},
            {"pass_issue", pass_issue}};
}

std::string CostTerms::dominant() const {
    std::string best;
    double best_value = 0.0;
    for (const auto& [name, value] : as_map()) {
        if (value > best_value) {
            best = name;
            best_value = value;
        }
    }
    return best;
}

CostTerms CostModel::terms(const std::map<std::string, double>& quantities) const {
    CostTerms result;
    double weight_bytes = quantity_or(quantities, "weight_bytes", 0.0);
    double engines = std::max(1.0, quantity_or(quantities, "engine_index", 0.0) + 1.0);
    double slices = std::max(1.0, quantity_or(quantities, "slice", 0.0) + 1.0);
    // A template may declare how many clusters stream ("clusters"); otherwise one cluster's engines.
    double engines_used = engines * std::max(1.0, quantity_or(quantities, "clusters", 1.0));
    if (m_model.sustained_bytes_per_cycle > 0.0) result.hbm = weight_bytes / m_model.sustained_bytes_per_cycle;
    double engine_bandwidth = m_model.dma_effective_bytes_per_cycle > 0.0 ? m_model.dma_effective_bytes_per_cycle
                                                                          : m_model.dma_engine_bytes_per_cycle;
    if (engine_bandwidth > 0.0) result.dma_stream = weight_bytes / (engines_used * engine_bandwidth);
    result.dma_startup = quantity_or(quantities, "dma_commands", 0.0) * m_model.dma_startup_cycles / engines_used;
    double packet_bytes = quantity_or(quantities, "packet_bytes", 0.0);
    if (m_model.dma_max_packet_bytes > 0.0 && packet_bytes > m_model.dma_max_packet_bytes) {
        packet_bytes = m_model.dma_max_packet_bytes;
    }
    if (packet_bytes > 0.0) {
        result.dma_packets = weight_bytes / packet_bytes * m_model.dma_packet_overhead_cycles / engines_used;
    }
    result.pass_issue = quantity_or(quantities, "passes", 0.0) * m_model.pass_issue_cycles / slices;
    return result;
}

std::optional<double> CostModel::predict_base(const std::map<std::string, double>& quantities) const {
    double value = terms(quantities).combined();
    if (!(value > 0.0) || !std::isfinite(value)) return std::nullopt;
    return value;
}

std::string param_key(const std::string& name, double value) { return fmt::format("{}={:g}", name, value); }

std::optional<double> CostModel::predict(const std::string& family, const std::map<std::string, double>& quantities,
                                         const std::map<std::string, double>* params) const {
    auto base = predict_base(quantities);
    if (!base) return std::nullopt;
    Correction fit = correction(family);
    double log_base = std::log(*base);
    double effect = 0.0;
    if (params) {
        auto effects = m_param_effects.find(family);
        if (effects != m_param_effects.end()) {
            for (const auto& [name, value] : *params) {
                auto found = effects->second.find(param_key(name, value));
                if (found != effects->second.end()) effect += found->second;
            }
        }
    }
    return std::exp(log_base + fit.offset + fit.slope * (log_base - fit.centre) + effect);
}

void CostModel::observe(const std::string& family, const std::map<std::string, double>& quantities,
                        double measured_cycles, const std::map<std::string, double>* params) {
    auto base = predict_base(quantities);
    if (!base || !(measured_cycles > 0.0)) return;
    m_points[family].push_back({std::log(*base), std::log(measured_cycles / *base),
                                params ? *params : std::map<std::string, double>{}});
    refit(family);
}

std::map<std::string, double> CostModel::param_effects(const std::string& family) const {
    auto found = m_param_effects.find(family);
    return found == m_param_effects.end() ? std::map<std::string, double>{} : found->second;
}

CostModel::Correction CostModel::correction(const std::string& family) const {
    auto found = m_corrections.find(family);
    return found == m_corrections.end() ? Correction{} : found->second;
}

void CostModel::refit(const std::string& family) {
    const auto& points = m_points[family];
    Correction fit;
    fit.points = points.size();
    double count = static_cast<double>(points.size());
    double mean_x = 0.0;
    double mean_y = 0.0;
    for (const auto& point : points) {
        mean_x += point.log_predicted / count;
        mean_y += point.log_ratio / count;
    }
    fit.centre = mean_x;
    fit.offset = mean_y;
    // The slope needs spread and a few points; it is shrunk towards 0 (ridge) so that two lucky
    // points cannot invert the ranking.
    if (points.size() >= 4) {
        double sxx = 0.0;
        double sxy = 0.0;
        for (const auto& point : points) {
            sxx += (point.log_predicted - mean_x) * (point.log_predicted - mean_x);
            sxy += (point.log_predicted - mean_x) * (point.log_ratio - mean_y);
        }
        double ridge = 0.5;
        fit.slope = std::clamp(sxy / (sxx + ridge), -0.9, 2.0);
    }
    m_corrections[family] = fit;

    // What the correction leaves unexplained, attributed to parameter values: one indicator per
    // "NAME=value" seen in a measured design, ridge-shrunk towards "no effect" (lambda 1 in log
    // units), so that a value measured once moves the ranking by half its residual at most.
    std::map<std::string, Eigen::Index> columns;
    std::vector<const Point*> rows;
    for (const auto& point : points) {
        if (point.params.empty()) continue;
        rows.push_back(&point);
        for (const auto& [name, value] : point.params) columns.emplace(param_key(name, value), 0);
    }
    m_param_effects.erase(family);
    if (rows.size() < 3 || columns.empty()) return;
    Eigen::Index column = 0;
    for (auto& [key, index] : columns) index = column++;
    Eigen::MatrixXd features = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(rows.size()), column);
    Eigen::VectorXd residuals(static_cast<Eigen::Index>(rows.size()));
    for (std::size_t row = 0; row < rows.size(); ++row) {
        const Point& point = *rows[row];
        const auto row_index = static_cast<Eigen::Index>(row);
        residuals(row_index) = point.log_ratio - (fit.offset + fit.slope * (point.log_predicted - fit.centre));
        for (const auto& [name, value] : point.params) features(row_index, columns[param_key(name, value)]) = 1.0;
    }
    const double lambda = 1.0;
    Eigen::MatrixXd normal = features.transpose() * features;
    normal.diagonal().array() += lambda;
    const Eigen::VectorXd weights = normal.ldlt().solve(features.transpose() * residuals);
    auto& effects = m_param_effects[family];
    for (const auto& [key, index] : columns) {
        if (std::isfinite(weights(index))) effects[key] = weights(index);
    }
}

}  // namespace npuopt::search
