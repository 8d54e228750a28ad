#pragma once
// The search's cost model: predicts a design's cycles from the quantities its template declares
// and the fitted hardware model (roofline terms with overlap), then corrects per design family
// with what the campaign measured (least squares on log(measured / predicted)), and learns what
// the quantities cannot show — a template parameter whose values change nothing the roofline
// sees (an exchange scheme, a late scale, a stagger) — as per-value effects on the remaining
// log residual (ridge regression on the parameter values of the family's measured designs). It
// only ranks candidates; the judge decides.
//
// The roofline terms, the quantities they read and the combine rule are the target's data
// (knowledge/<target>/cost_model.yaml, attached to the hardware model): expressions over a
// design's template quantities and the fitted hardware parameters (hw.NAME). A model without a
// declaration predicts nothing.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "knowledge/hardware_model.hpp"

namespace npuopt::search {

/// The roofline terms of one design, in cycles (0 when a term's inputs are unknown), in the
/// order the target declares them.
struct CostTerms {
    std::vector<std::string> names;
    std::vector<double> values;
    std::vector<std::string> groups;  ///< terms of one group add up before combining
    double overlap = 0.1;

    /// Overlapped estimate: the largest group plus `overlap` times the others.
    double combined() const;
    /// Name of the largest term, "" when all are 0 (ties: the first by name).
    std::string dominant() const;
    std::map<std::string, double> as_map() const;
    /// The term named `name`, 0 when there is none.
    double value(const std::string& name) const;
};

/// The key of a parameter value in CostModel::param_effects ("NAME=value").
std::string param_key(const std::string& name, double value);

/// The cost-model interface roles and the kernel search are written against: a prediction of a
/// design's cycles, learning from what was measured (`observe`, the update), and what explains a
/// prediction (its terms, the learnt effect of a parameter's values). CostModel is the one the
/// campaign uses; a test gives a role any other (tests/search/test_cycle_predictor.cpp).
class CyclePredictor {
public:
    virtual ~CyclePredictor() = default;
    /// Predicted cycles of a design of `family` with these quantities (and parameter values);
    /// nullopt when the predictor can say nothing about it.
    virtual std::optional<double> predict(const std::string& family, const std::map<std::string, double>& quantities,
                                          const std::map<std::string, double>* params = nullptr) const = 0;
    /// Learn from a measured design of `family`.
    virtual void observe(const std::string& family, const std::map<std::string, double>& quantities,
                         double measured_cycles, const std::map<std::string, double>* params = nullptr) = 0;
    /// The terms a prediction is made of (none: the predictor has no terms).
    virtual CostTerms terms(const std::map<std::string, double>& quantities) const = 0;
    /// The declaration of the term named `name`, or nullptr.
    virtual const config::CostTermSpec* term_spec(const std::string& name) const = 0;
    /// The learnt effect of each "NAME=value" of `family` on log cycles (negative: faster).
    virtual std::map<std::string, double> param_effects(const std::string& family) const = 0;
};

/// Predicts cycles from the target's declared cost terms and learns a per-family correction.
class CostModel final : public CyclePredictor {
public:
    CostModel();
    /// Compiles the model's declared cost terms (none when the target declares none).
    explicit CostModel(knowledge::HardwareModel model);
    CostModel(const CostModel&);
    CostModel& operator=(const CostModel&);
    CostModel(CostModel&&) noexcept;
    CostModel& operator=(CostModel&&) noexcept;
    ~CostModel() override;

    CostTerms terms(const std::map<std::string, double>& quantities) const override;
    /// The terms of a design of `family`: the target's, with the family's own (a template's
    /// `terms:`) replacing those of the same name and added after them.
    CostTerms terms(const std::map<std::string, double>& quantities, const std::string& family) const;
    /// Declare `family`'s own cost terms (a template's `terms:`); compiled and checked like the
    /// target's: Error(invalid_config) naming the file and key when a term reads an unknown name.
    /// Nothing happens without a declared cost model.
    void add_family_terms(const std::string& family, const std::vector<config::CostTermSpec>& terms);
    /// Uncorrected prediction; nullopt when the quantities say nothing the model can use.
    std::optional<double> predict_base(const std::map<std::string, double>& quantities,
                                       const std::string& family = "") const;
    /// Prediction with the family's learnt correction, and with the learnt effects of `params`'
    /// values when given (a value never measured has no effect).
    std::optional<double> predict(const std::string& family, const std::map<std::string, double>& quantities,
                                  const std::map<std::string, double>* params = nullptr) const override;

    /// Learn from a measured design of `family` (with its parameter values, when it has any);
    /// refits that family's correction and parameter effects.
    void observe(const std::string& family, const std::map<std::string, double>& quantities, double measured_cycles,
                 const std::map<std::string, double>* params = nullptr) override;
    /// The learnt effect of each "NAME=value" of `family` on log cycles (negative: faster).
    std::map<std::string, double> param_effects(const std::string& family) const override;
    /// log(measured / predicted) ≈ offset + slope × (log predicted − centre), least squares per family.
    struct Correction { double offset = 0.0; double slope = 0.0; double centre = 0.0; std::size_t points = 0; };
    Correction correction(const std::string& family) const;

    const knowledge::HardwareModel& hardware() const { return m_model; }
    /// The declaration of the term named `name`, or nullptr.
    const config::CostTermSpec* term_spec(const std::string& name) const override;

private:
    struct Point { double log_predicted; double log_ratio; std::map<std::string, double> params; };
    void refit(const std::string& family);

    struct Compiled;
    knowledge::HardwareModel m_model;
    std::unique_ptr<Compiled> m_compiled;
    std::map<std::string, std::vector<Point>> m_points;
    std::map<std::string, Correction> m_corrections;
    std::map<std::string, std::map<std::string, double>> m_param_effects;
};

}  // namespace npuopt::search
