#include "core/error.hpp"

namespace npuopt {

std::string_view error_kind_name(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::invalid_input: return "invalid_input";
        case ErrorKind::invalid_config: return "invalid_config";
        case ErrorKind::io: return "io";
        case ErrorKind::toolchain: return "toolchain";
        case ErrorKind::store: return "store";
        case ErrorKind::internal: return "internal";
        case ErrorKind::interrupted: return "interrupted";
    }
    return "internal";
}

}  // namespace npuopt
