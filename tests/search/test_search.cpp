#include <filesystem>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "config/cost_model_config.hpp"
#include "config/target_loader.hpp"
#include "config/template_config.hpp"
#include "core/error.hpp"
#include "search/cost_model.hpp"
#include "search/design.hpp"
#include "search/kernel_search.hpp"
#include "search/roles.hpp"
#include "search/scheduler.hpp"
#include "search/tree.hpp"
#include "search_test_util.hpp"
#include "store/campaign_store.hpp"
#include "store/tree_store.hpp"

using namespace npuopt;
using npuopt::test::ScratchDir;
using npuopt::test::write_text;

namespace {

config::KernelSpec toy_kernel(const std::filesystem::path& dir) {
    config::KernelSpec kernel;
    kernel.name = "toy";
    kernel.shape = {{"n", 1024}};
    kernel.baseline = dir / "baseline_toy.rs";
    return kernel;
}

std::string error_of(const std::function<void()>& action) {
    try {
        action();
    } catch (const Error& error) {
        return error.what();
    }
    return "";
}

knowledge::HardwareModel synthetic_model() {
    knowledge::HardwareModel model;
    model.set("sustained_bytes_per_cycle", 1000.0);
    model.set("dma_engine_bytes_per_cycle", 100.0);
    model.set("dma_startup_cycles", 500.0);
    model.set("pass_issue_cycles", 600.0);
    model.set("clusters", 1.0);
    model.cost_model = std::make_shared<config::CostModelSpec>(config::load_cost_model_config(std::filesystem::path(NPUOPT_SOURCE_DIR) / "knowledge/npu-sim/cost_model.yaml"));
    return model;
}

}  // namespace

TEST_CASE("template parsing errors name file line and key") {
    ScratchDir dir;
    test::write_toy_templates(dir.path);
    auto bad_default = dir.path / "bad.template.yaml";
    write_text(bad_default, "template: bad\nkernel: toy\nsource: toy_tiles.rs\nparams:\n  ENGINES: {values: [1, 2], default: 3}\n");
    std::string message = error_of([&] { config::load_template_config(bad_default); });
    CHECK(message.find("bad.template.yaml:5:") != std::string::npos);
    CHECK(message.find("params.ENGINES.default") != std::string::npos);

    auto unknown_key = dir.path / "unknown.template.yaml";
    write_text(unknown_key, "template: unknown\nkernel: toy\nsource: toy_tiles.rs\nparamz: {}\n");
    message = error_of([&] { config::load_template_config(unknown_key); });
    CHECK(message.find("unknown.template.yaml:4:") != std::string::npos);
    CHECK(message.find("paramz") != std::string::npos);

    auto missing_source = dir.path / "nosource.template.yaml";
    write_text(missing_source, "template: nosource\nkernel: toy\nsource: nowhere.rs\n");
    message = error_of([&] { config::load_template_config(missing_source); });
    CHECK(message.find("nosource.template.yaml:3:") != std::string::npos);
    CHECK(message.find("'source'") != std::string::npos);

    // An expression over an unknown name fails when compiled for the kernel, at its line.
    auto bad_expression = dir.path / "badexpr.template.yaml";
    write_text(bad_expression,
               "template: badexpr\nkernel: toy\nsource: toy_stream.rs\nparams:\n  ENGINES: {values: [1], default: 1}\n"
               "  SPLIT: {values: [1], default: 1}\nquantities:\n  dm_bytes: \"ENGINES * hidden\"\n");
    auto spec = config::load_template_config(bad_expression);
    message = error_of([&] { search::Template::load(spec, toy_kernel(dir.path), "toy-target"); });
    CHECK(message.find("badexpr.template.yaml:8:") != std::string::npos);
    CHECK(message.find("quantities.dm_bytes") != std::string::npos);
    CHECK(message.find("hidden") != std::string::npos);

    // A ${NAME} in the source that no param declares.
    write_text(dir.path / "undeclared.rs", "${ENGINES} ${MISSING}\n");
    auto undeclared = dir.path / "undeclared.template.yaml";
    write_text(undeclared, "template: undeclared\nkernel: toy\nsource: undeclared.rs\nparams:\n  ENGINES: {values: [1], default: 1}\n");
    spec = config::load_template_config(undeclared);
    message = error_of([&] { search::Template::load(spec, toy_kernel(dir.path), "toy-target"); });
    CHECK(message.find("MISSING") != std::string::npos);
}

TEST_CASE("template dir reports a broken template and keeps the others") {
    ScratchDir dir;
    test::write_toy_templates(dir.path);
    write_text(dir.path / "broken.template.yaml", "template: broken\nkernel: [oops\n");
    std::vector<std::string> errors;
    auto specs = config::load_template_dir(dir.path, &errors);
    CHECK(specs.size() == 2);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].find("broken.template.yaml") != std::string::npos);
}

TEST_CASE("the shipped npu-sim templates compile against kernels.yaml") {
    std::filesystem::path root = NPUOPT_SOURCE_DIR;
    auto templates_dir = root / "dsl_templates" / "npu-sim";
    auto kernels = config::load_kernels_config(root / "knowledge" / "npu-sim" / "kernels.yaml", templates_dir);
    std::vector<std::string> dir_errors;
    auto specs = config::load_template_dir(templates_dir, &dir_errors);
    CHECK(dir_errors.empty());
    CHECK(specs.size() >= 3);
    for (const auto& kernel : kernels.kernels) {
        std::vector<std::string> errors;
        auto templates = search::load_kernel_templates(specs, kernel, "npu-sim", errors);
        INFO(kernel.name, errors.empty() ? std::string() : errors.front());
        CHECK(errors.empty());
        REQUIRE(templates.size() >= 2);
        CHECK(templates.front()->is_baseline());
        for (const auto& tmpl : templates) {
            if (tmpl->is_baseline()) continue;
            search::Design design = tmpl->instantiate(tmpl->default_assignment());
            CHECK(design.source.find("${") == std::string::npos);
            CHECK(design.quantities.at("weight_bytes") > 0);
            CHECK(design.quantities.count("dm_bytes") == 1);
        }
    }
}

TEST_CASE("instantiation substitutes params and the hash is stable") {
    ScratchDir dir;
    test::write_toy_templates(dir.path);
    auto spec = config::load_template_config(dir.path / "toy_tiles.template.yaml");
    auto tmpl = search::Template::load(spec, toy_kernel(dir.path), "toy-target");
    search::Assignment assignment = {{"ENGINES", 4}, {"PACKET", 1024}, {"ROWS", 16}, {"BUFFERS", 2}};
    search::Design first = tmpl->instantiate(assignment);
    search::Design again = tmpl->instantiate(assignment);
    CHECK(first.content_hash == again.content_hash);
    CHECK(first.content_hash.size() == 64);
    CHECK(first.source.find("engines 4 packet 1024 rows 16 buffers 2") != std::string::npos);
    CHECK(first.quantities.at("dma_commands") == doctest::Approx(128));
    CHECK(first.quantities.at("passes") == doctest::Approx(64));
    CHECK(first.features.at("tile_bytes") == doctest::Approx(16384));
    CHECK(first.label() == "toy_tiles{BUFFERS=2,ENGINES=4,PACKET=1024,ROWS=16}");
    CHECK(first.params_json().dump() == R"({"BUFFERS":2,"ENGINES":4,"PACKET":1024,"ROWS":16})");

    assignment["ENGINES"] = 8;
    CHECK(tmpl->instantiate(assignment).content_hash != first.content_hash);
    // The hash keys target and shape too: the same source for another shape is another design.
    CHECK(search::design_hash("toy-target", "toy", "n=1024", first.source) == first.content_hash);
    CHECK(search::design_hash("toy-target", "toy", "n=2048", first.source) != first.content_hash);

    // Values outside the domain are refused.
    assignment["ENGINES"] = 3;
    CHECK(tmpl->check_domain(assignment).has_value());
    CHECK_THROWS_AS(tmpl->instantiate(assignment), Error);

    auto baseline = search::Template::baseline(toy_kernel(dir.path), "toy-target");
    search::Design base = baseline->instantiate({});
    CHECK(base.is_baseline);
    CHECK(base.source.find("baseline toy kernel") != std::string::npos);
    CHECK(base.quantities.empty());
}

