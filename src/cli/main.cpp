#include "cli/app.hpp"

int main(int argc, char** argv) { return npuopt::cli::run_main(argc, argv); }
