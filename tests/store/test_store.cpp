#include <doctest/doctest.h>

#include <filesystem>
#include <random>

#include "core/error.hpp"
#include "store/campaign_store.hpp"

using namespace npuopt;
using namespace npuopt::store;

namespace {

/// A scratch database path, removed (with WAL files) at scope exit.
struct ScratchDb {
    std::filesystem::path dir;
    ScratchDb() {
        std::random_device random;
        dir = std::filesystem::temp_directory_path() / ("npuopt-store-" + std::to_string(random()));
        std::filesystem::create_directories(dir);
    }
    ~ScratchDb() {
        std::error_code ignored;
        std::filesystem::remove_all(dir, ignored);
    }
    std::filesystem::path file() const { return dir / "campaign.db"; }
};

std::int64_t count_rows(Database& database, const std::string& table) {
    return as_int(database.query("SELECT COUNT(*) FROM " + table).at(0).at(0));
}

DesignRecord sample_design(const std::string& hash = "h1") {
    DesignRecord design;
    design.content_hash = hash;
    design.target = "npu-sim";
    design.kernel = "feedforward";
    design.shape = "hidden=3840";
    design.template_name = "ff_tiled";
    design.params_json = R"({"tile":64})";
    return design;
}

EvaluationRecord make_evaluation(std::int64_t design_id, const std::string& stage, const std::string& verdict) {
    EvaluationRecord evaluation;
    evaluation.design_id = design_id;
    evaluation.bench_config_hash = "b";
    evaluation.stage = stage;
    evaluation.verdict = verdict;
    return evaluation;
}

MeasurementRecord make_measurement(std::int64_t launch_order, std::int64_t seed, double cycles) {
    MeasurementRecord measurement;
    measurement.launch_order = launch_order;
    measurement.seed = seed;
    measurement.cycles = cycles;
    return measurement;
}

Database::Options options_migrate_to(int version) {
    Database::Options options;
    options.migrate_to = version;
    return options;
}

}  // namespace

TEST_CASE("an empty database migrates to the current schema with WAL and foreign keys on") {
    ScratchDb scratch;
    auto database = Database::open(scratch.file());
    CHECK(database.schema_version() == current_schema_version());
    CHECK(current_schema_version() >= 2);
    CHECK(database.journal_mode() == "wal");
    CHECK(as_int(database.query("PRAGMA foreign_keys").at(0).at(0)) == 1);
    CHECK(database.integrity_check() == "ok");
    CHECK(count_rows(database, "rules") == 0);
}

TEST_CASE("a database at schema v1 migrates to the current version keeping its rows") {
    ScratchDb scratch;
    {
        auto store = CampaignStore::open(scratch.file(), options_migrate_to(1));
        REQUIRE(store.database().schema_version() == 1);
        CHECK_THROWS_AS(store.database().query("SELECT * FROM rules"), Error);
        std::int64_t design_id = store.record_design(sample_design());
        store.database().execute(
            "INSERT INTO evaluations (design_id, bench_config_hash, stage, verdict, created_at) VALUES (?, 'b', 'race', 'pass', 'now')",
            {design_id});
        store.database().execute(
            "INSERT INTO measurements (evaluation_id, launch_order, seed, repeat_idx, cycles) VALUES (1, 0, 7, 0, 1234.0)");
    }
    auto store = CampaignStore::open(scratch.file());
    CHECK(store.database().schema_version() == current_schema_version());
    auto measurements = store.list_measurements(1);
    REQUIRE(measurements.size() == 1);
    CHECK(measurements[0].cycles == 1234.0);
    CHECK_FALSE(measurements[0].wall_ms);
    CHECK(store.find_design_by_hash("h1"));
    RuleRecord rule;
    rule.target = "npu-sim";
    rule.code = "E0201";
    rule.statement = "DM per slice is at most 524288 bytes";
    CHECK(store.record_rule(rule) > 0);
    CHECK(store.database().integrity_check() == "ok");
}