TEST_CASE("a template's prelude: appended after its source / missing file named / ${PARAM} in it refused") {
    ScratchDir dir;
    test::write_toy_templates(dir.path);
    write_text(dir.path / "prelude.rs", "fn shared_helper() -> u32 { 7 }\n");
    std::string yaml = "template: preluded\nkernel: toy\nsource: toy_stream.rs\nprelude: prelude.rs\nparams:\n"
                       "  ENGINES: {values: [1, 2], default: 1}\n  SPLIT: {values: [1], default: 1}\n";
    write_text(dir.path / "preluded.template.yaml", yaml);
    auto spec = config::load_template_config(dir.path / "preluded.template.yaml");
    CHECK(spec.prelude == dir.path / "prelude.rs");
    auto tmpl = search::Template::load(spec, toy_kernel(dir.path), "toy-target");
    search::Design design = tmpl->instantiate(tmpl->default_assignment());
    const auto own = design.source.find("stream: engines 1 split 1");
    const auto shared = design.source.find("fn shared_helper()");
    REQUIRE(own != std::string::npos);
    REQUIRE(shared != std::string::npos);
    CHECK(own < shared);  // the template's own lines keep their numbers
    CHECK(design.source.find("// ---- prelude: prelude.rs ----") != std::string::npos);
    // The prelude is part of the design: another prelude is another hash.
    write_text(dir.path / "prelude.rs", "fn shared_helper() -> u32 { 8 }\n");
    auto changed = search::Template::load(config::load_template_config(dir.path / "preluded.template.yaml"),
                                          toy_kernel(dir.path), "toy-target");
    CHECK(changed->instantiate(changed->default_assignment()).content_hash != design.content_hash);

    write_text(dir.path / "missing.template.yaml",
               "template: missing\nkernel: toy\nsource: toy_stream.rs\nprelude: nowhere.rs\n");
    std::string message = error_of([&] { config::load_template_config(dir.path / "missing.template.yaml"); });
    CHECK(message.find("missing.template.yaml:4:") != std::string::npos);
    CHECK(message.find("'prelude'") != std::string::npos);
    CHECK(message.find("nowhere.rs") != std::string::npos);

    write_text(dir.path / "prelude.rs", "const N: u32 = ${ENGINES};\n");
    spec = config::load_template_config(dir.path / "preluded.template.yaml");
    message = error_of([&] { search::Template::load(spec, toy_kernel(dir.path), "toy-target"); });
    CHECK(message.find("prelude") != std::string::npos);
    CHECK(message.find("${ENGINES}") != std::string::npos);
}

TEST_CASE("learnt quantity offsets move quantities and the constraints that name them, unknown names dropped") {
    ScratchDir dir;
    test::write_toy_templates(dir.path);
    write_text(dir.path / "budget.template.yaml", R"(template: budget
kernel: toy
source: toy_stream.rs
params:
  ENGINES: {values: [1, 2, 4], default: 1}
  SPLIT:   {values: [1, 2], default: 1}
constraints:
  - "dm_bytes <= 10000"
quantities:
  weight_bytes: "n * n"
  dm_bytes: "ENGINES * 2000"
)");
    auto tmpl = search::Template::load(config::load_template_config(dir.path / "budget.template.yaml"),
                                       toy_kernel(dir.path), "toy-target");
    search::Assignment four = {{"ENGINES", 4}, {"SPLIT", 1}};
    CHECK(tmpl->evaluate_quantities(four).at("dm_bytes") == doctest::Approx(8000));
    CHECK_FALSE(tmpl->check_constraints(four).has_value());
    tmpl->set_quantity_offsets({{"dm_bytes", 2500}, {"not_a_quantity", 1}});
    CHECK(tmpl->quantity_offsets() == std::map<std::string, double>{{"dm_bytes", 2500}});
    CHECK(tmpl->evaluate_quantities(four).at("dm_bytes") == doctest::Approx(10500));
    CHECK(tmpl->evaluate_quantities(four).at("weight_bytes") == doctest::Approx(1024.0 * 1024.0));
    CHECK(tmpl->instantiate(four).quantities.at("dm_bytes") == doctest::Approx(10500));
    auto violated = tmpl->check_constraints(four);
    REQUIRE(violated.has_value());
    CHECK(violated->find("dm_bytes <= 10000") != std::string::npos);
    CHECK_FALSE(tmpl->check_constraints({{"ENGINES", 2}, {"SPLIT", 1}}).has_value());
    tmpl->set_quantity_offsets({});
    CHECK_FALSE(tmpl->check_constraints(four).has_value());
}

TEST_CASE("constraints filter assignments and proposals") {
    ScratchDir dir;
    test::write_toy_templates(dir.path);
    auto spec = config::load_template_config(dir.path / "toy_tiles.template.yaml");
    auto tmpl = search::Template::load(spec, toy_kernel(dir.path), "toy-target");
    search::Assignment ok = {{"ENGINES", 1}, {"PACKET", 256}, {"ROWS", 64}, {"BUFFERS", 1}};
    search::Assignment too_big = {{"ENGINES", 1}, {"PACKET", 256}, {"ROWS", 64}, {"BUFFERS", 2}};
    CHECK_FALSE(tmpl->check_constraints(ok).has_value());
    auto violated = tmpl->check_constraints(too_big);
    REQUIRE(violated.has_value());
    CHECK(violated->find("ROWS * n * BUFFERS <= 65536") != std::string::npos);

    search::SearchContext context;
    context.kernel = "toy";
    context.templates = {tmpl};
    CHECK_FALSE(search::score_assignment(context, *tmpl, too_big, "m").has_value());
    CHECK(search::score_assignment(context, *tmpl, ok, "m").has_value());
    // A known rule forbids what it forbids.
    context.rule_check = [](const std::map<std::string, double>& quantities) -> std::optional<std::string> {
        if (quantities.at("engine_index") >= 3) return std::string("engine_index <= 2");
        return std::nullopt;
    };
    search::Assignment eight = ok;
    eight["ENGINES"] = 8;
    CHECK_FALSE(search::score_assignment(context, *tmpl, eight, "m").has_value());
    auto neighbours = search::neighbour_assignments(*tmpl, ok);
    CHECK(neighbours.size() > 10);
    search::CostModel model(synthetic_model());
    context.cost_model = &model;
    context.champion = tmpl->instantiate(ok);
    context.champion_cycles = 1e6;
    context.max_proposals = 200;
    auto tuner = search::make_tuner();
    auto proposals = tuner->propose(context);
    REQUIRE_FALSE(proposals.empty());
    for (const auto& proposal : proposals) {
        CHECK_FALSE(tmpl->check_constraints(proposal.design.params).has_value());
        CHECK(proposal.design.params.at("ENGINES") < 8);
        CHECK(proposal.design.content_hash != context.champion->content_hash);
    }
}

TEST_CASE("cost model learns the effect of a parameter the quantities cannot see") {
    ScratchDir dir;
    test::write_toy_templates(dir.path);
    auto spec = config::load_template_config(dir.path / "toy_tiles.template.yaml");
    auto tmpl = search::Template::load(spec, toy_kernel(dir.path), "toy-target");
    search::CostModel model(synthetic_model());
    // BUFFERS changes nothing the roofline sees here, but on the "device" BUFFERS=2 is 20 % faster.
    auto device = [&](const search::Assignment& assignment) {
        double base = *model.predict_base(tmpl->evaluate_quantities(assignment));
        return base * 1.5 * (assignment.at("BUFFERS") == 2 ? 0.8 : 1.0);
    };
    search::Assignment one = {{"ENGINES", 4}, {"PACKET", 1024}, {"ROWS", 32}, {"BUFFERS", 1}};
    search::Assignment two = one;
    two["BUFFERS"] = 2;
    const auto quantities = tmpl->evaluate_quantities(one);
    CHECK(*model.predict("tiles", quantities, &one) == doctest::Approx(*model.predict("tiles", quantities, &two)));
    for (double engines : {1.0, 2.0, 4.0, 8.0}) {
        for (double buffers : {1.0, 2.0}) {
            if (engines == 4.0) continue;  // the probe's own points stay unmeasured
            search::Assignment measured = {{"ENGINES", engines}, {"PACKET", 1024}, {"ROWS", 32}, {"BUFFERS", buffers}};
            model.observe("tiles", tmpl->evaluate_quantities(measured), device(measured), &measured);
        }
    }
    const double with_one = *model.predict("tiles", tmpl->evaluate_quantities(one), &one);
    const double with_two = *model.predict("tiles", tmpl->evaluate_quantities(two), &two);
    MESSAGE("BUFFERS=1 predicted " << with_one << ", BUFFERS=2 " << with_two << " (device: 20 % apart)");
    CHECK(with_two < with_one * 0.9);   // learnt, shrunk towards no effect, direction right
    CHECK(with_two > with_one * 0.75);  // and not over-learnt
    auto effects = model.param_effects("tiles");
    REQUIRE(effects.count("BUFFERS=2"));
    CHECK(effects.at("BUFFERS=2") < effects.at("BUFFERS=1"));
    // without params, or in another family, nothing of it applies
    CHECK(*model.predict("tiles", quantities) == doctest::Approx(*model.predict("tiles", tmpl->evaluate_quantities(two))));
    CHECK(model.param_effects("stream").empty());
}

