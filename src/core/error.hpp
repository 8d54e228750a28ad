#pragma once
// The one exception type that ends a command. Expected failures (a compile
// error, a timeout, a wrong result) are data, never this.

#include <stdexcept>
#include <string>
#include <string_view>

namespace npuopt {

/// What kind of condition ended the command; maps to an exit code in cli/.
enum class ErrorKind { invalid_input, invalid_config, io, toolchain, store, internal, interrupted };

/// Printable name of an error kind (e.g. "invalid_config").
std::string_view error_kind_name(ErrorKind kind);

/// A condition that ends the current command; the message names the thing and what was expected.
class Error : public std::runtime_error {
public:
    Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), m_kind(kind) {}
    ErrorKind kind() const { return m_kind; }

private:
    ErrorKind m_kind;
};

}  // namespace npuopt