TEST_CASE("a database newer than this binary is refused; a missing one is not created when asked not to") {
    ScratchDb scratch;
    {
        auto database = Database::open(scratch.file());
        database.execute_script("PRAGMA user_version = 999");
    }
    CHECK_THROWS_AS(Database::open(scratch.file()), Error);
    Database::Options no_create;
    no_create.create = false;
    CHECK_THROWS_AS(Database::open(scratch.dir / "absent.db", no_create), Error);
    CHECK_FALSE(std::filesystem::exists(scratch.dir / "absent.db"));
}

TEST_CASE("an error inside a transaction leaves no partial rows") {
    ScratchDb scratch;
    auto store = CampaignStore::open(scratch.file());
    std::int64_t design_id = store.record_design(sample_design());

    SUBCASE("an exception thrown by the caller") {
        try {
            Transaction transaction(store.database());
            store.database().execute("INSERT INTO events (ts, kind) VALUES ('t', 'a')");
            store.record_event("nested");  // a savepoint inside the outer transaction
            throw std::runtime_error("boom");
        } catch (const std::runtime_error&) {
        }
        CHECK(count_rows(store.database(), "events") == 0);
    }
    SUBCASE("a constraint failure half-way through a write path") {
        MeasurementRecord first = make_measurement(0, 1, 10.0);
        MeasurementRecord duplicate = first;
        EvaluationRecord evaluation = make_evaluation(design_id, "race", "pass");
        CHECK_THROWS_AS(store.record_evaluation(evaluation, {first, duplicate}), Error);
        CHECK(count_rows(store.database(), "evaluations") == 0);
        CHECK(count_rows(store.database(), "measurements") == 0);
    }
    SUBCASE("an injected fault at every write of an evaluation: nothing or everything") {
        EvaluationRecord evaluation = make_evaluation(design_id, "race", "pass");
        std::vector<MeasurementRecord> measurements;
        for (std::int64_t launch = 0; launch < 3; ++launch) {
            measurements.push_back(make_measurement(launch, launch, 100.0 + static_cast<double>(launch)));
        }
        for (int fault_at = 1; fault_at <= 4; ++fault_at) {
            store.database().set_fault_countdown(fault_at);
            CHECK_THROWS_AS(store.record_evaluation(evaluation, measurements), Error);
            CHECK(count_rows(store.database(), "evaluations") == 0);
            CHECK(count_rows(store.database(), "measurements") == 0);
            CHECK(store.database().integrity_check() == "ok");
        }
        store.database().set_fault_countdown(std::nullopt);
        store.record_evaluation(evaluation, measurements);
        CHECK(count_rows(store.database(), "evaluations") == 1);
        CHECK(count_rows(store.database(), "measurements") == 3);
    }
}

TEST_CASE("foreign keys are enforced") {
    ScratchDb scratch;
    auto store = CampaignStore::open(scratch.file());
    EvaluationRecord orphan = make_evaluation(42, "compile", "fail");
    CHECK_THROWS_AS(store.record_evaluation(orphan), Error);
}