TEST_CASE("the tuner tries a parameter value the family never measured before moves the model expects little from") {
    ScratchDir dir;
    test::write_toy_templates(dir.path);
    auto spec = config::load_template_config(dir.path / "toy_tiles.template.yaml");
    auto tmpl = search::Template::load(spec, toy_kernel(dir.path), "toy-target");
    search::CostModel model(synthetic_model());
    // Measured: BUFFERS=1 only (BUFFERS changes nothing the roofline sees), at several ENGINES.
    for (double engines : {1.0, 2.0, 4.0, 8.0}) {
        search::Assignment measured = {{"ENGINES", engines}, {"PACKET", 1024}, {"ROWS", 32}, {"BUFFERS", 1}};
        model.observe("tiles", tmpl->evaluate_quantities(measured), *model.predict_base(tmpl->evaluate_quantities(measured)),
                      &measured);
    }
    REQUIRE_FALSE(model.param_effects("tiles").empty());
    REQUIRE_FALSE(model.param_effects("tiles").count("BUFFERS=2"));
    search::Assignment champion = {{"ENGINES", 4}, {"PACKET", 1024}, {"ROWS", 32}, {"BUFFERS", 1}};
    search::SearchContext context;
    context.kernel = "toy";
    context.templates = {tmpl};
    context.cost_model = &model;
    context.champion = tmpl->instantiate(champion);
    context.champion_cycles = 1e6;
    context.max_proposals = 1000;
    const double champion_predicted = *model.predict("tiles", tmpl->evaluate_quantities(champion), &champion);
    auto proposals = search::make_tuner()->propose(context);
    auto found = std::find_if(proposals.begin(), proposals.end(),
                              [](const search::Proposal& proposal) { return proposal.move == "BUFFERS 1→2"; });
    REQUIRE(found != proposals.end());
    CHECK(found->reason.find("never measured") != std::string::npos);
    // predicted no faster than the champion, yet only moves predicted clearly faster, or other
    // one-parameter moves to new values, come first
    CHECK(*found->predicted_cycles == doctest::Approx(champion_predicted).epsilon(0.001));
    int before = 0;
    for (auto it = proposals.begin(); it != found; ++it, ++before) {
        const bool new_value = it->reason.find("never measured") != std::string::npos;
        if (new_value) CHECK(it->move.find(',') == std::string::npos);
        if (!new_value || *it->predicted_cycles > champion_predicted) {
            CHECK(*it->predicted_cycles < *found->predicted_cycles * std::exp(-0.03) * 1.006);
        }
    }
    MESSAGE("BUFFERS 1→2 is proposal " << before + 1 << " of " << proposals.size());
    CHECK(before < static_cast<int>(proposals.size()) / 2);
    // two-parameter moves get no such credit: they would confound the new value with another change
    for (const auto& proposal : proposals) {
        if (proposal.move.find(',') != std::string::npos) CHECK(proposal.reason.find("never measured") == std::string::npos);
    }
    // once measured, the value is no longer new
    search::Assignment two = champion;
    two["BUFFERS"] = 2;
    model.observe("tiles", tmpl->evaluate_quantities(two), champion_predicted, &two);
    for (const auto& proposal : search::make_tuner()->propose(context)) {
        if (proposal.move == "BUFFERS 1→2") CHECK(proposal.reason.find("never measured") == std::string::npos);
    }
}

TEST_CASE("with a wide static screen the tuner puts every one-parameter move of the champion in the screen's window") {
    ScratchDir dir;
    test::write_toy_templates(dir.path);
    auto spec = config::load_template_config(dir.path / "toy_tiles.template.yaml");
    auto tmpl = search::Template::load(spec, toy_kernel(dir.path), "toy-target");
    search::CostModel model(synthetic_model());
    search::SearchContext context;
    context.kernel = "toy";
    context.templates = {tmpl};
    context.cost_model = &model;
    context.champion = tmpl->instantiate({{"ENGINES", 4}, {"PACKET", 1024}, {"ROWS", 32}, {"BUFFERS", 1}});
    context.champion_cycles = 1e6;
    context.max_proposals = 1000;
    const auto all = search::make_tuner()->propose(context);
    std::set<std::string> singles;
    std::size_t last_single = 0;
    for (std::size_t idx = 0; idx < all.size(); ++idx) {
        if (all[idx].changed_params != 1) continue;
        singles.insert(all[idx].design.content_hash);
        last_single = idx;
    }
    REQUIRE(singles.size() >= 4);
    const int width = static_cast<int>(2 * singles.size());
    REQUIRE(last_single >= static_cast<std::size_t>(width));  // the model alone ranks some single beyond the window
    // no screen: the role's usual few, in the model's order
    context.max_proposals = 4;
    CHECK(search::make_tuner()->propose(context).size() == 4);
    // a screen of twice as many as there are singles: all of them in its window, the model's best others after
    context.screen_width = width;
    const auto screened = search::make_tuner()->propose(context);
    REQUIRE(screened.size() == static_cast<std::size_t>(width));
    std::size_t in_window = 0;
    for (const auto& proposal : screened) in_window += singles.count(proposal.design.content_hash);
    CHECK(in_window == singles.size());
    for (std::size_t idx = 0; idx < singles.size(); ++idx) CHECK(screened[idx].changed_params == 1);
    // a single already measured leaves its place to another move
    const std::string measured = *singles.begin();
    context.is_known = [&](const std::string& hash) { return hash == measured; };
    const auto after = search::make_tuner()->propose(context);
    CHECK(after.size() == static_cast<std::size_t>(width));
    for (const auto& proposal : after) CHECK(proposal.design.content_hash != measured);
}

