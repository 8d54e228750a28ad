#pragma once
// `npuopt export` and `npuopt import` (records_cli.cpp): subcommands that declare their own
// flags, so that app.cpp registers each with one call and dispatches it without knowing them.

#include "cli/registry.hpp"

namespace npuopt::cli {

/// `npuopt export CAMPAIGN --out FILE [--kernel K] [--force]`: the campaign's records as JSON Lines.
RegisteredCommand register_export_command(CLI::App& app);
/// `npuopt import FILE --campaign C [--queue passed|all|none] [--dry-run]`: records into a campaign.
RegisteredCommand register_import_command(CLI::App& app);

}  // namespace npuopt::cli
