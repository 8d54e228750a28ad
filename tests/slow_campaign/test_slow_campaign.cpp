// End to end on the real simulator: a short campaign on attention_output through campaign::run_workspace
// (toolchain, sandbox, cascade, driver). Skipped (with a message) when npuc is not built:
//   tools/npu-sim/build.sh build-camp/npu-sim build-camp/cargo
// or point NPUOPT_NPUC at an npuc binary.

#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include "campaign/workspace.hpp"
#include "config/target_loader.hpp"
#include "config/template_config.hpp"
#include "search/design.hpp"
#include "search/tree.hpp"
#include "store/campaign_store.hpp"
#include "store/database.hpp"
#include "store/tree_store.hpp"

using namespace npuopt;

namespace {

std::filesystem::path find_npuc() {
    if (const char* explicit_path = std::getenv("NPUOPT_NPUC")) return explicit_path;
    return std::filesystem::path(NPUOPT_BUILD_DIR) / "npu-sim" / "1.0" / "bin" / "npuc";
}

}  // namespace

TEST_CASE("a short campaign on the simulator improves attention_output and resumes") {
    auto npuc = find_npuc();
    if (!std::filesystem::exists(npuc)) {
        MESSAGE("SKIPPED: npuc not built at " << npuc.string() << " (tools/npu-sim/build.sh or NPUOPT_NPUC)");
        return;
    }
    std::random_device random;
    auto dir = std::filesystem::temp_directory_path() / ("npuopt-slow-campaign-" + std::to_string(random()));
    std::filesystem::create_directories(dir);
    {
        std::ofstream yaml(dir / "campaign.yaml");
        yaml << fmt::format(
            "target: npu-sim\nkernels: [attention_output]\nseed: 11\n"
            "budgets: {{wall_time: 20m, device_runs: 400}}\nsandbox: {{required: false}}\n"
            "toolchain: {{bin: {}}}\n",
            std::filesystem::absolute(npuc).string());
    }
    store::CampaignStore::open(dir / "campaign.db");  // what `npuopt init` creates beside campaign.yaml
    std::vector<campaign::Progress> updates;
    campaign::RunOverrides options;
    options.max_steps = 4;
    options.progress = [&](const campaign::Progress& progress) { updates.push_back(progress); };
    auto first = [&] {
        auto workspace = campaign::open_workspace(dir, std::nullopt);
        return campaign::run_workspace(workspace, options);
    }();
    INFO(first.message);
    CHECK(first.stop == campaign::StopReason::step_limit);
    REQUIRE(first.kernels.size() == 1);
    INFO(first.kernels[0].reason);
    REQUIRE(first.kernels[0].baseline_cycles.has_value());
    REQUIRE(first.kernels[0].champion_cycles.has_value());

    options.max_steps = 3;
    auto second = [&] {
        auto workspace = campaign::open_workspace(dir, std::nullopt);
        return campaign::run_workspace(workspace, options);
    }();
    CHECK(second.steps_this_run == 3);
    auto store = store::CampaignStore::open(dir / "campaign.db");
    auto tree = search::load_tree(store, "attention_output");
    CHECK(tree.nodes.size() == 7);
    std::set<std::string> hashes;
    for (const auto& node : tree.nodes) CHECK(hashes.insert(node.design.content_hash).second);
    MESSAGE(search::render_tree_text(tree, true));
    CHECK(*second.kernels[0].champion_cycles <= *second.kernels[0].baseline_cycles);
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
}

namespace {

/// A campaign directory on the real simulator: attention_output only, unsandboxed (the test
/// machine may lack bubblewrap), `npuc` as the toolchain. Every accept goes through a race (no
/// clear wins at the screen): the test kills the run in the middle of one.
std::filesystem::path make_sim_campaign(const std::filesystem::path& npuc, const std::string& name) {
    std::random_device random;
    auto dir = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(random()));
    std::filesystem::create_directories(dir);
    std::ofstream yaml(dir / "campaign.yaml");
    yaml << fmt::format(
        "target: npu-sim\nkernels: [attention_output]\nseed: 5\n"
        "budgets: {{wall_time: 30m, device_runs: 2000}}\nsandbox: {{required: false}}\n"
        "toolchain: {{bin: {}}}\nacceptance: {{clear_win_ratio: 0}}\n"
        "search: {{schedule_screen: 0}}\n",  // not about the screen: steps without its schedule calls
        std::filesystem::absolute(npuc).string());
    yaml.close();
    store::CampaignStore::open(dir / "campaign.db");
    return dir;
}