TEST_CASE("cost model ranks designs by the synthetic hardware model and learns a family correction") {
    ScratchDir dir;
    test::write_toy_templates(dir.path);
    auto spec = config::load_template_config(dir.path / "toy_tiles.template.yaml");
    auto tmpl = search::Template::load(spec, toy_kernel(dir.path), "toy-target");
    search::CostModel model(synthetic_model());
    auto predict = [&](double engines, double rows) {
        search::Assignment assignment = {{"ENGINES", engines}, {"PACKET", 1024}, {"ROWS", rows}, {"BUFFERS", 1}};
        return *model.predict("tiles", tmpl->evaluate_quantities(assignment));
    };
    // More engines stream faster; more rows mean fewer commands and passes.
    CHECK(predict(8, 64) < predict(4, 64));
    CHECK(predict(4, 64) < predict(1, 64));
    CHECK(predict(8, 64) < predict(8, 8));
    // The weight-movement minimum bounds every prediction from below.
    CHECK(predict(8, 64) >= 1024.0 * 1024.0 / 1000.0);

    search::Assignment probe = {{"ENGINES", 2}, {"PACKET", 1024}, {"ROWS", 32}, {"BUFFERS", 1}};
    auto quantities = tmpl->evaluate_quantities(probe);
    double base = *model.predict_base(quantities);
    for (double engines : {1.0, 2.0, 4.0, 8.0}) {
        probe["ENGINES"] = engines;
        auto measured_quantities = tmpl->evaluate_quantities(probe);
        model.observe("tiles", measured_quantities, 2.0 * *model.predict_base(measured_quantities));
    }
    CHECK(model.correction("tiles").points == 4);
    CHECK(*model.predict("tiles", quantities) == doctest::Approx(2.0 * base).epsilon(0.01));
    CHECK(*model.predict("stream", quantities) == doctest::Approx(base));

    // The analyst names the dominant term.
    search::SearchContext context;
    context.kernel = "toy";
    context.templates = {tmpl};
    context.cost_model = &model;
    search::Assignment slow = {{"ENGINES", 1}, {"PACKET", 1024}, {"ROWS", 8}, {"BUFFERS", 1}};
    context.champion = tmpl->instantiate(slow);
    context.champion_cycles = model.terms(context.champion->quantities).combined() * 1.1;
    context.speed_of_light_cycles = 1024.0 * 1024.0 / 1000.0;
    auto attribution = search::attribute(context);
    // 256 commands × 500 cycles on one engine outweigh 128 passes × 600 cycles.
    CHECK(attribution.dominant == "dma_startup");
    CHECK(attribution.text.find("weight-movement minimum") != std::string::npos);
    auto analyst = search::make_analyst();
    auto proposals = analyst->propose(context);
    REQUIRE_FALSE(proposals.empty());
    CHECK(model.terms(proposals.front().design.quantities).value("dma_startup") < attribution.terms.value("dma_startup"));
    CHECK(proposals.front().reason.find("shrink dma_startup") != std::string::npos);
    for (const auto& proposal : proposals) {
        bool shrinks = model.terms(proposal.design.quantities).value("dma_startup") < attribution.terms.value("dma_startup");
        bool invisible = proposal.design.quantities == context.champion->quantities;
        CHECK((shrinks || invisible));
    }

    // When the model explains less than half of the champion, the moves it cannot see come first,
    // and the largest term it does see is still shrunk (not only invisible moves).
    context.champion_cycles = model.terms(context.champion->quantities).combined() * 3.0;
    auto unexplained = search::attribute(context);
    CHECK(unexplained.dominant == "unexplained");
    auto mixed = analyst->propose(context);
    REQUIRE(mixed.size() >= 2);
    CHECK(mixed.front().design.quantities == context.champion->quantities);
    int shrinking = 0;
    for (const auto& proposal : mixed) {
        if (proposal.design.quantities == context.champion->quantities) continue;
        CHECK(model.terms(proposal.design.quantities).value("dma_startup") < unexplained.terms.value("dma_startup"));
        CHECK(proposal.reason.find("shrink dma_startup") != std::string::npos);
        ++shrinking;
    }
    CHECK(shrinking > 0);
}

TEST_CASE("after a toolchain update the analyst first re-tunes the parameters that move a re-opened cost term") {
    ScratchDir dir;
    test::write_toy_templates(dir.path);
    auto spec = config::load_template_config(dir.path / "toy_tiles.template.yaml");
    auto tmpl = search::Template::load(spec, toy_kernel(dir.path), "toy-target");
    search::CostModel model(synthetic_model());
    search::SearchContext context;
    context.kernel = "toy";
    context.templates = {tmpl};
    context.cost_model = &model;
    const search::Assignment slow = {{"ENGINES", 1}, {"PACKET", 1024}, {"ROWS", 8}, {"BUFFERS", 1}};
    context.champion = tmpl->instantiate(slow);
    context.champion_cycles = model.terms(context.champion->quantities).combined() * 1.1;
    context.speed_of_light_cycles = 1024.0 * 1024.0 / 1000.0;
    auto analyst = search::make_analyst();
    // Without a re-opened term the analyst shrinks the dominant term (DMA startup here).
    auto usual = analyst->propose(context);
    REQUIRE_FALSE(usual.empty());
    CHECK_FALSE(usual.front().reopened);
    CHECK(usual.front().reason.find("shrink dma_startup") != std::string::npos);
    // The update moved the pass cost: moves that change the passes come first, none predicted
    // worse than the champion by more than 2 %.
    context.reopened_terms = {"pass_issue"};
    const double champion_passes = model.terms(context.champion->quantities).value("pass_issue");
    const auto champion_predicted = *model.predict("tiles", context.champion->quantities, &context.champion->params);
    auto reopened = analyst->propose(context);
    REQUIRE_FALSE(reopened.empty());
    for (const auto& proposal : reopened) {
        INFO(proposal.move);
        CHECK(proposal.reopened);
        CHECK(proposal.move.find("(re-opened: pass_issue)") != std::string::npos);
        CHECK(proposal.reason.find("toolchain update moved the chip's pass_issue term") != std::string::npos);
        CHECK(std::abs(model.terms(proposal.design.quantities).value("pass_issue") - champion_passes) >
              0.02 * champion_passes);
        CHECK(*model.predict("tiles", proposal.design.quantities, &proposal.design.params) <= champion_predicted * 1.02);
    }
    // A term no neighbour changes re-opens nothing: the analyst goes on as usual.
    context.reopened_terms = {"no_such_term"};
    auto none = analyst->propose(context);
    REQUIRE_FALSE(none.empty());
    CHECK_FALSE(none.front().reopened);
}

TEST_CASE("architect enters unmeasured families at the model's best point, then their defaults, then follows the measured level") {
    ScratchDir dir;
    test::write_toy_templates(dir.path);
    auto kernel = toy_kernel(dir.path);
    auto tiles = search::Template::load(config::load_template_config(dir.path / "toy_tiles.template.yaml"), kernel,
                                        "toy-target");
    auto stream = search::Template::load(config::load_template_config(dir.path / "toy_stream.template.yaml"), kernel,
                                         "toy-target");
    search::CostModel model(synthetic_model());
    search::SearchContext context;
    context.kernel = "toy";
    context.templates = {tiles, stream};
    context.cost_model = &model;
    context.max_proposals = 40;
    context.seed = 7;
    context.family_designs = {{"tiles", 1}};
    auto architect = search::make_architect();
    auto predicted = [&](const search::Template& tmpl, const search::Assignment& assignment) {
        auto quantities = tmpl.evaluate_quantities(assignment);
        for (auto& [name, value] : tmpl.evaluate_features(assignment)) quantities.emplace(name, value);
        return *model.predict(tmpl.family(), quantities, &assignment);
    };
    auto proposals = architect->propose(context);
    REQUIRE_FALSE(proposals.empty());
    // stream has no measurement yet: it is entered at the point the model predicts best (no
    // stream proposal is predicted clearly faster), no slower than its defaults, which follow.
    CHECK(proposals.front().design.family == "stream");
    CHECK(proposals.front().move.find("model's best point") != std::string::npos);
    REQUIRE(proposals.front().predicted_cycles.has_value());
    const double entry = *proposals.front().predicted_cycles;
    CHECK(entry <= predicted(*stream, stream->default_assignment()) * 1.005);
    const std::string stream_defaults = stream->instantiate(stream->default_assignment()).content_hash;
    bool defaults_proposed = proposals.front().design.content_hash == stream_defaults;
    for (const auto& proposal : proposals) {
        if (proposal.design.family != "stream" || !proposal.predicted_cycles) continue;
        CHECK(entry <= *proposal.predicted_cycles * 1.01);  // the tie width, once per snapped parameter at most
        defaults_proposed = defaults_proposed || proposal.design.content_hash == stream_defaults;
    }
    CHECK(defaults_proposed);

    // Neither measured: both families' entry points first (faster predicted first); a parameter
    // the model cannot see (tiles' BUFFERS changes no quantity) keeps its declared default.
    context.family_designs = {};
    proposals = architect->propose(context);
    REQUIRE(proposals.size() >= 3);
    CHECK(proposals[0].design.family != proposals[1].design.family);
    CHECK(proposals[0].move.find("model's best point") != std::string::npos);
    CHECK(proposals[1].move.find("model's best point") != std::string::npos);
    REQUIRE(proposals[0].predicted_cycles.has_value());
    REQUIRE(proposals[1].predicted_cycles.has_value());
    CHECK(*proposals[0].predicted_cycles <= *proposals[1].predicted_cycles);
    for (std::size_t idx = 0; idx < 2; ++idx) {
        if (proposals[idx].design.family == "tiles") CHECK(proposals[idx].design.params.at("BUFFERS") == 1.0);
    }
    const double tiles_entry = proposals[0].design.family == "tiles" ? *proposals[0].predicted_cycles
                                                                     : *proposals[1].predicted_cycles;
    CHECK(tiles_entry < predicted(*tiles, tiles->default_assignment()));  // the defaults are not its best point

    // Both measured; stream measured 3x its prediction, tiles as predicted: tiles gets the proposals.
    context.family_designs = {{"tiles", 2}, {"stream", 2}};
    for (double engines : {1.0, 2.0}) {
        auto quantities = stream->evaluate_quantities({{"ENGINES", engines}, {"SPLIT", 1}});
        model.observe("stream", quantities, 3.0 * *model.predict_base(quantities));
        search::Assignment tile = {{"ENGINES", engines}, {"PACKET", 1024}, {"ROWS", 32}, {"BUFFERS", 1}};
        auto tile_quantities = tiles->evaluate_quantities(tile);
        model.observe("tiles", tile_quantities, *model.predict_base(tile_quantities));
    }
    proposals = architect->propose(context);
    REQUIRE(proposals.size() >= 4);
    for (std::size_t idx = 0; idx < 4; ++idx) CHECK(proposals[idx].design.family == "tiles");

    // With a champion, the measured families' points the model predicts behind it are not proposed.
    search::Assignment champion_point = {{"ENGINES", 4}, {"PACKET", 4096}, {"ROWS", 32}, {"BUFFERS", 1}};
    context.champion = tiles->instantiate(champion_point);
    const double champion_predicted = predicted(*tiles, champion_point);
    proposals = architect->propose(context);
    for (const auto& proposal : proposals) {
        REQUIRE(proposal.predicted_cycles.has_value());
        CHECK(*proposal.predicted_cycles < champion_predicted * 0.99);
    }
}

