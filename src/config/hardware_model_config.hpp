#pragma once
// Typed contents of a microbenchmark suite's `model:` section (microbench/<target>/suite.yaml):
// the hardware parameters the suite determines and how, as an ordered list of entries, each of
// one form from a small fixed set (knowledge/hardware_model.cpp implements them generically):
//
//   fact           a public fact of target.yaml, copied as a parameter
//   linear         weighted least squares of a response on terms over one kind of measurement
//   penalty_ratio  two such fits (base and variant points); the ratio of one coefficient
//   saturation     rate against a count: the mean rate past the knee of linear scaling
//   threshold      the largest swept value that passed, the smallest that failed
//   derived        an expression over parameters determined before and facts
//
// Expressions stay text here, each with the file:line:column it was read from.

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace npuopt::config {

/// An expression as written in YAML.
struct ExpressionText {
    std::string text;
    std::string location;  ///< file:line:column
    std::string key;       ///< dotted key path
};

enum class ModelForm { fact, linear, penalty_ratio, saturation, threshold, derived };

/// One term of a `sum:` output: coefficient / divided_by.
struct CoefficientShare {
    std::size_t coefficient = 0;
    std::optional<ExpressionText> divided_by;  ///< none: 1
};

/// One parameter an entry produces.
struct ModelParamSpec {
    std::string name;
    std::string unit;
    std::string method;                 ///< in words; {variable} is replaced by its value
    std::string source;                 ///< overrides the probe name as the parameter's source
    std::string location;
    std::string fact;                   ///< form fact: the fact's key
    std::optional<std::size_t> coefficient;   ///< linear, penalty_ratio: which coefficient
    std::vector<CoefficientShare> sum;        ///< linear: sum of coefficient shares
    std::optional<std::pair<std::size_t, std::size_t>> ratio;  ///< linear: [numerator, denominator]
    double plus = 0.0;                  ///< added to a ratio
    bool reciprocal = false;            ///< `transform: reciprocal`
    std::optional<ExpressionText> expression;  ///< threshold (`of`), derived (`expression`)
};

/// One entry of `model:`.
struct ModelEntrySpec {
    ModelForm form = ModelForm::fact;
    std::string location;
    std::string measures;               ///< which points (every form but fact and derived)
    std::optional<ExpressionText> where;     ///< linear: which of those points
    std::optional<ExpressionText> response;  ///< linear, penalty_ratio
    std::vector<ExpressionText> terms;       ///< linear, penalty_ratio: the design's columns
    std::optional<ExpressionText> base;      ///< penalty_ratio
    std::optional<ExpressionText> variant;   ///< penalty_ratio
    std::optional<ExpressionText> count;     ///< saturation
    std::optional<ExpressionText> rate;      ///< saturation
    double knee = 0.85;                      ///< saturation: past the knee = below knee × linear scaling
    std::optional<ExpressionText> value;     ///< threshold: the swept value
    std::vector<std::string> pass = {"ok"};      ///< threshold: point statuses that pass
    std::vector<std::string> fail = {"failed"};  ///< threshold: point statuses that fail
    std::string finding_if_fail;             ///< threshold: recorded when a point failed
    std::string finding_if_no_fail;          ///< threshold: recorded when none failed
    std::vector<ModelParamSpec> params;
};

/// Every parameter name an entry list declares, in order.
std::vector<std::string> declared_param_names(const std::vector<ModelEntrySpec>& entries);

namespace detail {
class Fields;
}
/// Parse the `model:` list of `fields` (suite.yaml's top level). Errors name file:line and key.
std::vector<ModelEntrySpec> parse_model_section(const detail::Fields& fields);

}  // namespace npuopt::config