/// The first race still in flight (verdict `running`) with at least `min_launches` launches
/// recorded: its evaluation id and those measurement ids; nothing when there is none yet.
std::optional<std::pair<std::int64_t, std::set<std::int64_t>>> race_in_flight(const std::filesystem::path& db_file,
                                                                               std::int64_t min_launches) {
    try {
        store::Database::Options options;
        options.create = false;
        auto database = store::Database::open(db_file, options);
        auto rows = database.query(
            "SELECT e.id, count(m.id) FROM evaluations e JOIN measurements m ON m.evaluation_id = e.id "
            "WHERE e.stage = 'race' AND e.verdict = 'running' GROUP BY e.id HAVING count(m.id) >= ?1 LIMIT 1",
            {min_launches});
        if (rows.empty()) return std::nullopt;
        std::int64_t evaluation = store::as_int(rows[0][0]);
        std::set<std::int64_t> ids;
        for (const auto& row : database.query("SELECT id FROM measurements WHERE evaluation_id = ?1", {evaluation})) {
            ids.insert(store::as_int(row[0]));
        }
        return std::make_pair(evaluation, ids);
    } catch (const std::exception&) {
        return std::nullopt;  // not created yet, or busy: poll again
    }
}

}  // namespace

TEST_CASE("kill -9 in the middle of a race keeps every completed measurement and no half-written step") {
    auto npuc = find_npuc();
    if (!std::filesystem::exists(npuc)) {
        MESSAGE("SKIPPED: npuc not built at " << npuc.string() << " (tools/npu-sim/build.sh or NPUOPT_NPUC)");
        return;
    }
    auto dir = make_sim_campaign(npuc, "npuopt-kill9");
    auto db_file = dir / "campaign.db";

    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        ::setpgid(0, 0);  // its own group: the kill below takes npuc with it, as a crash of the host would
        int code = 0;
        try {
            auto workspace = campaign::open_workspace(dir, std::nullopt);
            campaign::RunOverrides overrides;
            overrides.stop_requested = [] { return false; };
            campaign::run_workspace(workspace, overrides);
        } catch (...) {
            code = 2;
        }
        ::_exit(code);
    }
    ::setpgid(child, child);

    // Wait for a race with at least two completed pairs, then kill the whole group at once.
    std::optional<std::pair<std::int64_t, std::set<std::int64_t>>> seen;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(6);
    int status = 0;
    bool exited = false;
    while (std::chrono::steady_clock::now() < deadline) {
        seen = race_in_flight(db_file, 4);
        if (seen) break;
        if (::waitpid(child, &status, WNOHANG) == child) {
            exited = true;
            break;
        }
        ::usleep(50 * 1000);
    }
    ::kill(-child, SIGKILL);
    if (!exited) ::waitpid(child, &status, 0);
    REQUIRE_MESSAGE(seen.has_value(), "no race was seen in flight (the run ended or took too long)");
    auto [race_evaluation, measured] = *seen;

    std::int64_t race_design = 0;
    {
        auto store = store::CampaignStore::open(db_file);
        CHECK(store.database().integrity_check() == "ok");
        // Every measurement completed before the kill is there...
        std::set<std::int64_t> after;
        for (const auto& row : store.database().query("SELECT id FROM measurements WHERE evaluation_id = ?1",
                                                       {race_evaluation})) {
            after.insert(store::as_int(row[0]));
        }
        for (auto id : measured) CHECK(after.count(id) == 1);
        // ...and the step in flight left no tree edge (its design is evaluated again on resume).
        race_design = store::as_int(
            store.database().query("SELECT design_id FROM evaluations WHERE id = ?1", {race_evaluation}).at(0)[0]);
        auto tree = search::load_tree(store, "attention_output");
        for (const auto& node : tree.nodes) CHECK(node.design.id != race_design);
        auto counters = store::TreeStore(store.database()).state("counters");
        REQUIRE(counters.has_value());
        CHECK(nlohmann::json::parse(*counters).value("step", std::int64_t{-1}) == static_cast<std::int64_t>(tree.nodes.size()));
    }

    // Resume: the interrupted race is marked so, its launches stay, and the campaign goes on.
    campaign::RunOverrides overrides;
    overrides.max_steps = 1;
    overrides.stop_requested = [] { return false; };
    auto workspace = campaign::open_workspace(dir, std::nullopt);
    auto resumed = campaign::run_workspace(workspace, overrides);
    CHECK(resumed.steps_this_run == 1);
    auto rows = workspace.store->database().query(
        "SELECT verdict, (SELECT count(*) FROM measurements WHERE evaluation_id = ?1) FROM evaluations WHERE id = ?1",
        {race_evaluation});
    REQUIRE(rows.size() == 1);
    CHECK(store::as_text(rows[0][0]) == "interrupted");
    CHECK(store::as_int(rows[0][1]) >= static_cast<std::int64_t>(measured.size()));
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
}

