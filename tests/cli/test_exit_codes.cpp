#include <doctest/doctest.h>

#include "cli/app.hpp"
#include "cli/commands.hpp"

using namespace npuopt;

TEST_CASE("every error kind maps to its documented exit code") {
    CHECK(cli::exit_code_for(ErrorKind::invalid_input) == 2);
    CHECK(cli::exit_code_for(ErrorKind::invalid_config) == 2);
    CHECK(cli::exit_code_for(ErrorKind::io) == 1);
    CHECK(cli::exit_code_for(ErrorKind::toolchain) == 1);
    CHECK(cli::exit_code_for(ErrorKind::store) == 1);
    CHECK(cli::exit_code_for(ErrorKind::internal) == 1);
    CHECK(cli::exit_code_for(ErrorKind::interrupted) == 3);
    CHECK(cli::k_exit_interrupted == 3);
}