TEST_CASE("scheduler shifts from architect to tuner with synthetic rewards") {
    search::Scheduler scheduler({"analyst", "architect", "tuner"});
    // Young campaign, nothing known: the architect acts first.
    CHECK(scheduler.pick(0.0, 1) == "architect");
    CHECK(scheduler.pick(1.0, 1) == "tuner");
    std::map<std::string, int> early;
    std::map<std::string, int> late;
    const int steps = 400;
    for (int step_idx = 0; step_idx < steps; ++step_idx) {
        double age = static_cast<double>(step_idx) / steps;
        std::string role = scheduler.pick(age, static_cast<std::uint64_t>(step_idx));
        REQUIRE_FALSE(role.empty());
        if (step_idx < 100) early[role] += 1;
        if (step_idx >= 300) late[role] += 1;
        // Architects win big early and stop winning; tuners win small gains steadily.
        bool accepted = false;
        double gain = 0.0;
        if (role == "architect" && age < 0.3 && step_idx % 2 == 0) { accepted = true; gain = 0.3; }
        if (role == "tuner" && step_idx % 3 == 0) { accepted = true; gain = 0.03; }
        scheduler.record(role, gain, 10.0, accepted);
    }
    INFO("early architect ", early["architect"], " tuner ", early["tuner"], "; late architect ", late["architect"],
         " tuner ", late["tuner"]);
    CHECK(early["architect"] > early["tuner"]);
    CHECK(late["tuner"] > late["architect"]);
    CHECK(late["tuner"] > 50);
    // Unavailable roles are skipped; none left gives "".
    CHECK(scheduler.pick(0.5, 3, {"architect", "tuner"}) == "analyst");
    CHECK(scheduler.pick(0.5, 3, {"architect", "tuner", "analyst"}).empty());
}

TEST_CASE("tree and champion path round-trip through the store") {
    ScratchDir dir;
    auto store = store::CampaignStore::open(dir.path / "campaign.db");
    store::TreeStore trees(store.database());
    auto design = [&](const std::string& hash, const std::string& tmpl) {
        store::DesignRecord record;
        record.content_hash = hash;
        record.target = "toy-target";
        record.kernel = "toy";
        record.shape = "n=1024";
        record.template_name = tmpl;
        record.params_json = tmpl == "baseline" ? "{}" : R"({"ENGINES":4})";
        return store.record_design(record);
    };
    std::int64_t base = design("h0", "baseline");
    std::int64_t child = design("h1", "toy_tiles");
    std::int64_t loser = design("h2", "toy_stream");
    std::int64_t grandchild = design("h3", "toy_tiles");
    auto edge = [&](std::int64_t id, std::optional<std::int64_t> parent, std::int64_t step, const std::string& verdict,
                    double cycles) {
        store::TreeEdgeRecord record;
        record.kernel = "toy";
        record.design_id = id;
        record.parent_design_id = parent;
        record.role = parent ? "architect" : "baseline";
        record.move = parent ? "family tiles" : "baseline";
        record.reason = "because";
        record.step = step;
        record.verdict = verdict;
        record.last_stage = "race";
        record.cycles = cycles;
        record.quantities_json = R"({"passes":64})";
        trees.record_edge(record);
    };
    edge(base, std::nullopt, 1, "accepted", 10000);
    edge(child, base, 2, "accepted", 2000);
    edge(loser, child, 3, "rejected", 2500);
    edge(grandchild, child, 4, "accepted", 1000);
    CHECK_THROWS_AS(edge(child, base, 5, "accepted", 1), Error);
    for (auto [id, step, cycles] : {std::tuple{base, 1, 10000.0}, {child, 2, 2000.0}, {grandchild, 4, 1000.0}}) {
        store::ChampionRecord link;
        link.kernel = "toy";
        link.design_id = id;
        link.step = step;
        link.cycles = cycles;
        trees.push_champion(link);
    }
    CHECK(trees.has_edge_for_hash("toy", "h2"));
    CHECK_FALSE(trees.has_edge_for_hash("other", "h2"));
    CHECK(trees.list_kernels() == std::vector<std::string>{"toy"});

    auto tree = search::load_tree(store, "toy");
    REQUIRE(tree.nodes.size() == 4);
    REQUIRE(tree.roots.size() == 1);
    CHECK(tree.nodes[tree.roots[0]].children.size() == 1);
    CHECK(tree.champion_path.size() == 3);
    CHECK(*tree.baseline_cycles == 10000);
    CHECK(*tree.champion_cycles == 1000);
    CHECK(tree.nodes[3].is_champion);
    CHECK_FALSE(tree.nodes[2].on_champion_path);

    std::string text = search::render_tree_text(store, "toy", true);
    CHECK(text.find("10.00x") != std::string::npos);
    CHECK(text.find("** ") != std::string::npos);
    CHECK(text.find("#3 toy_stream{ENGINES=4}") != std::string::npos);
    CHECK(text.find("why: because") != std::string::npos);

    auto json = search::tree_json(tree);
    CHECK(json["nodes"].size() == 4);
    CHECK(json["champion_path"].size() == 3);
    CHECK(json["nodes"][1]["parent_design_id"] == base);
    CHECK(json["nodes"][1]["quantities"]["passes"] == 64);
    std::string dot = search::tree_dot(tree);
    CHECK(dot.find(fmt::format("d{} -> d{}", base, child)) != std::string::npos);

    auto exported = search::export_trees(store, dir.path / "trees");
    CHECK(std::filesystem::exists(dir.path / "trees" / "toy.json"));
    CHECK(std::filesystem::exists(dir.path / "trees" / "toy.dot"));
    CHECK((exported.svg_note.empty() == std::filesystem::exists(dir.path / "trees" / "toy.svg")));

    // A dethroned champion leaves the active path.
    auto current = trees.current_champion("toy");
    REQUIRE(current);
    trees.end_champion(current->id, "re-validation failed");
    CHECK(trees.current_champion("toy")->design_id == child);
    CHECK(trees.champion_path("toy", true).size() == 3);
    CHECK(trees.champion_path("toy").size() == 2);
}