namespace {

std::string read_all(const std::filesystem::path& file) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

void replace_once(std::string& text, const std::string& from, const std::string& to) {
    auto at = text.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, from);
    text.replace(at, from.size(), to);
}

/// The stdout of a command (popen), its exit status in `status`.
std::string command_output(const std::string& command, int* status) {
    std::string output;
    FILE* pipe = ::popen(command.c_str(), "r");
    REQUIRE(pipe != nullptr);
    char buffer[4096];
    while (std::size_t got = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, got);
    *status = ::pclose(pipe);
    return output;
}

}  // namespace

TEST_CASE("at a shape where the baseline fails the campaign still searches and its first correct design is the reference") {
    auto npuc = find_npuc();
    if (!std::filesystem::exists(npuc)) {
        MESSAGE("SKIPPED: npuc not built at " << npuc.string() << " (tools/npu-sim/build.sh or NPUOPT_NPUC)");
        return;
    }
    std::random_device random;
    const auto root = std::filesystem::temp_directory_path() / ("npuopt-slow-shape-" + std::to_string(random()));
    // A copy of the npu-sim target whose project_qkv baseline is the old fixed-rows one: at
    // llama3.1-8b (hidden 4096) its 128-row weight tile fills DM (E0201).
    const auto source = std::filesystem::path(NPUOPT_SOURCE_DIR);
    const auto target_dir = root / "knowledge" / "npu-sim";
    std::filesystem::create_directories(target_dir);
    std::string target_yaml = read_all(source / "knowledge/npu-sim/target.yaml");
    replace_once(target_yaml, "docs: docs", "docs: " + (source / "knowledge/npu-sim/docs").string());
    replace_once(target_yaml, "microbench: ../../microbench/npu-sim", "microbench: " + (source / "microbench/npu-sim").string());
    replace_once(target_yaml, "templates: ../../dsl_templates/npu-sim", "templates: " + (source / "dsl_templates/npu-sim").string());
    std::ofstream(target_dir / "target.yaml") << target_yaml;
    std::filesystem::copy_file(source / "knowledge/npu-sim/cost_model.yaml", target_dir / "cost_model.yaml");
    std::string kernels_yaml = read_all(source / "knowledge/npu-sim/kernels.yaml");
    replace_once(kernels_yaml, "baseline: baseline_project_qkv.rs",
                 "baseline: " + (std::filesystem::path(NPUOPT_TEST_DATA_DIR) / "baseline_project_qkv_fixed_rows.rs").string());
    std::ofstream(target_dir / "kernels.yaml") << kernels_yaml;

    const auto dir = root / "campaign";
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "campaign.yaml") << fmt::format(
        "target: npu-sim\nkernels: [project_qkv]\nshape: llama3.1-8b\nseed: 5\n"
        "budgets: {{wall_time: 20m, device_runs: 60}}\nsandbox: {{required: false}}\ntoolchain: {{bin: {}}}\n"
        "search: {{schedule_screen: 0}}\n",  // not about the screen: steps without its schedule calls
        std::filesystem::absolute(npuc).string());
    store::CampaignStore::open(dir / "campaign.db");
    campaign::RunOverrides options;
    options.max_steps = 6;
    auto result = [&] {
        auto workspace = campaign::open_workspace(dir, root / "knowledge");
        REQUIRE(workspace.kernels.kernels.size() == 3);
        for (const auto& kernel : workspace.kernels.kernels) {
            if (kernel.name == "project_qkv") CHECK(kernel.shape.at("hidden") == 4096);
        }
        return campaign::run_workspace(workspace, options);
    }();
    INFO(result.message);
    REQUIRE(result.kernels.size() == 1);
    const auto& kernel = result.kernels[0];
    INFO(kernel.reason);
    CHECK(kernel.status != "failed");
    CHECK(kernel.shape == "llama3.1-8b");
    REQUIRE(kernel.champion_cycles.has_value());
    REQUIRE(kernel.baseline_cycles.has_value());
    CHECK(kernel.reference.find("first correct design (baseline failed:") == 0);
    CHECK(kernel.reference.find("E0201") != std::string::npos);

    auto store = store::CampaignStore::open(dir / "campaign.db");
    auto status = campaign::campaign_status(store);
    REQUIRE(status.kernels.size() == 1);
    CHECK(status.kernels[0].shape == "llama3.1-8b");
    CHECK(campaign::render_status_text(status).find("reference: first correct design") != std::string::npos);
    auto tree = search::load_tree(store, "project_qkv");
    bool baseline_failed = false;
    for (const auto& node : tree.nodes) {
        if (node.edge.role == "baseline") baseline_failed = node.edge.verdict != "accepted";
    }
    CHECK(baseline_failed);
    std::filesystem::remove_all(root);
}

