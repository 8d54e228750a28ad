#include "search/design.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <muParser.h>

#include "core/error.hpp"
#include "core/hash.hpp"
#include "target/toolchain.hpp"

namespace npuopt::search {

namespace {

double fn_ceil(double value) { return std::ceil(value); }
double fn_floor(double value) { return std::floor(value); }
double fn_fmod(double lhs, double rhs) { return std::fmod(lhs, rhs); }

std::string read_text(const std::filesystem::path& file, const std::string& what) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(ErrorKind::invalid_config, fmt::format("{}: cannot read {}", file.string(), what));
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

/// One compiled expression bound to the template's variable storage.
struct Compiled {
    config::TemplateExpression expression;
    std::unique_ptr<mu::Parser> parser;
};

}  // namespace

std::string format_param_value(double value) {
    if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 9.0e15) {
        return fmt::format("{}", static_cast<long long>(value));
    }
    return fmt::format("{}", value);
}

std::string design_hash(const std::string& target, const std::string& kernel, const std::string& shape_text,
                        const std::string& source) {
    Sha256 hasher;
    for (const std::string* part : {&target, &kernel, &shape_text}) {
        hasher.update(*part);
        hasher.update(std::string_view("\n", 1));
    }
    hasher.update(source);
    auto digest = hasher.finish();
    std::string hex;
    hex.reserve(64);
    for (std::uint8_t byte : digest) hex += fmt::format("{:02x}", byte);
    return hex;
}

Design design_from_source(const std::string& target, const std::string& kernel, const std::string& shape_text,
                          std::string source, const std::string& origin, const std::string& source_extension) {
    Design design;
    design.target = target;
    design.kernel = kernel;
    design.template_name = origin;
    design.family = origin;
    design.shape_text = shape_text;
    design.source = std::move(source);
    design.content_hash = design_hash(target, kernel, shape_text, design.source);
    design.source_extension = source_extension;
    design.from_source = true;
    return design;
}

std::string Design::label() const {
    if (from_source) return fmt::format("{}@{}", template_name, content_hash.substr(0, 8));
    if (params.empty()) return template_name;
    std::string text = template_name + "{";
    bool first = true;
    for (const auto& [name, value] : params) {
        text += fmt::format("{}{}={}", first ? "" : ",", name, format_param_value(value));
        first = false;
    }
    return text + "}";
}

std::map<std::string, double> Design::quantities_and_features() const {
    std::map<std::string, double> merged = quantities;
    for (const auto& [name, value] : features) merged.emplace(name, value);
    return merged;
}

nlohmann::json Design::params_json() const {
    nlohmann::json json = nlohmann::json::object();
    for (const auto& [name, value] : params) {
        if (value == std::floor(value) && std::fabs(value) < 9.0e15) {
            json[name] = static_cast<std::int64_t>(value);
        } else {
            json[name] = value;
        }
    }
    return json;
}

namespace {
double offset_of(const std::map<std::string, double>* offsets, const std::string& name) {
    if (offsets == nullptr) return 0.0;
    auto found = offsets->find(name);
    return found == offsets->end() ? 0.0 : found->second;
}
}  // namespace

struct Template::Impl {
    config::TemplateSpec spec;
    std::string target;
    std::string kernel;
    std::string shape_text;
    std::string source_text;
    bool baseline = false;
    SourceRewriter rewriter;
    std::map<std::string, double> variables;  // node addresses are stable: muparser binds to them
    std::vector<Compiled> constraints;
    std::vector<Compiled> quantities;
    std::vector<Compiled> features;
    std::map<std::string, double> quantity_offsets;  // learnt: what each declared quantity falls short by

    Compiled compile(const config::TemplateExpression& expression, const std::string& key) {
        Compiled compiled{expression, std::make_unique<mu::Parser>()};
        mu::Parser& parser = *compiled.parser;
        try {
            parser.DefineFun("ceil", fn_ceil);
            parser.DefineFun("floor", fn_floor);
            parser.DefineFun("fmod", fn_fmod);
            parser.DefineOprt("%", fn_fmod, mu::prMUL_DIV, mu::oaLEFT);
            for (auto& [name, storage] : variables) parser.DefineVar(name, &storage);
            parser.SetExpr(expression.text);
            parser.Eval();
        } catch (const mu::Parser::exception_type& error) {
            std::string token = error.GetToken();
            std::string hint;
            if (error.GetCode() == mu::ecUNASSIGNABLE_TOKEN && !token.empty()) {
                hint = fmt::format(" ('{}' is neither a param, a quantity (constraints only) nor a shape variable of kernel {})", token, kernel);
            }
            throw Error(ErrorKind::invalid_config,
                        fmt::format("{}: key '{}': invalid expression \"{}\": {}{}", expression.location, key,
                                    expression.text, error.GetMsg(), hint));
        }
        return compiled;
    }

    void bind(const Assignment& assignment) {
        for (const auto& [name, value] : assignment) {
            auto found = variables.find(name);
            if (found != variables.end()) found->second = value;
        }
    }