namespace {

/// The roofline as src/search/cost_model.cpp computed it before the terms became npu-sim's data,
/// plus the switch term added since (a slice's switch copies in series on its port).
std::map<std::string, double> reference_terms(const knowledge::HardwareModel& hw, const std::map<std::string, double>& q) {
    auto get = [&](const char* name, double fallback) {
        auto found = q.find(name);
        return found == q.end() || !std::isfinite(found->second) ? fallback : found->second;
    };
    std::map<std::string, double> terms = {{"hbm", 0.0}, {"dma_stream", 0.0}, {"dma_startup", 0.0}, {"dma_packets", 0.0}, {"pass_issue", 0.0}, {"switch", 0.0}};
    const double weight_bytes = get("weight_bytes", 0.0);
    const double engines = std::max(1.0, get("engine_index", 0.0) + 1.0);
    const double slices = std::max(1.0, get("slice", 0.0) + 1.0);
    const double engines_used = engines * std::max(1.0, get("clusters", 1.0));
    if (hw.value("sustained_bytes_per_cycle") > 0.0) terms["hbm"] = weight_bytes / hw.value("sustained_bytes_per_cycle");
    const double bandwidth = hw.value("dma_effective_bytes_per_cycle") > 0.0 ? hw.value("dma_effective_bytes_per_cycle")
                                                                             : hw.value("dma_engine_bytes_per_cycle");
    if (bandwidth > 0.0) terms["dma_stream"] = weight_bytes / (engines_used * bandwidth);
    terms["dma_startup"] = get("dma_commands", 0.0) * hw.value("dma_startup_cycles") / engines_used;
    double packet = get("packet_bytes", 0.0);
    if (hw.value("dma_max_packet_bytes") > 0.0 && packet > hw.value("dma_max_packet_bytes")) packet = hw.value("dma_max_packet_bytes");
    if (packet > 0.0) terms["dma_packets"] = weight_bytes / packet * hw.value("dma_packet_overhead_cycles") / engines_used;
    terms["pass_issue"] = get("passes", 0.0) * hw.value("pass_issue_cycles") / slices;
    if (hw.value("switch_bytes_per_cycle") > 0.0)
        terms["switch"] = get("switch_copies", 0.0) * hw.value("switch_startup_cycles") + get("switch_bytes", 0.0) / hw.value("switch_bytes_per_cycle");
    return terms;
}

}  // namespace

TEST_CASE("cost model: npu-sim's declared terms give the predictions of the former fixed roofline") {
    knowledge::HardwareModel hw;
    hw.set("sustained_bytes_per_cycle", 1000.0);
    hw.set("dma_engine_bytes_per_cycle", 100.0);
    hw.set("dma_effective_bytes_per_cycle", 80.0);
    hw.set("dma_startup_cycles", 500.0);
    hw.set("dma_packet_overhead_cycles", 4.0);
    hw.set("dma_max_packet_bytes", 4096.0);
    hw.set("pass_issue_cycles", 600.0);
    hw.set("switch_startup_cycles", 300.0);
    hw.set("switch_bytes_per_cycle", 16.0);
    hw.cost_model = std::make_shared<config::CostModelSpec>(
        config::load_cost_model_config(std::filesystem::path(NPUOPT_SOURCE_DIR) / "knowledge/npu-sim/cost_model.yaml"));
    search::CostModel model(hw);

    // By hand: 8 engines in use (4 per cluster, 2 clusters), 8 slices, packets capped at 4096.
    std::map<std::string, double> quantities = {{"weight_bytes", 1e6}, {"dma_commands", 100}, {"passes", 50},
                                                {"packet_bytes", 8192}, {"engine_index", 3}, {"slice", 7},
                                                {"clusters", 2}};
    const auto terms = model.terms(quantities);
    CHECK(terms.value("hbm") == 1000.0);
    CHECK(terms.value("dma_stream") == 1562.5);
    CHECK(terms.value("dma_startup") == 6250.0);
    CHECK(terms.value("dma_packets") == 122.0703125);
    CHECK(terms.value("pass_issue") == 3750.0);
    CHECK(terms.value("switch") == 0.0);  // no switch copies declared
    // 10 copies of 800 bytes in all from one slice: 10 startups + 8000 / 16 bytes per cycle
    auto with_switch = quantities;
    with_switch["switch_copies"] = 10;
    with_switch["switch_bytes"] = 8000;
    CHECK(model.terms(with_switch).value("switch") == 3500.0);
    // Largest group (dma_startup + dma_packets = 6372.0703125) plus a tenth of the others (6312.5).
    CHECK(terms.combined() == doctest::Approx(7003.3203125).epsilon(1e-15));
    CHECK(terms.dominant() == "dma_startup");
    REQUIRE(model.term_spec("dma_packets") != nullptr);
    CHECK(model.term_spec("dma_packets")->reduce == std::vector<std::string>{"packet_bytes"});

    // Bit for bit the former roofline over many designs, including absent and unusable quantities.
    std::mt19937_64 random(17);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (int trial = 0; trial < 500; ++trial) {
        std::map<std::string, double> q;
        auto maybe = [&](const char* name, double value) {
            const double pick = unit(random);
            if (pick < 0.1) return;
            q[name] = pick < 0.15 ? std::nan("") : value;
        };
        maybe("weight_bytes", std::floor(unit(random) * 5e7));
        maybe("dma_commands", std::floor(unit(random) * 5000));
        maybe("passes", std::floor(unit(random) * 2000));
        maybe("packet_bytes", std::pow(2.0, std::floor(unit(random) * 6) + 9));
        maybe("engine_index", std::floor(unit(random) * 8));
        maybe("slice", std::floor(unit(random) * 16));
        maybe("clusters", std::floor(unit(random) * 3));
        maybe("switch_copies", std::floor(unit(random) * 40));
        maybe("switch_bytes", std::floor(unit(random) * 1e5));
        const auto reference = reference_terms(hw, q);
        const auto now = model.terms(q).as_map();
        INFO(trial);
        CHECK(now == reference);
        const std::vector<double> groups = {reference.at("hbm"), reference.at("dma_stream"),
                                            reference.at("dma_startup") + reference.at("dma_packets"), reference.at("pass_issue"),
                                            reference.at("switch")};
        const double largest = *std::max_element(groups.begin(), groups.end());
        double total = 0.0;
        for (double value : groups) total += value;
        CHECK(model.terms(q).combined() == largest + 0.1 * (total - largest));
    }
}

TEST_CASE("cost model: a design whose commands go to every engine or that runs on fewer slices than its highest index is predicted with what it uses") {
    knowledge::HardwareModel hw;
    hw.set("sustained_bytes_per_cycle", 1000.0);
    hw.set("dma_engine_bytes_per_cycle", 100.0);
    hw.set("dma_startup_cycles", 500.0);
    hw.set("pass_issue_cycles", 600.0);
    hw.set("engines_per_cluster", 7.0);
    hw.cost_model = std::make_shared<config::CostModelSpec>(
        config::load_cost_model_config(std::filesystem::path(NPUOPT_SOURCE_DIR) / "knowledge/npu-sim/cost_model.yaml"));
    search::CostModel model(hw);

    // 8 slices of two clusters (slices 0-3 and 8-11), every command of a slice on its own engine: 4 per cluster.
    std::map<std::string, double> own = {{"weight_bytes", 1.4e6}, {"dma_commands", 140}, {"passes", 96},
                                         {"engines_requested", 4}, {"slice", 11}, {"clusters", 2}};
    CHECK(model.terms(own).value("dma_stream") == 1750.0);  // 1.4e6 / (8 engines x 100)
    CHECK(model.terms(own).value("dma_startup") == 8750.0);
    CHECK(model.terms(own).value("pass_issue") == 4800.0);  // 96 x 600 over slices 0..11: 12, four too many
    // The same tiles, the commands spread over the cluster (rotated, least-loaded, or the short ones on
    // the engines the slices leave free): the startups are paid on the 7 engines per cluster the
    // microbenchmarks found; the weights' own engines stay 4 per cluster.
    auto spread = own;
    spread["commands_on_all_engines"] = 1;
    CHECK(model.terms(spread).value("dma_stream") == 1750.0);
    CHECK(model.terms(spread).value("dma_startup") == 5000.0);  // 140 x 500 / 14
    // Passes over the 8 slices the design says it uses, not the 12 up to its highest index.
    spread["slices_in_use"] = 8;
    CHECK(model.terms(spread).value("pass_issue") == 7200.0);
    CHECK(model.terms(spread).dominant() == "pass_issue");
    CHECK(model.terms(own).dominant() == "dma_startup");

    // No engine count measured: the startups are counted on the engines the design asks for.
    knowledge::HardwareModel unmeasured = hw;
    unmeasured.set("engines_per_cluster", 0.0);
    search::CostModel blind(unmeasured);
    CHECK(blind.terms(spread).value("dma_startup") == 8750.0);
}

