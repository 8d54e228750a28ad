#pragma once
// A compiled arithmetic expression over named variables (muparser syntax: + - * / ^, ?:,
// comparisons, min, max, ceil, floor, abs, sqrt, ...). Names are letters, digits, `_` and `.`,
// so that data can name a family of variables (`hw.NAME`, `hw.NAME.upper`). muparser stays inside
// expression.cpp. An Expression is not safe to evaluate from two threads at once.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace npuopt::numerics {

/// Where an expression was written, for error messages: `file:line:column` and the key.
struct ExpressionSource {
    std::string text;
    std::string location;  ///< file:line:column (may be empty)
    std::string key;       ///< the key it was read from (may be empty)
};

class Expression {
public:
    /// Compile `source.text`; a syntax error is Error(invalid_config) naming location and key.
    explicit Expression(ExpressionSource source);
    Expression(const Expression& other);
    Expression& operator=(const Expression& other);
    Expression(Expression&&) noexcept;
    Expression& operator=(Expression&&) noexcept;
    ~Expression();

    /// The variable names it reads, sorted.
    const std::vector<std::string>& variables() const;
    const ExpressionSource& source() const;

    /// Evaluate with each variable's value from `lookup`; a variable it has no value for is
    /// Error(invalid_config) naming the expression and the variable.
    double evaluate(const std::function<std::optional<double>(const std::string&)>& lookup) const;
    double evaluate(const std::map<std::string, double>& values) const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

}  // namespace npuopt::numerics
