// The cascade as an ordered list of stages over the Device interfaces, with the in-memory fakes
// (tests/support/fakes.hpp): typed verdicts, the stage list pluggable, nothing recorded until the
// step commits, and the store's commit atomic.

#include <doctest/doctest.h>

#include <fstream>
#include <iterator>

#include "../support/fakes.hpp"
#include "../support/temp_dir.hpp"
#include "eval/cascade.hpp"
#include "store/knowledge_store.hpp"

using namespace npuopt;
using namespace npuopt::eval;

namespace {

struct Bench {
    fakes::TempDir dir{"stages"};
    store::CampaignStore store = store::CampaignStore::open(dir.path() / "campaign.db");
    fakes::FakeDevice device;
    fakes::MemoryRecorder recorder;
    int next = 0;

    KernelContext kernel() const {
        KernelContext context;
        context.spec.name = "feedforward";
        context.shape = {{"hidden", 64}};
        return context;
    }

    Candidate candidate(const std::string& name) {
        store::DesignRecord record;
        record.content_hash = name + "-" + std::to_string(next++);
        record.target = "fake";
        record.kernel = "feedforward";
        record.template_name = name;
        record.params_json = "{}";
        Candidate candidate;
        candidate.design_id = store.record_design(record);
        candidate.content_hash = record.content_hash;
        candidate.kernel = "feedforward";
        candidate.source_file = dir.path() / (record.content_hash + ".rs");
        std::ofstream(candidate.source_file) << "// " << name << "\n";
        return candidate;
    }
};

CascadeConfig quick() {
    CascadeConfig config;
    config.seed = 7;
    config.acceptance.min_pairs = 4;
    config.acceptance.max_pairs = 8;
    config.acceptance.calibration_paths = 2000;
    return config;
}

/// A stage that always ends with `verdict`.
class FixedStage final : public Stage {
public:
    FixedStage(StageKind kind, Verdict verdict) : m_kind(kind), m_verdict(verdict) {}
    StageKind kind() const override { return m_kind; }
    StageResult run(StageContext&) override {
        StageResult result;
        result.verdict = m_verdict;
        result.reason = "fixed";
        result.go_on = m_verdict == Verdict::pass;
        return result;
    }

private:
    StageKind m_kind;
    Verdict m_verdict;
};

}  // namespace

TEST_CASE("verdict names round-trip and unknown names are refused") {
    for (Verdict verdict : {Verdict::pass, Verdict::fail, Verdict::skip, Verdict::accept, Verdict::reject,
                            Verdict::inconclusive, Verdict::suspect, Verdict::error, Verdict::running,
                            Verdict::interrupted, Verdict::champion}) {
        CHECK(parse_verdict(verdict_name(verdict)) == verdict);
    }
    CHECK_FALSE(parse_verdict("accepted").has_value());
    CHECK(step_verdict_of(Verdict::fail) == StepVerdict::failed);
    CHECK(step_verdict_of(Verdict::pass) == StepVerdict::rejected);
    CHECK(parse_step_verdict("inconclusive") == StepVerdict::inconclusive);
    CHECK_FALSE(step_measured(StepVerdict::failed));
    CHECK(step_measured(StepVerdict::rejected));
    CHECK(fmt::format("{}", Verdict::suspect) == "suspect");
}