TEST_CASE("cost model: a term reading an undeclared quantity is an error naming file, line and key") {
    ScratchDir dir;
    write_text(dir.path / "cost_model.yaml", "version: 1\nquantities: {bytes: 0}\nterms:\n  stream: {expression: \"bytes / hw.rate + loads\"}\n");
    knowledge::HardwareModel hw;
    hw.cost_model = std::make_shared<config::CostModelSpec>(config::load_cost_model_config(dir.path / "cost_model.yaml"));
    auto message = error_of([&] { search::CostModel model(hw); });
    CHECK(message.find("cost_model.yaml:4:") != std::string::npos);
    CHECK(message.find("terms.stream.expression") != std::string::npos);
    CHECK(message.find("'loads'") != std::string::npos);
}

TEST_CASE("cost model: a template's own terms add to the target's for its family and replace one of the same name") {
    ScratchDir dir;
    write_text(dir.path / "cost_model.yaml",
               "version: 1\nquantities: {bytes: 0, passes: 0}\nlet: {per_pass: \"hw.pass_cycles\"}\n"
               "terms:\n  stream: {expression: \"bytes / hw.rate\"}\n  issue: {expression: \"passes * per_pass\"}\n"
               "combine: {overlap: 0}\n");
    write_text(dir.path / "tiles.rs", "fn main() {}\n");
    write_text(dir.path / "tiles.template.yaml",
               "template: tiles\nkernel: k\nfamily: tiles\nsource: tiles.rs\nparams: {ROWS: {values: [8], default: 8}}\n"
               "terms:\n  epilogue: {expression: \"passes * per_pass * 4\", lever: \"fewer passes\", reduce: [passes]}\n"
               "  issue: {expression: \"passes * per_pass / 2\"}\n");
    const config::TemplateSpec spec = config::load_template_config(dir.path / "tiles.template.yaml");
    REQUIRE(spec.terms.size() == 2);
    CHECK(spec.terms[0].name == "epilogue");
    CHECK(spec.terms[0].lever == "fewer passes");
    knowledge::HardwareModel hw;
    hw.set("rate", 10.0);
    hw.set("pass_cycles", 100.0);
    hw.cost_model = std::make_shared<config::CostModelSpec>(config::load_cost_model_config(dir.path / "cost_model.yaml"));
    search::CostModel model(hw);
    model.add_family_terms("tiles", spec.terms);
    const std::map<std::string, double> q = {{"bytes", 10000.0}, {"passes", 30.0}};
    // The target's terms alone: max(stream 1000, issue 3000) = 3000.
    CHECK(model.terms(q).combined() == doctest::Approx(3000.0));
    CHECK(*model.predict("other", q) == doctest::Approx(3000.0));
    // The family's: issue replaced (1500), epilogue added (12000): 12000, for its designs only.
    const search::CostTerms own = model.terms(q, "tiles");
    CHECK(own.value("issue") == doctest::Approx(1500.0));
    CHECK(own.value("epilogue") == doctest::Approx(12000.0));
    CHECK(own.names.size() == 3);
    CHECK(*model.predict("tiles", q) == doctest::Approx(12000.0));

    // A template term that reads a name the target does not declare names the template and the key.
    write_text(dir.path / "bad.template.yaml",
               "template: bad\nkernel: k\nfamily: bad\nsource: tiles.rs\nparams: {ROWS: {values: [8], default: 8}}\n"
               "terms:\n  extra: {expression: \"loads * 2\"}\n");
    const config::TemplateSpec bad = config::load_template_config(dir.path / "bad.template.yaml");
    auto message = error_of([&] { model.add_family_terms("bad", bad.terms); });
    CHECK(message.find("bad.template.yaml:7:") != std::string::npos);
    CHECK(message.find("terms.extra.expression") != std::string::npos);
    CHECK(message.find("'loads'") != std::string::npos);
}

namespace {
/// Two searches of the toy tiles family from the same champion (off its defaults), one to run
/// without a screen and one with it, and a late step's request from that champion.
struct ScreenPair {
    ScratchDir dir;
    config::KernelSpec kernel;
    std::shared_ptr<search::Template> tiles;
    search::Design champion;
    search::KernelSearch plain{"toy", search::make_heuristic_roles(), search::CostModel(synthetic_model())};
    search::KernelSearch screened{"toy", search::make_heuristic_roles(), search::CostModel(synthetic_model())};
    ScreenPair() {
        test::write_toy_templates(dir.path);
        kernel = toy_kernel(dir.path);
        tiles = search::Template::load(config::load_template_config(dir.path / "toy_tiles.template.yaml"), kernel, "toy-target");
        champion = tiles->instantiate({{"ENGINES", 4}, {"PACKET", 1024}, {"ROWS", 32}, {"BUFFERS", 1}});
        plain.mark_known(champion.content_hash);
        screened.mark_known(champion.content_hash);
    }
    search::ProposalRequest make_request() const {
        search::ProposalRequest request;
        request.templates = {tiles};
        request.champion = champion;
        request.champion_cycles = 1e6;
        request.age = 0.9;
        request.seed = 11;
        request.pick_seed = [](std::size_t attempt) { return static_cast<std::uint64_t>(3 + attempt); };
        return request;
    }
};
}  // namespace

TEST_CASE("a screen whose toolchain has no schedule goes blind and the search proposes as without one") {
    ScreenPair pair;
    search::KernelSearch& plain = pair.plain;
    search::KernelSearch& screened = pair.screened;
    auto make_request = [&] { return pair.make_request(); };
    int calls = 0;
    search::ProposalRequest blind_request = make_request();
    blind_request.screen_width = 64;
    blind_request.screen = [&](const search::Proposal&) {
        ++calls;
        return search::ScreenEstimate{std::nullopt, false, "schedule: unsupported", false};
    };
    REQUIRE(screened.next_proposal(blind_request).has_value());
    CHECK(calls == static_cast<int>(search::ScheduleScreen::k_blind_after));
    CHECK(screened.screen().blind());
    // blind now: no more calls, and the proposal is the one the search makes with no screen
    const auto without = plain.next_proposal(make_request());
    const auto with = screened.next_proposal(blind_request);
    REQUIRE(without.has_value());
    REQUIRE(with.has_value());
    CHECK(with->design.content_hash == without->design.content_hash);
    CHECK(calls == static_cast<int>(search::ScheduleScreen::k_blind_after));
}

TEST_CASE("a step whose screen budget is closed proposes as without a screen and makes no call") {
    ScreenPair pair;
    search::KernelSearch& plain = pair.plain;
    search::KernelSearch& screened = pair.screened;
    auto make_request = [&] { return pair.make_request(); };
    int calls = 0;
    bool open = false;
    search::ProposalRequest request = make_request();
    request.screen_width = 64;
    request.screen_open = [&] { return open; };
    request.screen = [&](const search::Proposal& asked) {
        ++calls;  // a schedule that prefers the last proposal it sees
        return search::ScreenEstimate{1.0 / static_cast<double>(calls) * 1e3 * static_cast<double>(asked.design.content_hash.size()),
                                      false, "", false};
    };
    const auto without = plain.next_proposal(make_request());
    const auto closed = screened.next_proposal(request);
    REQUIRE(without.has_value());
    REQUIRE(closed.has_value());
    CHECK(calls == 0);
    CHECK(closed->design.content_hash == without->design.content_hash);
    CHECK(closed->reason.find("static schedule screen") == std::string::npos);
    // open: the window is screened (the wide one: every one-parameter move is asked)
    open = true;
    const auto screened_step = screened.next_proposal(request);
    REQUIRE(screened_step.has_value());
    CHECK(calls > 4);
    CHECK(screened_step->reason.find("static schedule screen") != std::string::npos);
}

