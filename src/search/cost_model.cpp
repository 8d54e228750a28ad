#include "search/cost_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.hpp"
#include "numerics/expression.hpp"
#include "numerics/least_squares.hpp"

namespace npuopt::search {

namespace {

bool usable(double value) { return std::isfinite(value) && value >= 0.0; }

}  // namespace

/// The target's declaration, compiled once per cost model.
struct CostModel::Compiled {
    std::shared_ptr<const config::CostModelSpec> spec;
    std::vector<std::pair<std::string, numerics::Expression>> lets;
    std::vector<numerics::Expression> terms;
    /// A family's own terms (templates' `terms:`), each with its compiled expression.
    std::map<std::string, std::vector<std::pair<config::CostTermSpec, numerics::Expression>>> family_terms;
    std::set<std::string> known;  ///< quantities and lets a term may read (besides hw.*)

    static numerics::Expression compile(const config::ExpressionText& text) {
        return numerics::Expression({text.text, text.location, text.key});
    }

    void check(const numerics::Expression& expression) const {
        for (const auto& name : expression.variables()) {
            if (!known.contains(name) && !name.starts_with("hw.")) {
                throw Error(ErrorKind::invalid_config,
                            fmt::format("{}: key '{}': '{}' is neither a declared quantity (quantities: of the target's "
                                        "cost_model.yaml), a let nor a hardware parameter (hw.NAME)",
                                        expression.source().location, expression.source().key, name));
            }
        }
    }