TEST_CASE("stages: a build failure ends the cascade at compile, and nothing is recorded before the commit") {
    Bench bench;
    bench.device.on_build = [](const std::filesystem::path&) {
        target::CheckResult result;
        result.call.status = target::CallStatus::failed;
        target::Diagnostic diagnostic;
        diagnostic.level = "error";
        diagnostic.code = "E0201";
        diagnostic.message = "DM capacity exceeded";
        diagnostic.quantities.push_back({"dm_bytes", 9000.0, 8192.0});
        diagnostic.quantities.push_back({"trf_bytes", 100.0, std::nullopt});  // within what the design declares: no miss
        result.diagnostics.push_back(diagnostic);
        return result;
    };
    Cascade cascade(bench.device, bench.store, nullptr, nullptr, quick());
    cascade.set_recorder(&bench.recorder);
    cascade.set_deferred_commit(true);
    Candidate too_big = bench.candidate("too-big");
    too_big.quantities = {{"dm_bytes", 8000.0}, {"trf_bytes", 200.0}};
    const Outcome outcome = cascade.evaluate(too_big, std::nullopt, bench.kernel());
    // The build is checked at the kernel's shape, and the toolchain's figure beyond the declared
    // one is on the outcome for the campaign to learn from.
    CHECK(bench.device.build_shapes == std::vector<std::string>{"feedforward hidden=64"});
    REQUIRE(outcome.quantity_misses.size() == 1);
    CHECK(outcome.quantity_misses[0].quantity == "dm_bytes");
    CHECK(outcome.quantity_misses[0].declared == doctest::Approx(8000.0));
    CHECK(outcome.quantity_misses[0].reported == doctest::Approx(9000.0));
    CHECK(outcome.quantity_misses[0].code == "E0201");
    REQUIRE(outcome.stages.size() == 3);
    CHECK(outcome.stages[0].stage == StageKind::rules);
    CHECK(outcome.stages[0].verdict == Verdict::skip);  // no rule book... and the cascade goes on
    CHECK(outcome.stages[1].verdict == Verdict::pass);  // no estimate: not screened
    CHECK(outcome.stages[2].stage == StageKind::compile);
    CHECK(outcome.stages[2].verdict == Verdict::fail);
    CHECK(outcome.stages[2].reason.find("E0201") != std::string::npos);
    CHECK(bench.device.runs.empty());
    CHECK(bench.recorder.pending.size() == 3);
    CHECK(bench.recorder.committed.empty());
    bool step_written = false;
    cascade.commit([&] { step_written = true; });
    CHECK(step_written);
    CHECK(bench.recorder.committed.size() == 3);
    CHECK(bench.recorder.pending.empty());
}

TEST_CASE("stages: without a champion a correct design is accepted at the screen after its correctness launches") {
    Bench bench;
    Cascade cascade(bench.device, bench.store, nullptr, nullptr, quick());
    cascade.set_recorder(&bench.recorder);
    const Outcome outcome = cascade.evaluate(bench.candidate("first"), std::nullopt, bench.kernel());
    REQUIRE_FALSE(outcome.stages.empty());
    CHECK(outcome.stages.back().stage == StageKind::screen);
    CHECK(outcome.stages.back().verdict == Verdict::accept);
    CHECK(outcome.accepted);
    CHECK(outcome.correct);
    CHECK(outcome.cycles_median == doctest::Approx(1000.0));
    // priming seed, two fresh seeds, the first fresh one again: four launches, all checked
    CHECK(bench.device.runs.size() == 4);
    CHECK(outcome.device_runs == 4);
    CHECK(bench.device.runs[1].seed == bench.device.runs[3].seed);
    CHECK(bench.recorder.commits == 1);  // not deferred: committed by evaluate itself
    REQUIRE(bench.recorder.committed.size() == 5);
    CHECK(bench.recorder.committed[3].launches == 4);  // correctness carries its launches
}