namespace {
/// A role that proposes the points it is given, in order, skipping those the search knows.
class ListRole final : public search::Role {
public:
    ListRole(std::shared_ptr<search::Template> family, std::vector<search::Assignment> points)
        : m_family(std::move(family)), m_points(std::move(points)) {}
    std::string name() const override { return "sampler"; }
    std::vector<search::Proposal> propose(const search::SearchContext& context) override {
        for (const auto& point : m_points) {
            search::Proposal proposal;
            proposal.design = m_family->instantiate(point);
            if (context.is_known && context.is_known(proposal.design.content_hash)) continue;
            proposal.move = "listed";
            return {proposal};
        }
        return {};
    }

private:
    std::shared_ptr<search::Template> m_family;
    std::vector<search::Assignment> m_points;
};
}  // namespace

TEST_CASE("a search without an architect gets no defaults check and is not ended by a role it does not have") {
    ScratchDir dir;
    test::write_toy_templates(dir.path);
    const auto kernel = toy_kernel(dir.path);
    auto tiles = search::Template::load(config::load_template_config(dir.path / "toy_tiles.template.yaml"), kernel, "toy-target");
    const search::Assignment departed = {{"ENGINES", 4}, {"PACKET", 1024}, {"ROWS", 32}, {"BUFFERS", 1}};
    REQUIRE(departed != tiles->default_assignment());
    std::vector<search::Assignment> points;
    for (const auto& [assignment, move] : search::neighbour_assignments(*tiles, departed)) {
        if (assignment != tiles->default_assignment()) points.push_back(assignment);
    }
    REQUIRE(points.size() >= 2);
    std::vector<std::unique_ptr<search::Role>> roles;
    roles.push_back(std::make_unique<ListRole>(tiles, points));
    search::KernelSearch search("toy", std::move(roles), search::CostModel(synthetic_model()));
    const search::Design champion = tiles->instantiate(departed);
    search.mark_known(champion.content_hash);
    // the scheduler has been paid under a name no role of this search has, and paid well
    search::StepFeedback foreign;
    foreign.kernel = "toy";
    foreign.proposal.design = champion;
    foreign.proposal.role = "architect";
    foreign.verdict = eval::StepVerdict::accepted;
    foreign.became_champion = true;
    foreign.cycles = 500.0;
    foreign.champion_cycles_before = 1000.0;
    foreign.device_secs = 1.0;
    search.notify(foreign);
    search::StepFeedback poor;
    poor.kernel = "toy";
    poor.proposal.design = tiles->instantiate(points.back());
    poor.proposal.role = "sampler";
    poor.verdict = eval::StepVerdict::rejected;
    poor.cycles = 900.0;
    poor.champion_cycles_before = 500.0;
    poor.device_secs = 1.0;
    search.notify(poor);

    search::ProposalRequest request;
    request.templates = {tiles};
    request.champion = champion;
    request.champion_cycles = 500.0;
    request.age = 0.5;
    request.pick_seed = [](std::size_t attempt) { return static_cast<std::uint64_t>(5 + attempt); };
    auto next = search.next_proposal(request);
    REQUIRE(next.has_value());  // before session 27: nullopt, the kernel exhausted
    CHECK(next->role == "sampler");
    CHECK(next->design.content_hash != tiles->instantiate(tiles->default_assignment()).content_hash);
}

TEST_CASE("an unmeasured family is entered after three measured steps without a gain, and only while one is left") {
    ScratchDir dir;
    test::write_toy_templates(dir.path);
    const auto kernel = toy_kernel(dir.path);
    auto tiles = search::Template::load(config::load_template_config(dir.path / "toy_tiles.template.yaml"), kernel, "toy-target");
    auto stream = search::Template::load(config::load_template_config(dir.path / "toy_stream.template.yaml"), kernel, "toy-target");
    search::KernelSearch search("toy", search::make_heuristic_roles(), search::CostModel(synthetic_model()));
    const search::Design champion = tiles->instantiate(tiles->default_assignment());
    search.mark_known(champion.content_hash);
    search::ProposalRequest request;
    request.templates = {tiles, stream};
    request.champion = champion;
    request.champion_cycles = 1000.0;
    request.age = 0.9;  // late: the scheduler's prior favours the tuner
    request.pick_seed = [](std::size_t attempt) { return static_cast<std::uint64_t>(7 + attempt); };
    auto measured_no_gain = [&](const search::Design& design, const std::string& role) {
        search::StepFeedback feedback;
        feedback.kernel = "toy";
        feedback.proposal.design = design;
        feedback.proposal.role = role;
        feedback.verdict = eval::StepVerdict::rejected;
        feedback.cycles = 1100.0;
        feedback.champion_cycles_before = 1000.0;
        feedback.device_secs = 1.0;
        search.notify(feedback);
    };
    // three measured neighbours of the tiles champion, none faster
    int step = 0;
    for (const auto& [assignment, move] : search::neighbour_assignments(*tiles, champion.params)) {
        if (step == 3) break;
        request.seed = static_cast<std::uint64_t>(step);
        measured_no_gain(tiles->instantiate(assignment), "tuner");
        ++step;
    }
    auto forced = search.next_proposal(request);
    REQUIRE(forced.has_value());
    INFO(forced->reason);
    CHECK(forced->role == "architect");
    CHECK(forced->design.family == "stream");
    CHECK(forced->reason.find("family stream has no measurement") != std::string::npos);
    // once stream is measured no family is left unmeasured: the scheduler picks again
    measured_no_gain(forced->design, "architect");
    for (int more = 0; more < 3; ++more) {
        request.seed = static_cast<std::uint64_t>(100 + more);
        auto next = search.next_proposal(request);
        REQUIRE(next.has_value());
        CHECK(next->reason.find("has no measurement") == std::string::npos);
        measured_no_gain(next->design, next->role);
    }
}

TEST_CASE("the tuner walks on beyond the champion's neighbours once all of them are measured, and stops when the family is") {
    ScratchDir dir;
    test::write_toy_templates(dir.path);
    auto tmpl = search::Template::load(config::load_template_config(dir.path / "toy_tiles.template.yaml"),
                                       toy_kernel(dir.path), "toy-target");
    search::CostModel model(synthetic_model());
    search::SearchContext context;
    context.kernel = "toy";
    context.templates = {tmpl};
    context.cost_model = &model;
    const search::Assignment base = {{"ENGINES", 2}, {"PACKET", 1024}, {"ROWS", 16}, {"BUFFERS", 1}};
    context.champion = tmpl->instantiate(base);
    context.champion_cycles = 1e6;
    context.max_proposals = 200;

    std::set<std::string> known = {context.champion->content_hash};
    std::set<search::Assignment> neighbourhood;
    for (const auto& [assignment, move] : search::neighbour_assignments(*tmpl, base)) {
        known.insert(tmpl->instantiate(assignment).content_hash);
        neighbourhood.insert(assignment);
    }
    context.is_known = [&](const std::string& hash) { return known.count(hash) > 0; };
    auto tuner = search::make_tuner();
    const auto farther = tuner->propose(context);
    REQUIRE_FALSE(farther.empty());  // before session 28: empty, and the kernel ended with runs left
    for (const auto& proposal : farther) {
        CHECK(known.count(proposal.design.content_hash) == 0);
        CHECK(neighbourhood.count(proposal.design.params) == 0);
        CHECK_FALSE(tmpl->check_constraints(proposal.design.params).has_value());
        int changed = 0;
        for (const auto& [name, value] : proposal.design.params) changed += base.at(name) != value;
        CHECK(changed >= 2);
        CHECK(proposal.reason.find("neighbours are all measured") != std::string::npos);
    }

    // every design of the family measured: nothing left to propose
    for (double engines : {1, 2, 4, 8}) {
        for (double packet : {256, 1024, 4096}) {
            for (double rows : {8, 16, 32, 64}) {
                for (double buffers : {1, 2}) {
                    known.insert(tmpl->instantiate({{"ENGINES", engines}, {"PACKET", packet}, {"ROWS", rows}, {"BUFFERS", buffers}})
                                     .content_hash);
                }
            }
        }
    }
    CHECK(tuner->propose(context).empty());
}
