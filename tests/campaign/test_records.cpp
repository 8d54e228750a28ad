// Portable tuning records (campaign/records_io.hpp): export of a campaign's store to JSON Lines
// and import into another, on small stores built here (no toolchain needed).

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "campaign/records_io.hpp"
#include "core/error.hpp"
#include "core/hash.hpp"
#include "search/design.hpp"
#include "store/records_store.hpp"
#include "store/tree_store.hpp"
#include "../search/search_test_util.hpp"

using namespace npuopt;
using npuopt::test::ScratchDir;

namespace {

constexpr const char* k_target = "npu-sim";
constexpr const char* k_kernel = "gemv";
constexpr const char* k_shape = "n=64";
constexpr const char* k_bench = "00000000bench001";

campaign::CampaignFacts facts_of(const std::string& name, const std::string& version = "1.0.0",
                                 const std::string& shape = k_shape, const std::string& bench = k_bench) {
    campaign::CampaignFacts facts;
    facts.name = name;
    facts.fingerprint = content_hash(name);
    facts.seed = 7;
    facts.target = k_target;
    facts.toolchain = campaign::ToolchainId{"npuc", version};
    facts.kernels[k_kernel] = {shape, {bench, "00000000strict01"}};
    return facts;
}

store::CampaignStore open_store(const std::filesystem::path& file) { return store::CampaignStore::open(file); }

/// A design of kernel gemv with its source hashed as the search hashes it.
std::int64_t add_design(store::CampaignStore& store, const std::string& family, const std::string& params,
                        std::optional<std::int64_t> parent, const std::string& shape = k_shape) {
    store::DesignRecord design;
    design.source = fmt::format("// {} {}\nfn main() {{}}\n", family, params);
    design.content_hash = search::design_hash(k_target, k_kernel, shape, *design.source);
    design.target = k_target;
    design.kernel = k_kernel;
    design.shape = shape;
    design.template_name = family;
    design.params_json = params;
    design.parent_id = parent;
    return store.record_design(design);
}

std::int64_t add_evaluation(store::CampaignStore& store, std::int64_t design_id, std::int64_t toolchain_id,
                            const std::string& stage, const std::string& verdict, std::vector<double> cycles = {}) {
    store::EvaluationRecord evaluation;
    evaluation.design_id = design_id;
    evaluation.toolchain_version_id = toolchain_id;
    evaluation.bench_config_hash = k_bench;
    evaluation.stage = stage;
    evaluation.verdict = verdict;
    evaluation.reason = stage + " " + verdict;
    evaluation.secs = 0.25;
    std::vector<store::MeasurementRecord> measurements;
    for (std::size_t launch = 0; launch < cycles.size(); ++launch) {
        store::MeasurementRecord measurement;
        measurement.launch_order = static_cast<std::int64_t>(launch);
        measurement.seed = 1000 + static_cast<std::int64_t>(launch);
        measurement.cycles = cycles[launch];
        measurement.wall_ms = 3.5;
        measurements.push_back(measurement);
    }
    if (stage == "race" && !measurements.empty()) {
        measurements.back().outcome = "transient";
        measurements.back().cycles.reset();
        measurements.back().error = "device busy";
    }
    evaluation.launches = static_cast<std::int64_t>(cycles.size());
    return store.record_evaluation(evaluation, measurements);
}

/// A small campaign: a baseline, a design that passed and was accepted, one that failed to compile.
struct SourceCampaign {
    ScratchDir dir{"records"};
    store::CampaignStore store = open_store(dir.path / "a.db");
    std::int64_t baseline = 0;
    std::int64_t passed = 0;
    std::int64_t failed = 0;

    SourceCampaign() {
        const std::int64_t toolchain = store.record_toolchain_version(k_target, "npuc", "1.0.0");
        baseline = add_design(store, "baseline", "{}", std::nullopt);
        add_evaluation(store, baseline, toolchain, "compile", "pass");
        add_evaluation(store, baseline, toolchain, "correctness", "pass", {5000, 5010, 4990});
        passed = add_design(store, "gemv_tiled", R"({"T":4})", baseline);
        add_evaluation(store, passed, toolchain, "correctness", "pass", {4000, 4010});
        add_evaluation(store, passed, toolchain, "race", "accept", {3900, 3950, 3920, 0});
        failed = add_design(store, "gemv_tiled", R"({"T":8})", baseline);
        add_evaluation(store, failed, toolchain, "compile", "fail");
        store::TreeStore tree(store.database());
        store::TreeEdgeRecord edge;
        edge.kernel = k_kernel;
        edge.design_id = passed;
        edge.parent_design_id = baseline;
        edge.role = "architect";
        edge.move = "family gemv_tiled";
        edge.step = 2;
        edge.verdict = "accepted";
        edge.cycles = 3920;
        tree.record_edge(edge);
    }