TEST_CASE("template points within their constraints pass the capacity checks at every named shape") {
    auto npuc = find_npuc();
    if (!std::filesystem::exists(npuc)) {
        MESSAGE("SKIPPED: npuc not built at " << npuc.string() << " (tools/npu-sim/build.sh or NPUOPT_NPUC)");
        return;
    }
    const auto target = config::load_target_config(std::filesystem::path(NPUOPT_SOURCE_DIR) / "knowledge/npu-sim/target.yaml");
    const auto kernels = config::load_kernels_config(target.kernels_file, target.templates_dir);
    const auto specs = config::load_template_dir(target.templates_dir);
    std::random_device random;
    const auto scratch = std::filesystem::temp_directory_path() / ("npuopt-slow-shapes-" + std::to_string(random()));
    std::filesystem::create_directories(scratch);
    std::mt19937_64 pick(21);
    int checked = 0;
    for (const auto& shape : config::shape_names(kernels)) {
        auto shaped = kernels;
        config::select_shape(shaped, shape, {}, "test");
        for (const auto& kernel : shaped.kernels) {
            std::vector<std::string> errors;
            for (const auto& tmpl : search::load_kernel_templates(specs, kernel, "npu-sim", errors)) {
                if (tmpl->is_baseline()) continue;
                // the defaults (when feasible) and a few random feasible points
                std::vector<search::Assignment> points;
                if (!tmpl->check_constraints(tmpl->default_assignment())) points.push_back(tmpl->default_assignment());
                for (int attempt = 0; attempt < 400 && points.size() < 3; ++attempt) {
                    search::Assignment assignment;
                    for (const auto& param : tmpl->params()) assignment[param.name] = param.values[pick() % param.values.size()];
                    if (!tmpl->check_constraints(assignment)) points.push_back(assignment);
                }
                INFO(kernel.name << " " << tmpl->name() << " at " << shape);
                CHECK_FALSE(points.empty());  // every family has feasible points at every named shape
                for (const auto& assignment : points) {
                    const auto design = tmpl->instantiate(assignment);
                    const auto file = scratch / (design.content_hash.substr(0, 16) + ".rs");
                    std::ofstream(file) << design.source;
                    std::string shape_arg;
                    for (const auto& [name, value] : kernel.shape) {
                        shape_arg += fmt::format("{}{}={}", shape_arg.empty() ? "" : ",", name, value);
                    }
                    int status = 0;
                    const std::string output = command_output(
                        fmt::format("'{}' check '{}' --kernel {} --shape {} 2>&1", npuc.string(), file.string(),
                                    kernel.name, shape_arg),
                        &status);
                    INFO(design.label() << "\n" << output);
                    CHECK(output.find("E0201") == std::string::npos);
                    CHECK(output.find("E0202") == std::string::npos);
                    CHECK(output.find("E0203") == std::string::npos);
                    ++checked;
                }
            }
        }
    }
    CHECK(checked >= 18);
    std::filesystem::remove_all(scratch);
}

