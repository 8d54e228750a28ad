// `npuopt init DIR --target NAME`

#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "config/campaign_config.hpp"
#include "config/target_loader.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "store/campaign_store.hpp"

namespace npuopt::cli {
namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& file, const std::string& text) {
    fs::path temporary = file;
    temporary += ".tmp";
    {
        std::ofstream stream(temporary);
        stream << text;
        stream.flush();
        if (!stream) throw Error(ErrorKind::io, fmt::format("cannot write {}", temporary.string()));
    }
    fs::rename(temporary, file);
}

}  // namespace

int run_init(const GlobalOptions& global, const InitOptions& options) {
    // Validate everything before touching the file system: bad input changes nothing.
    fs::path knowledge_dir = config::locate_knowledge_dir(global.knowledge_dir);
    config::TargetConfig target = config::load_target(knowledge_dir, options.target);
    config::KernelsConfig kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);
    std::vector<std::string> kernel_names;
    for (const auto& kernel : kernels.kernels) kernel_names.push_back(kernel.name);
    const std::vector<std::string> shape_names = config::shape_names(kernels);
    if (!options.shape.empty()) {
        config::KernelsConfig shaped = kernels;
        config::select_shape(shaped, options.shape, {}, "--shape");
    }

    fs::path dir = fs::absolute(options.dir).lexically_normal();
    std::error_code error_code;
    bool existed = fs::exists(dir, error_code);
    if (existed) {
        if (!fs::is_directory(dir, error_code)) {
            throw Error(ErrorKind::invalid_input, fmt::format("{} exists and is not a directory", dir.string()));
        }
        if (fs::exists(dir / config::k_campaign_file_name) || fs::exists(dir / config::k_campaign_db_name)) {
            throw Error(ErrorKind::invalid_input,
                        fmt::format("{} already holds a campaign (refusing to overwrite it; choose another "
                                    "directory, or inspect it with `npuopt status {}`)",
                                    dir.string(), dir.string()));
        }
        if (!fs::is_empty(dir, error_code)) {
            throw Error(ErrorKind::invalid_input,
                        fmt::format("{} exists and is not empty (expected a new or empty directory)", dir.string()));
        }
    }

    try {
        fs::create_directories(dir);
        fs::path campaign_file = dir / config::k_campaign_file_name;
        write_file(campaign_file, config::campaign_yaml_template(target.name, kernel_names, options.seed, options.shape,
                                                                  shape_names));
        config::CampaignConfig campaign = config::load_campaign_config(campaign_file);  // what we wrote must parse

        auto store = store::CampaignStore::open(dir / config::k_campaign_db_name);
        std::string created_at = log::utc_timestamp();
        nlohmann::json payload = {{"target", target.name}, {"kernels", kernel_names}, {"shape", campaign.shape},
                                  {"seed", campaign.seed}, {"npuopt_version", NPUOPT_VERSION}};
        {
            store::Transaction transaction(store.database());
            store.set_meta("target", target.name);
            store.set_meta("created_at", created_at);
            store.set_meta("npuopt_version", NPUOPT_VERSION);
            store.set_meta("seed", std::to_string(campaign.seed));
            if (!campaign.shape.empty()) store.set_meta("shape", campaign.shape);
            store.record_event("campaign_created", payload.dump());
            transaction.commit();
        }
        log::EventLog events(dir / log::k_event_log_name);
        events.write("campaign_created", payload);

        if (global.json) {
            nlohmann::json out = {{"dir", dir.string()},
                                  {"target", target.name},
                                  {"kernels", kernel_names},
                                  {"shape", campaign.shape.empty() ? std::string("(each kernel's default)") : campaign.shape},
                                  {"campaign_yaml", campaign_file.string()},
                                  {"database", (dir / config::k_campaign_db_name).string()},
                                  {"schema_version", store.database().schema_version()}};
            std::cout << out.dump(2) << '\n';
        } else {
            std::cout << fmt::format("Created campaign {} for target {} ({} kernels: {}; shape {}).\n", dir.string(),
                                     target.name, kernel_names.size(), fmt::join(kernel_names, ", "),
                                     campaign.shape.empty() ? std::string("(each kernel's default)") : campaign.shape)
                      << fmt::format("  {}  settings (commented; edit budgets, kernels, sandbox, llm)\n",
                                     campaign_file.string())
                      << fmt::format("  {}  the campaign database\n", (dir / config::k_campaign_db_name).string())
                      << fmt::format("Next: npuopt doctor --campaign {}\n", dir.string());
        }
    } catch (...) {
        std::error_code ignored;
        if (existed) {
            for (const auto& entry : fs::directory_iterator(dir, ignored)) fs::remove_all(entry.path(), ignored);
        } else {
            fs::remove_all(dir, ignored);
        }
        throw;
    }
    return k_exit_ok;
}

}  // namespace npuopt::cli