    std::map<std::string, double> evaluate(std::vector<Compiled>& compiled, const Assignment& assignment,
                                           const std::map<std::string, double>* offsets = nullptr) {
        bind(assignment);
        std::map<std::string, double> result;
        for (auto& item : compiled) {
            try {
                result[item.expression.name] = item.parser->Eval() + offset_of(offsets, item.expression.name);
            } catch (const mu::Parser::exception_type& error) {
                throw Error(ErrorKind::invalid_config, fmt::format("{}: key '{}': cannot evaluate \"{}\": {}",
                                                                   item.expression.location, item.expression.name,
                                                                   item.expression.text, error.GetMsg()));
            }
        }
        return result;
    }
};

Template::Template(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Template::~Template() = default;

std::shared_ptr<Template> Template::load(const config::TemplateSpec& spec, const config::KernelSpec& kernel,
                                         const std::string& target) {
    auto impl = std::make_unique<Impl>();
    impl->spec = spec;
    impl->target = target;
    impl->kernel = kernel.name;
    impl->shape_text = target::format_shape(kernel.shape);
    impl->source_text = read_text(spec.source, "template source");
    for (const auto& [name, value] : kernel.shape) impl->variables[name] = static_cast<double>(value);
    for (const auto& param : spec.params) {
        if (impl->variables.count(param.name)) {
            throw Error(ErrorKind::invalid_config,
                        fmt::format("{}: key 'params.{}': the name is also a shape variable of kernel {}",
                                    param.location, param.name, kernel.name));
        }
        impl->variables[param.name] = param.default_value;
    }
    // Every ${NAME} of the source must be a declared param.
    static const std::regex k_placeholder(R"(\$\{([A-Za-z_][A-Za-z0-9_]*)\})");
    std::set<std::string> declared;
    for (const auto& param : spec.params) declared.insert(param.name);
    for (auto it = std::sregex_iterator(impl->source_text.begin(), impl->source_text.end(), k_placeholder);
         it != std::sregex_iterator(); ++it) {
        std::string name = (*it)[1].str();
        if (!declared.count(name)) {
            throw Error(ErrorKind::invalid_config,
                        fmt::format("{}: key 'params': the source {} uses ${{{}}}, which is not a declared param",
                                    spec.file.string(), spec.source.filename().string(), name));
        }
    }
    // The shared prelude goes after the template's own code (its line numbers stay those of the
    // file); it has no params, so no ${NAME} may appear in it.
    if (!spec.prelude.empty()) {
        const std::string prelude = read_text(spec.prelude, "template prelude");
        std::smatch placeholder;
        if (std::regex_search(prelude, placeholder, k_placeholder)) {
            throw Error(ErrorKind::invalid_config,
                        fmt::format("{}: key 'prelude': the prelude {} uses {}; a prelude is shared by several "
                                    "templates and takes no params",
                                    spec.file.string(), spec.prelude.filename().string(), placeholder[0].str()));
        }
        impl->source_text += fmt::format("\n// ---- prelude: {} ----\n{}", spec.prelude.filename().string(), prelude);
    }
    for (const auto& expression : spec.quantities) {
        impl->quantities.push_back(impl->compile(expression, "quantities." + expression.name));
    }
    // Constraints may name the quantities (e.g. "dm_bytes <= 524288"): check_constraints evaluates
    // them first into variables of their own.
    for (const auto& expression : spec.quantities) {
        if (impl->variables.count(expression.name)) {
            throw Error(ErrorKind::invalid_config,
                        fmt::format("{}: key 'quantities.{}': the name is also a param or shape variable",
                                    expression.location, expression.name));
        }
        impl->variables[expression.name] = 0.0;
    }
    for (const auto& expression : spec.constraints) impl->constraints.push_back(impl->compile(expression, expression.name));
    for (const auto& expression : spec.features) {
        impl->features.push_back(impl->compile(expression, "features." + expression.name));
    }
    return std::shared_ptr<Template>(new Template(std::move(impl)));
}

std::shared_ptr<Template> Template::baseline(const config::KernelSpec& kernel, const std::string& target) {
    auto impl = std::make_unique<Impl>();
    impl->baseline = true;
    impl->target = target;
    impl->kernel = kernel.name;
    impl->shape_text = target::format_shape(kernel.shape);
    impl->spec.name = "baseline";
    impl->spec.family = "baseline";
    impl->spec.kernel = kernel.name;
    impl->spec.source = kernel.baseline;
    impl->spec.file = kernel.baseline;
    impl->spec.description = "the official baseline of kernels.yaml";
    impl->source_text = read_text(kernel.baseline, fmt::format("baseline of kernel {}", kernel.name));
    return std::shared_ptr<Template>(new Template(std::move(impl)));
}

const std::string& Template::name() const { return m_impl->spec.name; }
const std::string& Template::family() const { return m_impl->spec.family; }
const std::string& Template::kernel() const { return m_impl->kernel; }
const config::TemplateSpec& Template::spec() const { return m_impl->spec; }
bool Template::is_baseline() const { return m_impl->baseline; }
const std::vector<config::TemplateParam>& Template::params() const { return m_impl->spec.params; }

Assignment Template::default_assignment() const {
    Assignment assignment;
    for (const auto& param : m_impl->spec.params) assignment[param.name] = param.default_value;
    return assignment;
}

std::optional<std::string> Template::check_domain(const Assignment& assignment) const {
    for (const auto& [param_name, value] : assignment) {
        auto param = std::find_if(params().begin(), params().end(),
                                  [&](const auto& candidate) { return candidate.name == param_name; });
        if (param == params().end()) return fmt::format("template {} has no param {}", name(), param_name);
        if (std::find(param->values.begin(), param->values.end(), value) == param->values.end()) {
            return fmt::format("{}={} is not in the domain of template {}", param_name, format_param_value(value),
                               name());
        }
    }
    for (const auto& param : params()) {
        if (!assignment.count(param.name)) return fmt::format("param {} of template {} has no value", param.name, name());
    }
    return std::nullopt;
}

std::optional<std::string> Template::check_constraints(const Assignment& assignment) const {
    m_impl->bind(assignment);
    if (!m_impl->constraints.empty()) {
        for (auto& quantity : m_impl->quantities) {
            double value = 0.0;
            try {
                value = quantity.parser->Eval();
            } catch (const mu::Parser::exception_type& error) {
                return fmt::format("quantities.{}: {} (cannot evaluate: {})", quantity.expression.name,
                                   quantity.expression.text, error.GetMsg());
            }
            m_impl->variables[quantity.expression.name] = value + offset_of(&m_impl->quantity_offsets, quantity.expression.name);
        }
    }
    for (auto& constraint : m_impl->constraints) {
        double value = 0.0;
        try {
            value = constraint.parser->Eval();
        } catch (const mu::Parser::exception_type& error) {
            return fmt::format("{}: {} (cannot evaluate: {})", constraint.expression.name, constraint.expression.text,
                               error.GetMsg());
        }
        if (value == 0.0 || !std::isfinite(value)) {
            return fmt::format("{}: {}", constraint.expression.name, constraint.expression.text);
        }
    }
    return std::nullopt;
}

std::map<std::string, double> Template::evaluate_quantities(const Assignment& assignment) const {
    return m_impl->evaluate(m_impl->quantities, assignment, &m_impl->quantity_offsets);
}

void Template::set_quantity_offsets(std::map<std::string, double> offsets) {
    std::erase_if(offsets, [this](const auto& entry) {
        const auto& quantities = m_impl->quantities;
        return std::none_of(quantities.begin(), quantities.end(),
                            [&](const Compiled& item) { return item.expression.name == entry.first; });
    });
    m_impl->quantity_offsets = std::move(offsets);
}

const std::map<std::string, double>& Template::quantity_offsets() const { return m_impl->quantity_offsets; }

std::map<std::string, double> Template::evaluate_features(const Assignment& assignment) const {
    return m_impl->evaluate(m_impl->features, assignment);
}

void Template::set_source_rewriter(SourceRewriter rewriter) { m_impl->rewriter = std::move(rewriter); }

Design Template::instantiate(const Assignment& assignment, bool rewrite) const {
    if (auto problem = check_domain(assignment)) throw Error(ErrorKind::invalid_input, *problem);
    Design design;
    design.target = m_impl->target;
    design.kernel = m_impl->kernel;
    design.template_name = name();
    design.family = family();
    design.params = assignment;
    design.shape_text = m_impl->shape_text;
    design.is_baseline = m_impl->baseline;
    if (m_impl->spec.source.has_extension()) design.source_extension = m_impl->spec.source.extension().string();
    std::string source = m_impl->source_text;
    for (const auto& [param_name, value] : assignment) {
        std::string placeholder = "${" + param_name + "}";
        std::string text = format_param_value(value);
        for (std::size_t pos = source.find(placeholder); pos != std::string::npos;
             pos = source.find(placeholder, pos + text.size())) {
            source.replace(pos, placeholder.size(), text);
        }
    }
    if (rewrite && m_impl->rewriter) source = m_impl->rewriter(source);
    design.source = std::move(source);
    design.quantities = evaluate_quantities(assignment);
    design.features = evaluate_features(assignment);
    design.content_hash = design_hash(design.target, design.kernel, design.shape_text, design.source);
    return design;
}

double Template::domain_size() const {
    double size = 1.0;
    for (const auto& param : params()) size = std::min(1e18, size * static_cast<double>(param.values.size()));
    return size;
}

std::vector<std::shared_ptr<Template>> load_kernel_templates(const std::vector<config::TemplateSpec>& specs,
                                                             const config::KernelSpec& kernel,
                                                             const std::string& target,
                                                             std::vector<std::string>& errors) {
    std::vector<std::shared_ptr<Template>> result;
    try {
        result.push_back(Template::baseline(kernel, target));
    } catch (const Error& error) {
        errors.push_back(error.what());
    }
    for (const auto& spec : specs) {
        if (spec.kernel != kernel.name) continue;
        try {
            result.push_back(Template::load(spec, kernel, target));
        } catch (const Error& error) {
            errors.push_back(error.what());
        }
    }
    return result;
}

}  // namespace npuopt::search