TEST_CASE("typed accessors round-trip their records") {
    ScratchDb scratch;
    auto store = CampaignStore::open(scratch.file());

    store.set_meta("target", "npu-sim");
    store.set_meta("target", "npu-sim2");
    CHECK(store.meta("target") == std::optional<std::string>("npu-sim2"));
    CHECK_FALSE(store.meta("absent"));

    std::int64_t v10 = store.record_toolchain_version("npu-sim", "npuc", "1.0.0");
    CHECK(store.record_toolchain_version("npu-sim", "npuc", "1.0.0") == v10);
    std::int64_t v11 = store.record_toolchain_version("npu-sim", "npuc", "1.1.0");
    CHECK(v11 != v10);
    REQUIRE(store.list_toolchain_versions().size() == 2);
    CHECK(store.list_toolchain_versions()[1].version == "1.1.0");

    DesignRecord design = sample_design("abc");
    design.source = "fn main() {}";
    std::int64_t design_id = store.record_design(design);
    CHECK(store.record_design(design) == design_id);  // content hash is unique
    DesignRecord child = sample_design("def");
    child.parent_id = design_id;
    std::int64_t child_id = store.record_design(child);
    auto loaded = store.find_design(design_id);
    REQUIRE(loaded);
    CHECK(loaded->content_hash == "abc");
    CHECK(loaded->params_json == R"({"tile":64})");
    CHECK(loaded->source == std::optional<std::string>("fn main() {}"));
    CHECK(store.find_design(child_id)->parent_id == std::optional<std::int64_t>(design_id));
    CHECK(store.list_designs("npu-sim", "feedforward").size() == 2);

    EvaluationRecord evaluation = make_evaluation(design_id, "race", "accept");
    evaluation.toolchain_version_id = v10;
    evaluation.reason = "B faster by 3%";
    evaluation.secs = 12.5;
    MeasurementRecord later = make_measurement(1, 9, 905112.0);
    later.wall_ms = 412.5;
    std::int64_t evaluation_id = store.record_evaluation(evaluation, {later, make_measurement(0, 8, 900000.0)});
    auto evaluations = store.list_evaluations(design_id);
    REQUIRE(evaluations.size() == 1);
    CHECK(evaluations[0].reason == "B faster by 3%");
    CHECK(evaluations[0].secs == 12.5);
    CHECK(evaluations[0].toolchain_version_id == std::optional<std::int64_t>(v10));
    auto measurements = store.list_measurements(evaluation_id);
    REQUIRE(measurements.size() == 2);
    CHECK(measurements[0].launch_order == 0);  // ordered by launch
    CHECK(measurements[1].wall_ms == std::optional<double>(412.5));

    KnowledgeEntry entry;
    entry.target = "npu-sim";
    entry.kind = "hw_param";
    entry.key = "dma_startup_cycles";
    entry.text = "fitted";
    entry.value = 498.0;
    entry.evidence_json = R"({"samples":12})";
    entry.toolchain_version_id = v10;
    store.record_knowledge(entry);
    auto entries = store.list_knowledge("npu-sim");
    REQUIRE(entries.size() == 1);
    CHECK(entries[0].value == std::optional<double>(498.0));
    CHECK(entries[0].evidence_json == R"({"samples":12})");

    RuleRecord rule;
    rule.target = "npu-sim";
    rule.code = "E0201";
    rule.statement = "dm_bytes <= 524288";
    rule.quantity = "dm_bytes";
    rule.limit = 524288.0;
    rule.confidence = 0.9;
    rule.toolchain_version_id = v10;
    rule.status = "confirmed";
    store.record_rule(rule);
    RuleRecord new_rule = rule;
    new_rule.toolchain_version_id = v11;
    store.record_rule(new_rule);
    CHECK(store.list_rules("npu-sim").size() == 2);

    CHECK(store.mark_stale_except("npu-sim", v11) == 3);  // the evaluation, the entry, the old rule
    CHECK(store.list_evaluations(design_id).empty());
    CHECK(store.list_evaluations(design_id, true).size() == 1);
    CHECK(store.list_knowledge("npu-sim").empty());
    REQUIRE(store.list_rules("npu-sim").size() == 1);
    CHECK(store.list_rules("npu-sim")[0].toolchain_version_id == std::optional<std::int64_t>(v11));
    CHECK(store.list_rules("npu-sim", true).size() == 2);

    store.record_event("campaign_created", R"({"target":"npu-sim"})");
    store.record_event("champion", "{}");
    auto events = store.list_events(1);
    REQUIRE(events.size() == 1);
    CHECK(events[0].kind == "champion");

    auto summary = store.summarize();
    CHECK(summary.schema_version == current_schema_version());
    CHECK(summary.designs_by_kernel.at("feedforward") == 2);
    CHECK(summary.measurements == 2);
    CHECK(summary.rules == 2);
    CHECK(summary.rules_stale == 1);
    CHECK(summary.events == 2);
    CHECK(summary.meta.at("target") == "npu-sim2");
}