TEST_CASE("a campaign switched from npuc 1.0 to 1.1 mid-run keeps every measurement and ports its champion") {
    const auto root = std::filesystem::path(NPUOPT_BUILD_DIR) / "npu-sim";
    const auto npuc_10 = root / "1.0" / "bin" / "npuc";
    const auto npuc_11 = root / "1.1" / "bin" / "npuc";
    if (!std::filesystem::exists(npuc_10) || !std::filesystem::exists(npuc_11)) {
        MESSAGE("SKIPPED: npuc 1.0 and 1.1 not built under " << root.string());
        return;
    }
    std::random_device random;
    auto dir = std::filesystem::temp_directory_path() / ("npuopt-slow-switch-" + std::to_string(random()));
    std::filesystem::create_directories(dir);
    auto write_yaml = [&](const std::filesystem::path& npuc) {
        std::ofstream yaml(dir / "campaign.yaml", std::ios::trunc);
        yaml << fmt::format("target: npu-sim\nkernels: [attention_output]\nseed: 5\n"
                            "budgets: {{wall_time: 20m, device_runs: 400}}\nsandbox: {{required: false}}\n"
                            "toolchain: {{bin: {}}}\nsearch: {{schedule_screen: 0}}\n",  // not about the screen
                            npuc.string());
    };
    write_yaml(npuc_10);
    store::CampaignStore::open(dir / "campaign.db");
    campaign::RunOverrides options;
    options.max_steps = 4;
    options.stop_requested = [] { return false; };
    auto first = [&] {
        auto workspace = campaign::open_workspace(dir, std::nullopt);
        return campaign::run_workspace(workspace, options);
    }();
    REQUIRE(first.kernels.size() == 1);
    REQUIRE(first.kernels[0].champion_cycles.has_value());
    const std::string champion_before = first.kernels[0].champion;
    auto count = [&](const std::string& sql) {
        auto store = store::CampaignStore::open(dir / "campaign.db");
        auto rows = store.database().query(sql);
        return rows.empty() ? std::int64_t{-1} : store::as_int(rows.front().front());
    };
    const auto measurements_before = count("SELECT COUNT(*) FROM measurements");
    const auto evaluations_before = count("SELECT COUNT(*) FROM evaluations");
    REQUIRE(measurements_before > 0);

    write_yaml(npuc_11);  // the user switches toolchains in campaign.yaml
    options.max_steps = 5;
    auto second = [&] {
        auto workspace = campaign::open_workspace(dir, std::nullopt);
        return campaign::run_workspace(workspace, options);
    }();
    INFO(second.message);
    REQUIRE(second.kernels.size() == 1);
    INFO(second.kernels[0].reason);
    CHECK(second.kernels[0].status == "active");
    REQUIRE(second.kernels[0].champion_cycles.has_value());
    CHECK(count("SELECT COUNT(*) FROM measurements") > measurements_before);  // every old one kept, new ones added
    CHECK(count("SELECT COUNT(*) FROM evaluations WHERE stale = 1") == evaluations_before);
    auto store = store::CampaignStore::open(dir / "campaign.db");
    std::map<std::string, std::vector<nlohmann::json>> events;
    for (const auto& event : store.list_events(100000)) events[event.kind].push_back(nlohmann::json::parse(event.payload_json));
    REQUIRE(events["toolchain_changed"].size() == 1);
    CHECK(events["toolchain_changed"][0]["to"] == "1.1.0");
    REQUIRE_FALSE(events["fixit_kept"].empty());  // E0401 `vtrf` → `to_trf`, learnt from the fix-it
    CHECK(events["fixit_kept"][0]["edits"][0] == "`vtrf` → `to_trf`");
    REQUIRE(events["port_finished"].size() == 1);
    const auto& port = events["port_finished"][0];
    CHECK(port["before"]["champion"] == champion_before);
    if (champion_before != "baseline") {
        CHECK(port["champion_ported"] == true);
        CHECK(port["lost"] == "");
    }
    // No step after the switch failed twice on the same diagnostic in the same template.
    store::TreeStore trees(store.database());
    std::map<std::string, int> failures;
    for (const auto& edge : trees.list_edges("attention_output")) {
        if (edge.step <= 4 || edge.verdict != "failed") continue;
        auto design = store.find_design(edge.design_id);
        failures[design->template_name + "|" + edge.final_reason.substr(0, 5)] += 1;
    }
    for (const auto& [key, times] : failures) CHECK_MESSAGE(times <= 1, key);
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
}
