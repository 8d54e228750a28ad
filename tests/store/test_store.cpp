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

TEST_CASE("a database newer than this binary is refused and a missing one is not created when asked not to") {
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

TEST_CASE("a v4 database upgrades to v5 keeping every row and race rows get their side") {
    ScratchDb scratch;
    std::int64_t champion_id = 0;
    std::int64_t candidate_id = 0;
    {
        auto store = CampaignStore::open(scratch.file(), options_migrate_to(4));
        REQUIRE(store.database().schema_version() == 4);
        candidate_id = store.record_design(sample_design("candidate"));
        champion_id = store.record_design(sample_design("champion"));
        auto& database = store.database();
        // v4 rows written as a v4 binary wrote them (no v5 columns exist yet)
        const char* insert_evaluation =
            "INSERT INTO evaluations (id, design_id, bench_config_hash, stage, verdict, reason, secs, created_at) "
            "VALUES (?, ?, 'b', ?, ?, 'why', 1.5, 'then')";
        database.execute(insert_evaluation, {std::int64_t{1}, candidate_id, std::string("correctness"), std::string("pass")});
        database.execute(insert_evaluation, {std::int64_t{2}, candidate_id, std::string("race"), std::string("accept")});
        database.execute(insert_evaluation, {std::int64_t{3}, champion_id, std::string("race"), std::string("champion")});
        const char* insert_measurement =
            "INSERT INTO measurements (evaluation_id, launch_order, seed, repeat_idx, cycles, wall_ms) "
            "VALUES (?, ?, ?, 0, ?, ?)";
        for (std::int64_t launch = 0; launch < 4; ++launch) {
            database.execute(insert_measurement, {std::int64_t{1}, launch, 100 + launch, 1000.0 + static_cast<double>(launch), 2.5});
        }
        for (std::int64_t launch = 0; launch < 6; ++launch) {
            const std::int64_t evaluation_id = launch % 2 == 0 ? 3 : 2;  // champion first on pair 0
            database.execute(insert_measurement,
                             {evaluation_id, launch, 200 + launch / 2, 900.0 + static_cast<double>(launch), nullptr});
        }
        KnowledgeEntry entry;
        entry.target = "npu-sim";
        entry.kind = "hw_param";
        entry.key = "dma_startup_cycles";
        entry.value = 498.0;
        store.record_knowledge(entry);
        store.record_event("campaign_created");
        REQUIRE(count_rows(database, "measurements") == 10);
    }
    auto store = CampaignStore::open(scratch.file());
    auto& database = store.database();
    CHECK(database.schema_version() == current_schema_version());
    CHECK(current_schema_version() >= 5);
    CHECK(database.integrity_check() == "ok");
    CHECK(database.query("PRAGMA foreign_key_check").empty());
    CHECK(count_rows(database, "measurements") == 10);
    CHECK(count_rows(database, "evaluations") == 3);
    CHECK(count_rows(database, "knowledge_entries") == 1);
    CHECK(count_rows(database, "events") == 1);

    const auto correctness = store.list_measurements(1);
    REQUIRE(correctness.size() == 4);
    for (std::size_t launch = 0; launch < correctness.size(); ++launch) {
        CHECK(correctness[launch].launch_order == static_cast<std::int64_t>(launch));
        CHECK(correctness[launch].seed == 100 + static_cast<std::int64_t>(launch));
        CHECK(correctness[launch].cycles == std::optional<double>(1000.0 + static_cast<double>(launch)));
        CHECK(correctness[launch].wall_ms == std::optional<double>(2.5));
        CHECK(correctness[launch].side == "candidate");
        CHECK(correctness[launch].outcome == "ok");
        CHECK_FALSE(correctness[launch].error);
        CHECK(correctness[launch].attempt == 0);
        CHECK_FALSE(correctness[launch].pair_idx);
    }
    const auto candidate_race = store.list_measurements(2);
    const auto champion_race = store.list_measurements(3);
    REQUIRE(candidate_race.size() == 3);
    REQUIRE(champion_race.size() == 3);
    for (const auto& row : candidate_race) CHECK(row.side == "candidate");
    for (const auto& row : champion_race) CHECK(row.side == "champion");
    CHECK(champion_race[1].launch_order == 2);
    CHECK(champion_race[1].cycles == std::optional<double>(902.0));
    CHECK_FALSE(champion_race[1].wall_ms);

    const auto evaluations = store.list_evaluations(candidate_id);
    REQUIRE(evaluations.size() == 2);
    CHECK(evaluations[1].reason == "why");
    CHECK(evaluations[1].secs == 1.5);
    CHECK_FALSE(evaluations[1].launches);  // not counted before v5
    CHECK_FALSE(evaluations[1].failed_launches);
    CHECK_FALSE(evaluations[1].retries);
    // the knowledge base index still follows its sources after the table rebuild
    CHECK(as_int(database.query("SELECT COUNT(*) FROM kb_fts WHERE kind = 'fact'").at(0).at(0)) == 1);
}

TEST_CASE("failed launches are stored with their side outcome error and attempt") {
    ScratchDb scratch;
    auto store = CampaignStore::open(scratch.file());
    const std::int64_t design_id = store.record_design(sample_design());
    EvaluationRecord evaluation = make_evaluation(design_id, "race", "accept");
    evaluation.launches = 3;
    evaluation.failed_launches = 1;
    evaluation.retries = 1;
    MeasurementRecord failed;
    failed.launch_order = 0;
    failed.seed = 5;
    failed.side = "champion";
    failed.outcome = "transient";
    failed.error = "transient: device busy";
    failed.pair_idx = 0;
    MeasurementRecord retried = make_measurement(1, 5, 1234.0);
    retried.side = "champion";
    retried.attempt = 1;
    retried.pair_idx = 0;
    MeasurementRecord candidate = make_measurement(2, 5, 1100.0);
    candidate.attempt = 1;
    candidate.pair_idx = 0;
    const std::int64_t evaluation_id = store.record_evaluation(evaluation, {failed, retried, candidate});

    const auto rows = store.list_measurements(evaluation_id);
    REQUIRE(rows.size() == 3);
    CHECK(rows[0].outcome == "transient");
    CHECK(rows[0].error == std::optional<std::string>("transient: device busy"));
    CHECK_FALSE(rows[0].cycles);
    CHECK(rows[0].side == "champion");
    CHECK(rows[0].pair_idx == std::optional<std::int64_t>(0));
    CHECK(rows[1].attempt == 1);
    CHECK(rows[1].cycles == std::optional<double>(1234.0));
    CHECK(rows[2].side == "candidate");
    const auto stored = store.list_evaluations(design_id);
    REQUIRE(stored.size() == 1);
    CHECK(stored[0].launches == std::optional<std::int64_t>(3));
    CHECK(stored[0].failed_launches == std::optional<std::int64_t>(1));
    CHECK(stored[0].retries == std::optional<std::int64_t>(1));
    CHECK(store.summarize().failed_launches == 1);

    // rows the schema would refuse are named before anything is written
    auto refused = [&](MeasurementRecord bad, const std::string& words) {
        try {
            store.record_evaluation(evaluation, {bad});
            FAIL("accepted a measurement that should be refused: " << words);
        } catch (const Error& error) {
            CHECK(error.kind() == ErrorKind::invalid_input);
            CHECK(std::string(error.what()).find(words) != std::string::npos);
        }
    };
    MeasurementRecord bad_side = make_measurement(0, 1, 10.0);
    bad_side.side = "both";
    refused(bad_side, "side 'both'");
    MeasurementRecord ok_without_cycles;
    refused(ok_without_cycles, "outcome ok without cycles");
    MeasurementRecord failed_without_error;
    failed_without_error.outcome = "failed";
    refused(failed_without_error, "outcome failed without its error");
    MeasurementRecord bad_outcome = make_measurement(0, 1, 10.0);
    bad_outcome.outcome = "maybe";
    refused(bad_outcome, "outcome 'maybe'");
    CHECK(count_rows(store.database(), "evaluations") == 1);
    CHECK(count_rows(store.database(), "measurements") == 3);
    // and the schema itself refuses them when written around the accessor
    CHECK_THROWS_AS(store.database().execute("INSERT INTO measurements (evaluation_id, launch_order, seed, repeat_idx, "
                                             "outcome) VALUES (?, 9, 0, 0, 'transient')",
                                             {evaluation_id}),
                    Error);
    CHECK_THROWS_AS(store.database().execute("INSERT INTO measurements (evaluation_id, launch_order, seed, repeat_idx) "
                                             "VALUES (?, 9, 0, 0)",
                                             {evaluation_id}),
                    Error);
}

TEST_CASE("RowReader reads columns in order and refuses a mapping of the wrong width") {
    const Row row{std::int64_t{7}, std::string("text"), nullptr, 2.5};
    RowReader read(row);
    CHECK(read.integer() == 7);
    CHECK(read.text() == "text");
    CHECK_FALSE(read.optional_text());
    CHECK_THROWS_AS(read.finish(), Error);  // one column left
    CHECK(read.real() == 2.5);
    read.finish();
    CHECK_THROWS_AS(read.integer(), Error);  // past the end
}

TEST_CASE("a stage recorded as it goes keeps its launches and a dead one is marked interrupted") {
    ScratchDb scratch;
    std::int64_t finished_id = 0;
    std::int64_t abandoned_id = 0;
    {
        auto store = CampaignStore::open(scratch.file());
        const std::int64_t design_id = store.record_design(sample_design());
        finished_id = store.record_evaluation(make_evaluation(design_id, "race", "running"));
        store.append_measurement(finished_id, make_measurement(0, 1, 1000.0));
        store.append_measurement(finished_id, make_measurement(1, 1, 990.0));
        EvaluationRecord final_record = make_evaluation(design_id, "race", "accept");
        final_record.reason = "accept after 1 pair";
        final_record.secs = 2.5;
        final_record.launches = 2;
        final_record.failed_launches = 0;
        final_record.retries = 0;
        store.complete_evaluation(finished_id, final_record);
        // Completing twice, or completing a finished row, is refused.
        CHECK_THROWS_AS(store.complete_evaluation(finished_id, final_record), Error);
        // An invalid measurement is refused before anything is written.
        MeasurementRecord bad = make_measurement(2, 1, 1.0);
        bad.outcome = "lost";
        CHECK_THROWS_AS(store.append_measurement(finished_id, bad), Error);

        abandoned_id = store.record_evaluation(make_evaluation(design_id, "race", "running"));
        store.append_measurement(abandoned_id, make_measurement(0, 2, 1000.0));
        // The process "dies" here: the store is closed with the race still running.
    }
    auto store = CampaignStore::open(scratch.file());
    CHECK(store.list_measurements(finished_id).size() == 2);
    CHECK(store.list_measurements(abandoned_id).size() == 1);
    CHECK(store.mark_interrupted_evaluations("the process ended") == 1);
    CHECK(store.mark_interrupted_evaluations("again") == 0);
    auto evaluations = store.list_evaluations(store.find_design_by_hash("h1")->id, true);
    REQUIRE(evaluations.size() == 2);
    CHECK(evaluations[0].verdict == "accept");
    CHECK(evaluations[0].reason == "accept after 1 pair");
    CHECK(evaluations[0].launches == 2);
    CHECK(evaluations[1].verdict == "interrupted");
    CHECK(evaluations[1].reason == "the process ended");
    CHECK(store.list_measurements(abandoned_id).size() == 1);
}