    std::string exported(const std::string& kernel = "") {
        std::ostringstream out;
        campaign::ExportOptions options;
        options.kernel = kernel;
        campaign::write_records(store, facts_of("a"), options, out);
        return out.str();
    }
};

campaign::ImportReport import_text(store::CampaignStore& store, const std::string& text,
                                   const campaign::CampaignFacts& facts, campaign::ImportOptions options = {}) {
    std::istringstream in(text);
    return campaign::import_records(store, facts, in, "records.jsonl", options);
}

/// Every row count and the queue: what "the destination is unchanged" compares.
std::string snapshot(store::CampaignStore& store) {
    std::string text;
    for (const char* table : {"designs", "evaluations", "measurements", "imports", "imported_designs", "events",
                              "toolchain_versions", "campaign_state"}) {
        text += fmt::format("{}={} ", table,
                            store::as_int(store.database().query(fmt::format("SELECT COUNT(*) FROM {}", table)).at(0).at(0)));
    }
    return text;
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

std::string joined(const std::vector<std::string>& lines) {
    std::string text;
    for (const auto& line : lines) text += line + "\n";
    return text;
}

std::string error_of(const std::function<void()>& action) {
    try {
        action();
    } catch (const Error& error) {
        CHECK(error.kind() == ErrorKind::invalid_input);
        return error.what();
    }
    FAIL("no error");
    return "";
}

std::vector<std::int64_t> queued(store::CampaignStore& store) {
    auto text = store::TreeStore(store.database()).state(std::string("user_queue/") + k_kernel);
    return text ? nlohmann::json::parse(*text).get<std::vector<std::int64_t>>() : std::vector<std::int64_t>{};
}

}  // namespace

TEST_CASE("records: export then import into a fresh campaign gives the same designs and measurements") {
    SourceCampaign source;
    const std::string text = source.exported();
    const auto lines = lines_of(text);
    REQUIRE(lines.size() == 1 + 3 + 5);
    const auto header = nlohmann::json::parse(lines[0]);
    CHECK(header["format"] == "npuopt-records");
    CHECK(header["version"] == 1);
    CHECK(header["toolchain"]["version"] == "1.0.0");
    CHECK(header["bench_config"][k_kernel] == k_bench);
    CHECK(header["campaign"]["name"] == "a");

    ScratchDir dir{"records-b"};
    auto destination = open_store(dir.path / "b.db");
    const campaign::ImportReport report = import_text(destination, text, facts_of("b"));
    CHECK(report.import_id.has_value());
    CHECK(report.counts.designs_added == 3);
    CHECK(report.counts.evaluations_added == 5);
    CHECK(report.counts.evaluations_stale == 0);
    CHECK(report.counts.measurements_added == 9);

    for (const std::int64_t id : {source.baseline, source.passed, source.failed}) {
        const auto original = *source.store.find_design(id);
        const auto copy = destination.find_design_by_hash(original.content_hash);
        REQUIRE(copy.has_value());
        CHECK(copy->template_name == original.template_name);
        CHECK(copy->params_json == original.params_json);
        CHECK(copy->source == original.source);
        CHECK(copy->shape == original.shape);
        if (original.parent_id) {
            CHECK(destination.find_design(*copy->parent_id)->content_hash ==
                  source.store.find_design(*original.parent_id)->content_hash);
        }
        const auto evaluations = source.store.list_evaluations(id, true);
        const auto copied = destination.list_evaluations(copy->id, true);
        REQUIRE(copied.size() == evaluations.size());
        for (std::size_t idx = 0; idx < copied.size(); ++idx) {
            CHECK(copied[idx].stage == evaluations[idx].stage);
            CHECK(copied[idx].verdict == evaluations[idx].verdict);
            CHECK(copied[idx].bench_config_hash == evaluations[idx].bench_config_hash);
            const auto measured = source.store.list_measurements(evaluations[idx].id);
            const auto carried = destination.list_measurements(copied[idx].id);
            REQUIRE(carried.size() == measured.size());
            for (std::size_t launch = 0; launch < carried.size(); ++launch) {
                CHECK(carried[launch].seed == measured[launch].seed);
                CHECK(carried[launch].cycles == measured[launch].cycles);
                CHECK(carried[launch].outcome == measured[launch].outcome);
                CHECK(carried[launch].error == measured[launch].error);
            }
        }
        CHECK(store::RecordsStore(destination.database()).evaluation_origins(copy->id).size() == copied.size());
    }

    // Only the design that passed is queued (never the baseline, never the one that failed).
    const auto passed_here = destination.find_design_by_hash(source.store.find_design(source.passed)->content_hash)->id;
    CHECK(queued(destination) == std::vector<std::int64_t>{passed_here});
    const campaign::QueuedOrigin origin = campaign::queued_origin(destination, passed_here);
    CHECK(origin.role == "import");
    CHECK(origin.move == "imported from records.jsonl");
    CHECK(origin.reason.find("architect") != std::string::npos);
    const auto imported = store::RecordsStore(destination.database()).find_imported_design(passed_here);
    REQUIRE(imported.has_value());
    CHECK(imported->origin_role == "architect");
    CHECK(imported->queued);
    CHECK(!imported->stale);
    const auto summary = store::RecordsStore(destination.database()).summarize();
    CHECK(summary.imports == 1);
    CHECK(summary.evaluations == 5);
    CHECK(summary.sources == std::vector<std::string>{"records.jsonl (campaign a)"});

    // The destination's export carries the origin fingerprints: the records stay one set anywhere.
    std::ostringstream again;
    campaign::write_records(destination, facts_of("b"), {}, again);
    const auto relines = lines_of(again.str());
    REQUIRE(relines.size() == lines.size());
    for (std::size_t idx = 1; idx < lines.size(); ++idx) {
        const auto before = nlohmann::json::parse(lines[idx]);
        const auto after = nlohmann::json::parse(relines[idx]);
        if (before["record"] == "evaluation") CHECK(after["fingerprint"] == before["fingerprint"]);
        if (before["record"] == "design") CHECK(after["hash"] == before["hash"]);
    }
    CHECK(import_text(source.store, again.str(), facts_of("a")).nothing_new);
}

TEST_CASE("records: a second import of the same file adds nothing and says so") {
    SourceCampaign source;
    const std::string text = source.exported();
    ScratchDir dir{"records-b"};
    auto destination = open_store(dir.path / "b.db");
    import_text(destination, text, facts_of("b"));
    const std::string before = snapshot(destination);
    const campaign::ImportReport again = import_text(destination, text, facts_of("b"));
    CHECK(again.nothing_new);
    CHECK(!again.import_id);
    CHECK(again.counts.designs_added == 0);
    CHECK(again.counts.designs_present == 3);
    CHECK(again.counts.evaluations_present == 5);
    CHECK(again.counts.designs_queued == 0);
    CHECK(snapshot(destination) == before);
    CHECK(campaign::render_import_text(again).find("nothing new") != std::string::npos);
    CHECK(campaign::to_json(again)["nothing_new"] == true);

    // Into the campaign the records came from: its own measurements are recognised too.
    CHECK(import_text(source.store, text, facts_of("a")).nothing_new);
}

TEST_CASE("records: a damaged line names the file, the line and the field and leaves the destination unchanged") {
    SourceCampaign source;
    const auto lines = lines_of(source.exported());
    ScratchDir dir{"records-b"};
    auto destination = open_store(dir.path / "b.db");
    const std::string before = snapshot(destination);
    auto damaged = [&](std::size_t line_idx, const std::function<void(nlohmann::json&)>& change) {
        auto copy = lines;
        auto json = nlohmann::json::parse(copy[line_idx]);
        change(json);
        copy[line_idx] = json.dump();
        return joined(copy);
    };
    auto import_error = [&](const std::string& text) {
        return error_of([&] { import_text(destination, text, facts_of("b")); });
    };

    SUBCASE("bad JSON") {
        auto copy = lines;
        copy[4] = copy[4].substr(0, copy[4].size() / 2);
        const std::string message = import_error(joined(copy));
        CHECK(message.find("records.jsonl:5: not valid JSON") != std::string::npos);
    }
    SUBCASE("a missing field") {
        const std::string message = import_error(damaged(3, [](nlohmann::json& json) { json.erase("stage"); }));
        CHECK(message == "records.jsonl:4: evaluation: field 'stage' is missing");
    }
    SUBCASE("a mistyped field of a measurement") {
        const std::string message = import_error(damaged(3, [](nlohmann::json& json) {
            json["measurements"][1]["seed"] = "x";
        }));
        CHECK(message == "records.jsonl:4: evaluation: measurements[1]: field 'seed' must be an integer, not string");
    }
    SUBCASE("a wrong format version") {
        const std::string message = import_error(damaged(0, [](nlohmann::json& json) { json["version"] = 2; }));
        CHECK(message.find("records.jsonl:1: header: field 'version' is 2; this npuopt reads version 1") !=
              std::string::npos);
    }
    SUBCASE("a source that does not hash to its design's hash") {
        const std::string message = import_error(damaged(1, [](nlohmann::json& json) { json["source"] = "changed"; }));
        CHECK(message.find("records.jsonl:2: design: field 'source' does not hash to field 'hash'") != std::string::npos);
    }
    SUBCASE("an evaluation of a design not listed") {
        auto copy = lines;
        copy.erase(copy.begin() + 1);  // the baseline's design line
        CHECK(import_error(joined(copy)).find("records.jsonl:2: evaluation: field 'design' names design") !=
              std::string::npos);
    }
    SUBCASE("another target") {
        const std::string message = import_error(damaged(0, [](nlohmann::json& json) { json["target"] = "cuda-h200"; }));
        CHECK(message.find("field 'target' is 'cuda-h200'") != std::string::npos);
    }
    SUBCASE("no header") {
        CHECK(import_error("").find("records.jsonl: no header line") != std::string::npos);
        CHECK(import_error(joined({lines[1]})).find("records.jsonl:1: expected the header line first") !=
              std::string::npos);
    }
    SUBCASE("a write that fails half-way rolls the whole import back") {
        destination.database().set_fault_countdown(6);
        CHECK_THROWS_AS(import_text(destination, joined(lines), facts_of("b")), Error);
        destination.database().set_fault_countdown(std::nullopt);
    }
    CHECK(snapshot(destination) == before);
    CHECK(destination.database().integrity_check() == "ok");
}

TEST_CASE("records: measurements of another toolchain, bench config or shape are kept but marked stale") {
    SourceCampaign source;
    const std::string text = source.exported();
    ScratchDir dir{"records-b"};
    auto destination = open_store(dir.path / "b.db");

    SUBCASE("another toolchain version") {
        const auto report = import_text(destination, text, facts_of("b", "2.0.0"));
        CHECK(report.counts.evaluations_added == 5);
        CHECK(report.counts.evaluations_stale == 5);
        const std::string reason = "measured under npuc 1.0.0 (this campaign runs npuc 2.0.0)";
        CHECK(report.stale_reasons.at(reason) == 5);
        const auto copy = destination.find_design_by_hash(source.store.find_design(source.passed)->content_hash);
        CHECK(destination.list_evaluations(copy->id, false).empty());  // stale: not this campaign's
        CHECK(destination.list_evaluations(copy->id, true).size() == 2);
        const auto origins = store::RecordsStore(destination.database()).evaluation_origins(copy->id);
        REQUIRE(origins.size() == 2);
        CHECK(origins.begin()->second.import_note.find("stale: " + reason) != std::string::npos);
        const auto imported = store::RecordsStore(destination.database()).find_imported_design(copy->id);
        CHECK(imported->stale);
        CHECK(imported->stale_reason == reason);
        CHECK(queued(destination).size() == 1);  // measured again here: that is what the queue is for
    }
    SUBCASE("another bench config") {
        const auto report = import_text(destination, text, facts_of("b", "1.0.0", k_shape, "00000000bench002"));
        CHECK(report.counts.evaluations_stale == 5);
        CHECK(report.stale_reasons.begin()->first ==
              "bench config 00000000bench001 (this campaign's is 00000000bench002)");
    }
    SUBCASE("another shape: kept, stale, not queued") {
        const auto report = import_text(destination, text, facts_of("b", "1.0.0", "n=128"));
        CHECK(report.counts.designs_added == 3);
        CHECK(report.counts.evaluations_stale == 5);
        CHECK(report.counts.designs_queued == 0);
        const auto copy = destination.find_design_by_hash(source.store.find_design(source.passed)->content_hash);
        const auto imported = store::RecordsStore(destination.database()).find_imported_design(copy->id);
        CHECK(imported->stale_reason == "made for shape n=64 (this campaign runs n=128)");
    }
}

TEST_CASE("records: a dry run reports the import and writes nothing") {
    SourceCampaign source;
    ScratchDir dir{"records-b"};
    auto destination = open_store(dir.path / "b.db");
    const std::string before = snapshot(destination);
    campaign::ImportOptions options;
    options.dry_run = true;
    const auto report = import_text(destination, source.exported(), facts_of("b"), options);
    CHECK(report.dry_run);
    CHECK(!report.import_id);
    CHECK(report.counts.designs_added == 3);
    CHECK(report.counts.designs_queued == 1);
    CHECK(snapshot(destination) == before);
    CHECK(campaign::render_import_text(report).find("dry run, nothing written") != std::string::npos);
}

TEST_CASE("records: --queue all queues every new design but the baseline, none queues nothing") {
    SourceCampaign source;
    ScratchDir dir{"records-b"};
    auto destination = open_store(dir.path / "b.db");
    campaign::ImportOptions options;
    SUBCASE("all") {
        options.queue = campaign::QueuePolicy::all;
        CHECK(import_text(destination, source.exported(), facts_of("b"), options).counts.designs_queued == 2);
        CHECK(queued(destination).size() == 2);
    }
    SUBCASE("none") {
        options.queue = campaign::QueuePolicy::none;
        CHECK(import_text(destination, source.exported(), facts_of("b"), options).counts.designs_queued == 0);
        CHECK(queued(destination).empty());
    }
    CHECK(campaign::parse_queue_policy("passed") == campaign::QueuePolicy::passed);
    CHECK(!campaign::parse_queue_policy("some"));
}

TEST_CASE("records: export refuses to overwrite a file without --force and replaces it whole with it") {
    SourceCampaign source;
    const auto file = source.dir.path / "records.jsonl";
    npuopt::test::write_text(file, "keep me\n");
    const std::string message = error_of([&] {
        campaign::export_records_file(source.store, facts_of("a"), {}, file, false);
    });
    CHECK(message.find("exists; pass --force") != std::string::npos);
    std::ifstream kept(file);
    std::string first;
    std::getline(kept, first);
    CHECK(first == "keep me");

    const auto summary = campaign::export_records_file(source.store, facts_of("a"), {}, file, true);
    CHECK(summary.designs == 3);
    CHECK(summary.evaluations == 5);
    std::ifstream written(file);
    std::ostringstream text;
    text << written.rdbuf();
    CHECK(lines_of(text.str()).size() == 9);
    CHECK(nlohmann::json::parse(lines_of(text.str()).front())["format"] == "npuopt-records");
    std::size_t files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(source.dir.path)) {
        files += entry.path().filename().string().find(".tmp") != std::string::npos ? 1 : 0;
    }
    CHECK(files == 0);
}

TEST_CASE("records: export of one kernel, and of a kernel the campaign does not have") {
    SourceCampaign source;
    CHECK(lines_of(source.exported(k_kernel)).size() == 9);
    const std::string message = error_of([&] { source.exported("attention"); });
    CHECK(message.find("has no kernel 'attention'") != std::string::npos);
}

TEST_CASE("records: designs of a kernel the destination lacks are skipped and named") {
    SourceCampaign source;
    ScratchDir dir{"records-b"};
    auto destination = open_store(dir.path / "b.db");
    campaign::CampaignFacts facts = facts_of("b");
    facts.kernels = {{"attention", {"h=8", {k_bench}}}};
    const auto report = import_text(destination, source.exported(), facts);
    CHECK(report.counts.designs_skipped == 3);
    CHECK(report.skipped_kernels == std::vector<std::string>{k_kernel});
    CHECK(report.nothing_new);
}