TEST_CASE("a faster candidate races the champion on the fake device and is accepted, the race is journalled") {
    Bench bench;
    bench.device.cycles = [](const std::filesystem::path& file) {
        return file.filename().string().rfind("fast", 0) == 0 ? 900.0 : 1000.0;
    };
    Cascade cascade(bench.device, bench.store, nullptr, nullptr, quick());
    cascade.set_recorder(&bench.recorder);
    const Champion champion{bench.candidate("slow"), 1000.0};
    const Outcome outcome = cascade.evaluate(bench.candidate("fast"), champion, bench.kernel());
    REQUIRE_FALSE(outcome.stages.empty());
    CHECK(outcome.stages.back().stage == StageKind::race);
    CHECK(outcome.stages.back().verdict == Verdict::accept);
    CHECK(outcome.accepted);
    REQUIRE(outcome.speedup.has_value());
    CHECK(*outcome.speedup == doctest::Approx(1000.0 / 900.0).epsilon(0.01));
    // both sides' launches were written as they happened, the verdicts only at the commit
    REQUIRE(bench.recorder.journals.size() == 2);
    CHECK(bench.recorder.journals[1].size() + bench.recorder.journals[2].size() == outcome.race_pairs * 2);
    CHECK(bench.recorder.committed.back().record.verdict == Verdict::champion);
}

TEST_CASE("the stage list is pluggable: a cascade of one stage ends with that stage's verdict") {
    Bench bench;
    Cascade cascade(bench.device, bench.store, nullptr, nullptr, quick());
    cascade.set_recorder(&bench.recorder);
    cascade.set_stages([] {
        std::vector<std::unique_ptr<Stage>> stages;
        stages.push_back(std::make_unique<FixedStage>(StageKind::rules, Verdict::pass));
        stages.push_back(std::make_unique<FixedStage>(StageKind::estimate, Verdict::reject));
        stages.push_back(std::make_unique<FixedStage>(StageKind::compile, Verdict::pass));
        return stages;
    });
    const Outcome outcome = cascade.evaluate(bench.candidate("any"), std::nullopt, bench.kernel());
    REQUIRE(outcome.stages.size() == 2);
    CHECK(outcome.stages.back().stage == StageKind::estimate);
    CHECK(outcome.stages.back().verdict == Verdict::reject);
    CHECK(outcome.final_reason == "estimate: reject: fixed");
    CHECK(bench.device.builds == 0);
}

TEST_CASE("the store recorder commits a step in one transaction: a failing step write leaves no stage row") {
    Bench bench;
    Cascade cascade(bench.device, bench.store, nullptr, nullptr, quick());
    cascade.set_deferred_commit(true);
    const Candidate candidate = bench.candidate("atomic");
    const Outcome outcome = cascade.evaluate(candidate, std::nullopt, bench.kernel());
    CHECK(outcome.accepted);
    CHECK(bench.store.list_evaluations(candidate.design_id).empty());  // kept, not written
    CHECK_THROWS(cascade.commit([] { throw std::runtime_error("disk full"); }));
    CHECK(bench.store.list_evaluations(candidate.design_id).empty());  // rolled back together

    const Candidate second = bench.candidate("atomic");
    cascade.evaluate(second, std::nullopt, bench.kernel());
    cascade.commit();
    const auto rows = bench.store.list_evaluations(second.design_id);
    REQUIRE(rows.size() == 5);
    CHECK(rows.back().verdict == "accept");
    CHECK(bench.store.list_measurements(rows[3].id).size() == 4);
}

namespace {

/// A device whose DSL renamed `vtrf` to `to_trf`: a source calling `vtrf` fails with a
/// machine-applicable fix-it; `to_trf(bad)` fails with another error (the fix would not help).
target::CheckResult renamed_dsl_build(const std::filesystem::path& file) {
    std::ifstream in(file);
    const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    target::CheckResult result;
    const auto at = source.find("vtrf");
    if (at == std::string::npos) {
        if (source.find("to_trf(bad)") != std::string::npos) {
            result.call.status = target::CallStatus::failed;
            result.diagnostics.push_back({"error", "E0599", "no method `to_trf` for this operand", std::nullopt, {}, {}, {}});
            return result;
        }
        result.call.status = target::CallStatus::ok;
        result.ok = true;
        return result;
    }
    result.call.status = target::CallStatus::failed;
    target::Diagnostic diagnostic{"error", "E0401", "`vtrf` was renamed to `to_trf`", std::nullopt, {}, {}, {}};
    target::Suggestion fix;
    fix.message = "use `to_trf`";
    fix.file = file.filename().string();
    fix.byte_start = static_cast<std::int64_t>(at);
    fix.byte_end = static_cast<std::int64_t>(at + 4);
    fix.replacement = "to_trf";
    fix.applicability = target::Applicability::machine_applicable;
    diagnostic.suggestions.push_back(fix);
    result.diagnostics.push_back(diagnostic);
    return result;
}

}  // namespace

