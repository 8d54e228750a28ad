#include "config/hardware_model_config.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "config/yaml_fields.hpp"
#include "core/error.hpp"

namespace npuopt::config {
namespace {

using detail::Fields;

const std::map<std::string, ModelForm> k_forms = {
    {"fact", ModelForm::fact},           {"linear", ModelForm::linear},       {"penalty_ratio", ModelForm::penalty_ratio},
    {"saturation", ModelForm::saturation}, {"threshold", ModelForm::threshold}, {"derived", ModelForm::derived},
};

const std::set<std::string> k_statuses = {"ok", "failed", "timed_out", "skipped"};

ExpressionText expression_at(const Fields& fields, std::string_view key) {
    YAML::Node node = fields.required(key, "an expression");
    ExpressionText text;
    text.key = fields.key_path(key);
    text.text = detail::scalar_string(fields.file(), node, text.key);
    text.location = detail::location(fields.file(), node);
    if (text.text.empty()) fields.fail_at(key, "empty expression");
    return text;
}

std::optional<ExpressionText> optional_expression(const Fields& fields, std::string_view key) {
    if (!fields.has(key)) return std::nullopt;
    return expression_at(fields, key);
}

std::size_t coefficient_index(const Fields& fields, std::string_view key, std::size_t terms) {
    const std::int64_t index = fields.integer(key);
    if (index < 0 || static_cast<std::size_t>(index) >= terms) {
        fields.fail_at(key, fmt::format("expected a coefficient index in 0..{} (one per term)", terms == 0 ? 0 : terms - 1));
    }
    return static_cast<std::size_t>(index);
}

ModelParamSpec parse_param(const Fields& entry, const YAML::Node& node, const std::string& path, ModelForm form,
                           std::size_t terms) {
    Fields fields(entry.file(), node, path,
                  {"name", "unit", "method", "source", "fact", "coefficient", "sum", "ratio", "plus", "transform", "of",
                   "expression"});
    ModelParamSpec param;
    param.name = fields.string("name");
    param.unit = fields.string_or("unit", "");
    param.method = fields.string_or("method", "");
    param.source = fields.string_or("source", "");
    param.location = detail::location(entry.file(), node);
    const std::string transform = fields.string_or("transform", "none");
    if (transform != "none" && transform != "reciprocal") fields.fail_at("transform", "expected none or reciprocal");
    param.reciprocal = transform == "reciprocal";
    auto refuse = [&](std::initializer_list<std::string_view> keys, std::string_view form_name) {
        for (auto key : keys) {
            if (fields.has(key)) fields.fail_at(key, fmt::format("not a key of a {} entry's params", form_name));
        }
    };
    switch (form) {
        case ModelForm::fact:
            refuse({"coefficient", "sum", "ratio", "plus", "transform", "of", "expression"}, "fact");
            param.fact = fields.string_or("fact", param.name);
            break;
        case ModelForm::linear: {
            refuse({"fact", "of", "expression"}, "linear");
            const int kinds = static_cast<int>(fields.has("coefficient")) + static_cast<int>(fields.has("sum")) +
                              static_cast<int>(fields.has("ratio"));
            if (kinds != 1) fields.fail_at("name", "expected exactly one of coefficient, sum or ratio");
            if (fields.has("coefficient")) param.coefficient = coefficient_index(fields, "coefficient", terms);
            if (fields.has("sum")) {
                YAML::Node shares = fields.required("sum", "a list of {coefficient, divided_by}");
                if (!shares.IsSequence() || shares.size() == 0) fields.fail_at("sum", "expected a non-empty list");
                for (std::size_t share_idx = 0; share_idx < shares.size(); ++share_idx) {
                    Fields share(entry.file(), shares[share_idx], fmt::format("{}.sum[{}]", path, share_idx),
                                 {"coefficient", "divided_by"});
                    param.sum.push_back({coefficient_index(share, "coefficient", terms), optional_expression(share, "divided_by")});
                }
            }
            if (fields.has("ratio")) {
                YAML::Node ratio = fields.required("ratio", "[numerator, denominator]");
                if (!ratio.IsSequence() || ratio.size() != 2) fields.fail_at("ratio", "expected [numerator, denominator]");
                std::size_t indices[2];
                for (std::size_t idx = 0; idx < 2; ++idx) {
                    const std::int64_t value = detail::scalar_integer(entry.file(), ratio[idx], fields.key_path("ratio"));
                    if (value < 0 || static_cast<std::size_t>(value) >= terms) fields.fail_at("ratio", "expected coefficient indices, one per term");
                    indices[idx] = static_cast<std::size_t>(value);
                }
                param.ratio = std::pair{indices[0], indices[1]};
                param.plus = fields.number_or("plus", 0.0);
            } else if (fields.has("plus")) {
                fields.fail_at("plus", "only a ratio takes plus");
            }
            break;
        }
        case ModelForm::penalty_ratio:
            refuse({"fact", "sum", "ratio", "plus", "transform", "of", "expression"}, "penalty_ratio");
            param.coefficient = coefficient_index(fields, "coefficient", terms);
            break;
        case ModelForm::saturation:
            refuse({"fact", "coefficient", "sum", "ratio", "plus", "transform", "of", "expression"}, "saturation");
            break;
        case ModelForm::threshold:
            refuse({"fact", "coefficient", "sum", "ratio", "plus", "transform", "expression"}, "threshold");
            param.expression = expression_at(fields, "of");
            break;
        case ModelForm::derived:
            refuse({"fact", "coefficient", "sum", "ratio", "plus", "transform", "of"}, "derived");
            param.expression = expression_at(fields, "expression");
            break;
    }
    return param;
}

std::vector<std::string> statuses(const Fields& fields, std::string_view key, std::vector<std::string> fallback) {
    auto values = fields.string_list_or(key, std::move(fallback));
    for (const auto& value : values) {
        if (!k_statuses.contains(value)) {
            fields.fail_at(key, fmt::format("'{}' is not a point status (expected ok, failed, timed_out or skipped)", value));
        }
    }
    return values;
}

ModelEntrySpec parse_entry(const Fields& top, const YAML::Node& node, const std::string& path) {
    Fields fields(top.file(), node, path,
                  {"form", "measures", "where", "response", "terms", "base", "variant", "count", "rate", "knee", "value",
                   "pass", "fail", "finding_if_fail", "finding_if_no_fail", "params"});
    ModelEntrySpec entry;
    entry.location = detail::location(top.file(), node);
    const std::string form = fields.string("form");
    auto found = k_forms.find(form);
    if (found == k_forms.end()) {
        fields.fail_at("form", fmt::format("unknown form '{}' (expected fact, linear, penalty_ratio, saturation, threshold "
                                           "or derived)", form));
    }
    entry.form = found->second;
    auto allow_only = [&](std::initializer_list<std::string_view> allowed) {
        for (const auto& key : fields.keys()) {
            if (key == "form" || key == "params") continue;
            if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
                fields.fail_at(key, fmt::format("not a key of a {} entry", form));
            }
        }
    };
    switch (entry.form) {
        case ModelForm::fact:
        case ModelForm::derived: allow_only({}); break;
        case ModelForm::linear: allow_only({"measures", "where", "response", "terms"}); break;
        case ModelForm::penalty_ratio: allow_only({"measures", "base", "variant", "response", "terms"}); break;
        case ModelForm::saturation: allow_only({"measures", "count", "rate", "knee"}); break;
        case ModelForm::threshold:
            allow_only({"measures", "value", "pass", "fail", "finding_if_fail", "finding_if_no_fail"});
            break;
    }
    if (entry.form != ModelForm::fact && entry.form != ModelForm::derived) entry.measures = fields.string("measures");
    entry.where = optional_expression(fields, "where");
    if (entry.form == ModelForm::linear || entry.form == ModelForm::penalty_ratio) {
        entry.response = expression_at(fields, "response");
        YAML::Node terms = fields.required("terms", "a list of expressions (the design's columns)");
        if (!terms.IsSequence() || terms.size() == 0) fields.fail_at("terms", "expected a non-empty list of expressions");
        for (std::size_t term_idx = 0; term_idx < terms.size(); ++term_idx) {
            ExpressionText text;
            text.key = fmt::format("{}[{}]", fields.key_path("terms"), term_idx);
            text.text = detail::scalar_string(top.file(), terms[term_idx], text.key);
            text.location = detail::location(top.file(), terms[term_idx]);
            entry.terms.push_back(std::move(text));
        }
    }
    if (entry.form == ModelForm::penalty_ratio) {
        entry.base = expression_at(fields, "base");
        entry.variant = expression_at(fields, "variant");
    }
    if (entry.form == ModelForm::saturation) {
        entry.count = expression_at(fields, "count");
        entry.rate = expression_at(fields, "rate");
        entry.knee = fields.number_or("knee", entry.knee);
        if (!(entry.knee > 0 && entry.knee < 1)) fields.fail_at("knee", "expected a number in (0, 1)");
    }
    if (entry.form == ModelForm::threshold) {
        entry.value = expression_at(fields, "value");
        entry.pass = statuses(fields, "pass", entry.pass);
        entry.fail = statuses(fields, "fail", entry.fail);
        entry.finding_if_fail = fields.string_or("finding_if_fail", "");
        entry.finding_if_no_fail = fields.string_or("finding_if_no_fail", "");
    }
    YAML::Node params = fields.required("params", "a list of parameters");
    if (!params.IsSequence() || params.size() == 0) fields.fail_at("params", "expected a non-empty list of parameters");
    if (entry.form == ModelForm::saturation && params.size() != 1) fields.fail_at("params", "a saturation entry fits one parameter");
    for (std::size_t param_idx = 0; param_idx < params.size(); ++param_idx) {
        entry.params.push_back(parse_param(fields, params[param_idx], fmt::format("{}.params[{}]", path, param_idx),
                                           entry.form, entry.terms.size()));
    }
    return entry;
}

}  // namespace

