#include "numerics/expression.hpp"

#include <cmath>
#include <algorithm>
#include <deque>

#include <fmt/format.h>
#include <muParser.h>

#include "core/error.hpp"

namespace npuopt::numerics {
namespace {

double fn_ceil(double value) { return std::ceil(value); }
double fn_floor(double value) { return std::floor(value); }

std::string describe(const ExpressionSource& source) {
    std::string where = source.location.empty() ? std::string() : source.location + ": ";
    if (!source.key.empty()) where += fmt::format("key '{}': ", source.key);
    return where;
}

}  // namespace

struct Expression::Impl {
    ExpressionSource source;
    mu::Parser parser;
    std::deque<double> storage;  // stable addresses: muparser binds to them
    std::vector<std::pair<std::string, double*>> slots;
    std::vector<std::string> names;

    static double* create_variable(const char* name, void* user) {
        auto* impl = static_cast<Impl*>(user);
        impl->storage.push_back(0.0);
        impl->slots.emplace_back(name, &impl->storage.back());
        return &impl->storage.back();
    }

    explicit Impl(ExpressionSource expression_source) : source(std::move(expression_source)) {
        try {
            parser.DefineNameChars("0123456789_.abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
            parser.DefineFun("ceil", fn_ceil);
            parser.DefineFun("floor", fn_floor);
            parser.SetVarFactory(create_variable, this);
            parser.SetExpr(source.text);
            parser.GetUsedVar();
        } catch (const mu::Parser::exception_type& error) {
            throw Error(ErrorKind::invalid_config,
                        fmt::format("{}invalid expression \"{}\": {}", describe(source), source.text, error.GetMsg()));
        }
        for (const auto& [name, slot] : slots) names.push_back(name);
        std::sort(names.begin(), names.end());
    }
};

Expression::Expression(ExpressionSource source) : m_impl(std::make_unique<Impl>(std::move(source))) {}
Expression::Expression(const Expression& other) : m_impl(std::make_unique<Impl>(other.m_impl->source)) {}
Expression& Expression::operator=(const Expression& other) {
    if (this != &other) m_impl = std::make_unique<Impl>(other.m_impl->source);
    return *this;
}
Expression::Expression(Expression&&) noexcept = default;
Expression& Expression::operator=(Expression&&) noexcept = default;
Expression::~Expression() = default;

const std::vector<std::string>& Expression::variables() const { return m_impl->names; }
const ExpressionSource& Expression::source() const { return m_impl->source; }

double Expression::evaluate(const std::function<std::optional<double>(const std::string&)>& lookup) const {
    for (auto& [name, slot] : m_impl->slots) {
        auto value = lookup(name);
        if (!value) {
            throw Error(ErrorKind::invalid_config,
                        fmt::format("{}expression \"{}\": '{}' is not defined here", describe(m_impl->source),
                                    m_impl->source.text, name));
        }
        *slot = *value;
    }
    try {
        return m_impl->parser.Eval();
    } catch (const mu::Parser::exception_type& error) {
        throw Error(ErrorKind::invalid_config, fmt::format("{}cannot evaluate \"{}\": {}", describe(m_impl->source),
                                                           m_impl->source.text, error.GetMsg()));
    }
}

double Expression::evaluate(const std::map<std::string, double>& values) const {
    return evaluate([&](const std::string& name) -> std::optional<double> {
        auto found = values.find(name);
        if (found == values.end()) return std::nullopt;
        return found->second;
    });
}

}  // namespace npuopt::numerics
