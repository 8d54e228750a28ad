#include <doctest/doctest.h>

#include "core/error.hpp"

TEST_CASE("error kinds have stable printable names") {
    CHECK(npuopt::error_kind_name(npuopt::ErrorKind::invalid_config) == "invalid_config");
    npuopt::Error error(npuopt::ErrorKind::store, "database locked");
    CHECK(error.kind() == npuopt::ErrorKind::store);
    CHECK(std::string(error.what()) == "database locked");
}