TEST_CASE("compile: a fix-it that passes the check again becomes a rewrite, one that does not is not kept") {
    Bench bench;
    bench.device.on_build = renamed_dsl_build;
    store::KnowledgeStore knowledge(bench.store.database());
    knowledge::SourceRules rules(knowledge, "fake", "1.1.0", "fakec");
    Cascade cascade(bench.device, bench.store, nullptr, nullptr, quick());
    cascade.set_recorder(&bench.recorder);
    cascade.set_deferred_commit(true);
    cascade.set_source_rules(&rules);

    SUBCASE("kept") {
        Candidate candidate = bench.candidate("renamed");
        std::ofstream(candidate.source_file) << "let t = vtrf(x);\n";
        const Outcome outcome = cascade.evaluate(candidate, std::nullopt, bench.kernel());
        CHECK(outcome.stages.back().stage == StageKind::compile);
        CHECK(outcome.stages.back().verdict == Verdict::fail);  // the design as proposed still failed
        REQUIRE(outcome.fixit);
        CHECK(outcome.fixit->kept);
        REQUIRE(outcome.fixit->edits.size() == 1);
        CHECK(outcome.fixit->edits[0].from == "vtrf");
        CHECK(outcome.stages.back().reason.find("fix-its: 1 fix-it(s) applied; the fixed source passes") != std::string::npos);
        CHECK(bench.device.builds == 2);
        CHECK(rules.rewrites().empty());  // nothing written before the step commits
        cascade.commit([] {});
        auto rewrites = rules.rewrites();
        REQUIRE(rewrites.size() == 1);
        CHECK(rewrites[0].to == "to_trf");
        CHECK_FALSE(std::filesystem::exists(candidate.source_file.parent_path() /
                                            (candidate.source_file.stem().string() + ".fixit.rs")));
    }
    SUBCASE("not kept: the fixed source fails with another error") {
        Candidate candidate = bench.candidate("renamed-bad");
        std::ofstream(candidate.source_file) << "let t = vtrf(bad);\n";
        const Outcome outcome = cascade.evaluate(candidate, std::nullopt, bench.kernel());
        REQUIRE(outcome.fixit);
        CHECK_FALSE(outcome.fixit->kept);
        CHECK(outcome.fixit->reason.find("still fails: E0599") != std::string::npos);
        cascade.commit([] {});
        CHECK(rules.rewrites().empty());
        auto all = knowledge.list_rules("fake", "1.1.0");
        REQUIRE(all.size() == 1);
        CHECK(all[0].status == "demoted");
    }
}

TEST_CASE("the bench configuration hash tells the capped race test from the plain one") {
    const Bench bench;
    CascadeConfig plain = quick();
    plain.acceptance.score_cap = 1.0;
    CascadeConfig capped = quick();
    capped.acceptance.score_cap = 0.6;
    CascadeConfig other_cap = quick();
    other_cap.acceptance.score_cap = 0.5;
    const std::string plain_hash = bench_config_hash(plain, bench.kernel());
    CHECK(plain_hash.size() == 16);
    CHECK(bench_config_hash(capped, bench.kernel()) != plain_hash);
    CHECK(bench_config_hash(other_cap, bench.kernel()) != bench_config_hash(capped, bench.kernel()));
    CHECK(bench_config_hash(plain, bench.kernel()) == bench_config_hash(quick(), bench.kernel()));  // the default is 1
}
