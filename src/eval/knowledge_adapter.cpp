#include "eval/knowledge_adapter.hpp"

#include "eval/stats.hpp"

namespace npuopt::eval {

knowledge::Statistics knowledge_statistics() {
    knowledge::Statistics stats;
    stats.median = [](std::span<const double> values) { return median(values); };
    stats.mad = [](std::span<const double> values) { return mad(values); };
    stats.fit_linear = [](const Eigen::MatrixXd& design, const Eigen::VectorXd& response) {
        LinearFit fit = fit_linear(design, response);
        knowledge::LinearFitSummary summary;
        for (Eigen::Index coefficient_idx = 0; coefficient_idx < fit.coefficients.size(); ++coefficient_idx) {
            const auto idx = static_cast<std::size_t>(coefficient_idx);
            summary.coefficients.push_back(fit.coefficients[coefficient_idx]);
            summary.standard_errors.push_back(fit.standard_errors[coefficient_idx]);
            summary.coefficient_ci95.emplace_back(fit.coefficient_ci95[idx].lower, fit.coefficient_ci95[idx].upper);
        }
        summary.r_squared = fit.r_squared;
        summary.dof = fit.dof;
        return summary;
    };
    return stats;
}

}  // namespace npuopt::eval