    explicit Compiled(std::shared_ptr<const config::CostModelSpec> declaration) : spec(std::move(declaration)) {
        for (const auto& [name, fallback] : spec->quantities) known.insert(name);
        for (const auto& [name, text] : spec->let) {
            lets.emplace_back(name, compile(text));
            check(lets.back().second);
            known.insert(name);
        }
        for (const auto& term : spec->terms) {
            terms.push_back(compile(term.expression));
            check(terms.back());
        }
    }
};

CostModel::CostModel() = default;
CostModel::CostModel(knowledge::HardwareModel model) : m_model(std::move(model)) {
    if (m_model.cost_model) m_compiled = std::make_unique<Compiled>(m_model.cost_model);
}
CostModel::CostModel(const CostModel& other)
    : m_model(other.m_model),
      m_compiled(other.m_compiled ? std::make_unique<Compiled>(*other.m_compiled) : nullptr),
      m_points(other.m_points),
      m_corrections(other.m_corrections),
      m_param_effects(other.m_param_effects) {}
CostModel& CostModel::operator=(const CostModel& other) {
    if (this != &other) *this = CostModel(other);
    return *this;
}
CostModel::CostModel(CostModel&&) noexcept = default;
CostModel& CostModel::operator=(CostModel&&) noexcept = default;
CostModel::~CostModel() = default;

double CostTerms::combined() const {
    std::vector<std::string> group_names;
    std::vector<double> group_values;
    for (std::size_t idx = 0; idx < values.size(); ++idx) {
        auto found = std::find(group_names.begin(), group_names.end(), groups[idx]);
        if (found == group_names.end()) {
            group_names.push_back(groups[idx]);
            group_values.push_back(values[idx]);
        } else {
            group_values[static_cast<std::size_t>(found - group_names.begin())] += values[idx];
        }
    }
    if (group_values.empty()) return 0.0;
    double largest = *std::max_element(group_values.begin(), group_values.end());
    double total = 0.0;
    for (double value : group_values) total += value;
    return largest + overlap * (total - largest);
}

std::map<std::string, double> CostTerms::as_map() const {
    std::map<std::string, double> result;
    for (std::size_t idx = 0; idx < names.size(); ++idx) result[names[idx]] = values[idx];
    return result;
}

double CostTerms::value(const std::string& name) const {
    for (std::size_t idx = 0; idx < names.size(); ++idx) {
        if (names[idx] == name) return values[idx];
    }
    return 0.0;
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

const config::CostTermSpec* CostModel::term_spec(const std::string& name) const {
    if (!m_compiled) return nullptr;
    for (const auto& term : m_compiled->spec->terms) {
        if (term.name == name) return &term;
    }
    return nullptr;
}

void CostModel::add_family_terms(const std::string& family, const std::vector<config::CostTermSpec>& terms) {
    if (!m_compiled || terms.empty()) return;
    auto& own = m_compiled->family_terms[family];
    for (const auto& term : terms) {
        numerics::Expression expression = Compiled::compile(term.expression);
        m_compiled->check(expression);
        auto same = std::find_if(own.begin(), own.end(), [&](const auto& entry) { return entry.first.name == term.name; });
        if (same != own.end()) {
            *same = {term, std::move(expression)};
        } else {
            own.emplace_back(term, std::move(expression));
        }
    }
}

CostTerms CostModel::terms(const std::map<std::string, double>& quantities) const { return terms(quantities, ""); }

CostTerms CostModel::terms(const std::map<std::string, double>& quantities, const std::string& family) const {
    CostTerms result;
    if (!m_compiled) return result;
    const auto& spec = *m_compiled->spec;
    std::map<std::string, double> values;
    for (const auto& [name, fallback] : spec.quantities) {
        auto found = quantities.find(name);
        values[name] = found == quantities.end() || !std::isfinite(found->second) ? fallback : found->second;
    }
    auto lookup = [&](const std::string& name) -> std::optional<double> {
        if (auto found = values.find(name); found != values.end()) return found->second;
        return m_model.variable(name);
    };
    for (const auto& [name, expression] : m_compiled->lets) values[name] = expression.evaluate(lookup);
    result.overlap = spec.overlap;
    const auto own = family.empty() ? m_compiled->family_terms.end() : m_compiled->family_terms.find(family);
    auto own_term = [&](const std::string& name) -> const std::pair<config::CostTermSpec, numerics::Expression>* {
        if (own == m_compiled->family_terms.end()) return nullptr;
        for (const auto& entry : own->second) {
            if (entry.first.name == name) return &entry;
        }
        return nullptr;
    };
    for (std::size_t idx = 0; idx < spec.terms.size(); ++idx) {
        const auto* replaced = own_term(spec.terms[idx].name);
        const double value = replaced ? replaced->second.evaluate(lookup) : m_compiled->terms[idx].evaluate(lookup);
        result.names.push_back(spec.terms[idx].name);
        result.groups.push_back(replaced ? replaced->first.group : spec.terms[idx].group);
        result.values.push_back(usable(value) ? value : 0.0);
    }
    if (own != m_compiled->family_terms.end()) {
        for (const auto& [term, expression] : own->second) {
            if (std::find(result.names.begin(), result.names.end(), term.name) != result.names.end()) continue;
            const double value = expression.evaluate(lookup);
            result.names.push_back(term.name);
            result.groups.push_back(term.group);
            result.values.push_back(usable(value) ? value : 0.0);
        }
    }
    return result;
}

std::optional<double> CostModel::predict_base(const std::map<std::string, double>& quantities,
                                              const std::string& family) const {
    double value = terms(quantities, family).combined();
    if (!(value > 0.0) || !std::isfinite(value)) return std::nullopt;
    return value;
}

std::string param_key(const std::string& name, double value) { return fmt::format("{}={:g}", name, value); }

std::optional<double> CostModel::predict(const std::string& family, const std::map<std::string, double>& quantities,
                                         const std::map<std::string, double>* params) const {
    auto base = predict_base(quantities, family);
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
    auto base = predict_base(quantities, family);
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
    std::map<std::string, std::size_t> columns;
    std::vector<const Point*> rows;
    for (const auto& point : points) {
        if (point.params.empty()) continue;
        rows.push_back(&point);
        for (const auto& [name, value] : point.params) columns.emplace(param_key(name, value), 0);
    }
    m_param_effects.erase(family);
    if (rows.size() < 3 || columns.empty()) return;
    std::size_t column = 0;
    for (auto& [key, index] : columns) index = column++;
    numerics::Matrix features(rows.size(), column);
    std::vector<double> residuals(rows.size());
    for (std::size_t row = 0; row < rows.size(); ++row) {
        const Point& point = *rows[row];
        residuals[row] = point.log_ratio - (fit.offset + fit.slope * (point.log_predicted - fit.centre));
        for (const auto& [name, value] : point.params) features(row, columns[param_key(name, value)]) = 1.0;
    }
    const double lambda = 1.0;
    const std::vector<double> weights = numerics::solve_ridge(features, residuals, lambda);
    auto& effects = m_param_effects[family];
    for (const auto& [key, index] : columns) {
        if (std::isfinite(weights[index])) effects[key] = weights[index];
    }
}

}  // namespace npuopt::search
