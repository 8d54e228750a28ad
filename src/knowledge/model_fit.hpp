#pragma once
// How the hardware model is fitted (knowledge/ private): the context every model form reads —
// a point's variables, the parameters determined so far, the target's facts — and the model
// forms themselves (model_forms.cpp), each filling the parameters of one `model:` entry of the
// microbenchmark suite. hardware_model.cpp runs them in the suite's order.

#include <cstddef>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/microbench_config.hpp"
#include "config/target_config.hpp"
#include "knowledge/hardware_model.hpp"
#include "knowledge/microbench.hpp"
#include "numerics/expression.hpp"
#include "numerics/least_squares.hpp"

namespace npuopt::knowledge::model_fit {

inline constexpr double k_infinity = std::numeric_limits<double>::infinity();
inline constexpr double k_nan = std::numeric_limits<double>::quiet_NaN();

/// An expression of the suite, compiled (its location kept for errors).
numerics::Expression compile(const config::ExpressionText& text);

/// A fitted straight line (or plane): coefficients with intervals, R² on the response's scale.
struct Fit {
    numerics::LinearFit summary;
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
std::optional<Fit> fit_relative(const std::vector<std::vector<double>>& rows, const std::vector<double>& response,
                                std::string* why);

/// Whether `status` is one of the point statuses named in `names`.
bool status_in(PointStatus status, const std::vector<std::string>& names);

/// A number as a method text shows it: integers without decimals, else 4 significant digits.
std::string format_number(double value);

/// A parameter of the model is needed by an expression but was not determined.
struct Undetermined {
    std::string name;
};

/// Named values beside a point's own (aggregates such as max_<param>, a form's intermediate results).
using Extras = std::map<std::string, double>;

/// What every model form reads and writes while the suite's `model:` entries are fitted in order.
class FitContext {
public:
    FitContext(const MicrobenchRun& run, const config::TargetConfig& target, const config::MicrobenchSuite& suite,
               HardwareModel& model);

    const MicrobenchRun& run() const { return m_run; }
    const config::TargetConfig& target() const { return m_target; }
    const config::MicrobenchSuite& suite() const { return m_suite; }
    HardwareModel& model() { return m_model; }
    /// Every parameter name the suite declares (determined or not).
    const std::set<std::string>& declared() const { return m_declared; }
    /// A failed point a form explains (a threshold sweep's end), so it is not reported as a finding.
    void claim(const MicrobenchPoint* point) { m_claimed.insert(point); }
    bool claimed(const MicrobenchPoint* point) const { return m_claimed.contains(point); }

    /// A variable's value: `extras`, then the point's `cycles` and params, then the parameters
    /// determined so far, then the target's facts; throws Undetermined for a declared parameter
    /// not determined yet.
    std::optional<double> lookup(const std::string& name, const MicrobenchPoint* point, const Extras& extras) const;
    double evaluate(const numerics::Expression& expression, const MicrobenchPoint* point,
                    const Extras& extras = {}) const;
    /// `text` with each {name} replaced by that variable's value (unknown names stay as written).
    std::string fill(const std::string& text, const Extras& extras) const;
    /// A determined parameter, with its interval, fit quality, evidence and method text.
    void add(const config::ModelParamSpec& spec, double value, double lower, double upper,
             std::optional<double> r_squared, std::size_t points, const std::string& source, const Extras& extras);
    void missing(const std::string& name, const std::string& why);
    void all_missing(const config::ModelEntrySpec& entry, const std::string& why);
    /// The entry's measured points that ran and took time.
    std::vector<const MicrobenchPoint*> ok_points(const config::ModelEntrySpec& entry) const;
    /// The points where `where` holds (all without one).
    std::vector<const MicrobenchPoint*> filtered(const std::vector<const MicrobenchPoint*>& points,
                                                 const std::optional<config::ExpressionText>& where) const;
    /// max_<param> and min_<param> over `points`.
    static Extras aggregates(const std::vector<const MicrobenchPoint*>& points);
    /// The entry's response fitted on its terms over `points`.
    std::optional<Fit> fit_points(const config::ModelEntrySpec& entry,
                                  const std::vector<const MicrobenchPoint*>& points, std::string* why) const;
    static std::string probe_name(const std::vector<const MicrobenchPoint*>& points);
    std::string no_measurements(const config::ModelEntrySpec& entry) const;

private:
    const MicrobenchRun& m_run;
    const config::TargetConfig& m_target;
    const config::MicrobenchSuite& m_suite;
    HardwareModel& m_model;
    std::set<std::string> m_declared;
    std::set<const MicrobenchPoint*> m_claimed;  ///< failures a threshold entry counts as its sweep's end
};

// The model forms (model_forms.cpp), one per `form:` of a suite's model entry.

/// Parameters copied from the target's facts.
void fit_facts(FitContext& context, const config::ModelEntrySpec& entry);
/// A least-squares line or plane over the entry's terms; parameters are coefficients, sums of
/// coefficients over divisors, or ratios of coefficients.
void fit_linear(FitContext& context, const config::ModelEntrySpec& entry);
/// The same line fitted on a base and a variant subset; parameters are variant ÷ base coefficients.
void fit_penalty_ratio(FitContext& context, const config::ModelEntrySpec& entry);
/// Throughput against a count: the level it saturates at (points below `knee` × linear scaling).
void fit_saturation(FitContext& context, const config::ModelEntrySpec& entry);
/// The largest passing and smallest failing value of a sweep, and expressions of them.
void fit_threshold(FitContext& context, const config::ModelEntrySpec& entry);
/// Expressions of parameters determined earlier, their intervals carried through.
void fit_derived(FitContext& context, const config::ModelEntrySpec& entry);

/// Every entry of the suite's model, in order, then the failed points no form explains as findings.
void fit_all(FitContext& context);

}  // namespace npuopt::knowledge::model_fit