std::vector<std::string> declared_param_names(const std::vector<ModelEntrySpec>& entries) {
    std::vector<std::string> names;
    for (const auto& entry : entries) {
        for (const auto& param : entry.params) names.push_back(param.name);
    }
    return names;
}

std::vector<ModelEntrySpec> parse_model_section(const Fields& fields) {
    std::vector<ModelEntrySpec> entries;
    if (!fields.has("model")) return entries;
    YAML::Node model = fields.required("model", "a list of model entries");
    if (!model.IsSequence()) fields.fail_at("model", fmt::format("expected a list of model entries, got {}", detail::describe(model)));
    std::set<std::string> names;
    for (std::size_t entry_idx = 0; entry_idx < model.size(); ++entry_idx) {
        const std::string path = fmt::format("model[{}]", entry_idx);
        ModelEntrySpec entry = parse_entry(fields, model[entry_idx], path);
        for (std::size_t param_idx = 0; param_idx < entry.params.size(); ++param_idx) {
            if (!names.insert(entry.params[param_idx].name).second) {
                detail::fail(fields.file(), model[entry_idx]["params"][param_idx]["name"],
                             fmt::format("{}.params[{}].name", path, param_idx),
                             fmt::format("parameter '{}' is declared twice", entry.params[param_idx].name));
            }
        }
        entries.push_back(std::move(entry));
    }
    return entries;
}

}  // namespace npuopt::config
