#include "campaign/campaign_init.hpp"

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/campaign_config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "store/campaign_store.hpp"

namespace npuopt::campaign {

void init_campaign_dir(const std::filesystem::path& dir, const config::TargetConfig& target,
                       const std::vector<std::string>& kernel_names, std::uint64_t seed) {
    const auto campaign_file = dir / config::k_campaign_file_name;
    {
        std::ofstream stream(campaign_file);
        stream << config::campaign_yaml_template(target.name, kernel_names, seed);
        stream.flush();
        if (!stream) throw Error(ErrorKind::io, fmt::format("cannot write {}", campaign_file.string()));
    }
    const config::CampaignConfig campaign = config::load_campaign_config(campaign_file);
    auto store = store::CampaignStore::open(dir / config::k_campaign_db_name);
    const nlohmann::json payload = {{"target", target.name}, {"kernels", kernel_names}, {"seed", campaign.seed},
                                    {"npuopt_version", NPUOPT_VERSION}};
    store::Transaction transaction(store.database());
    store.set_meta("target", target.name);
    store.set_meta("created_at", log::utc_timestamp());
    store.set_meta("npuopt_version", NPUOPT_VERSION);
    store.set_meta("seed", std::to_string(campaign.seed));
    store.record_event("campaign_created", payload.dump());
    transaction.commit();
}

}  // namespace npuopt::campaign
