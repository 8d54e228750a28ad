// The static-schedule screen: the first proposals of a role are estimated by the toolchain's
// schedule, whose bias is learnt per family; the combined estimate reorders them. A fake
// estimate in memory stands for the toolchain.

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "search/screen.hpp"

using namespace npuopt;

namespace {

search::Proposal proposal(const std::string& hash, const std::string& family, double model_cycles) {
    search::Proposal made;
    made.design.kernel = "gemv";
    made.design.template_name = family + "_template";
    made.design.family = family;
    made.design.content_hash = hash;
    made.move = "move " + hash;
    made.reason = "ranked by the model";
    made.predicted_cycles = model_cycles;
    return made;
}

struct FakeSchedule {
    std::map<std::string, search::ScreenEstimate> by_hash;
    std::map<std::string, int> calls;
    search::ScreenFn fn() {
        return [this](const search::Proposal& asked) {
            ++calls[asked.design.content_hash];
            auto found = by_hash.find(asked.design.content_hash);
            if (found == by_hash.end()) return search::ScreenEstimate{std::nullopt, false, "unknown design", false};
            return found->second;
        };
    }
    void set(const std::string& hash, double cycles) { by_hash[hash] = {cycles, false, "", false}; }
};

std::vector<std::string> hashes(const std::vector<search::Proposal>& proposals) {
    std::vector<std::string> order;
    for (const auto& item : proposals) order.push_back(item.design.content_hash);
    return order;
}

}  // namespace

TEST_CASE("schedule screen: with nothing measured, the schedule and the model count alike") {
    search::ScheduleScreen screen;
    FakeSchedule schedule;
    // model: a < b < c < d; schedule: c far ahead. Geometric means: a 141, b 128, c 69, d 197.
    schedule.set("a", 200);
    schedule.set("b", 150);
    schedule.set("c", 40);
    schedule.set("d", 300);
    std::vector<search::Proposal> proposals = {proposal("a", "tiles", 100), proposal("b", "tiles", 110),
                                               proposal("c", "tiles", 120), proposal("d", "tiles", 130),
                                               proposal("e", "tiles", 140)};
    screen.rank(proposals, 4, schedule.fn());
    CHECK(hashes(proposals) == std::vector<std::string>{"c", "b", "a", "d", "e"});  // e is past the width
    CHECK(schedule.calls.count("e") == 0);
    CHECK(proposals.front().reason.find("static schedule screen of 4 candidates") != std::string::npos);
    CHECK(proposals.front().reason.find("the model ranked it #3") != std::string::npos);
    CHECK(proposals.front().predicted_cycles == doctest::Approx(120));  // the model's own prediction stays

    // asked again, the estimates come from the cache
    std::vector<search::Proposal> again = {proposal("a", "tiles", 100), proposal("c", "tiles", 120)};
    screen.rank(again, 4, schedule.fn());
    CHECK(schedule.calls["a"] == 1);
    CHECK(schedule.calls["c"] == 1);
    CHECK(screen.calls() == 4);
}

TEST_CASE("schedule screen: an illegal design goes last, one without an estimate keeps the model's word") {
    search::ScheduleScreen screen;
    FakeSchedule schedule;
    schedule.by_hash["bad"] = {std::nullopt, true, "E0201 DM capacity"};
    schedule.set("ok", 400);
    // "blind" has no schedule estimate: ranked by the model's 150 alone
    std::vector<search::Proposal> proposals = {proposal("bad", "tiles", 50), proposal("ok", "tiles", 100),
                                               proposal("blind", "tiles", 150)};
    screen.rank(proposals, 3, schedule.fn());
    CHECK(hashes(proposals) == std::vector<std::string>{"blind", "ok", "bad"});  // ok: sqrt(400*100) = 200

    // nothing screened when a written design leads, or the width is below two
    std::vector<search::Proposal> written = {proposal("w", "tiles", 100), proposal("ok", "tiles", 90)};
    written.front().design.from_source = true;
    screen.rank(written, 4, schedule.fn());
    CHECK(hashes(written) == std::vector<std::string>{"w", "ok"});
    std::vector<search::Proposal> narrow = {proposal("ok", "tiles", 100), proposal("bad", "tiles", 90)};
    screen.rank(narrow, 1, schedule.fn());
    CHECK(hashes(narrow) == std::vector<std::string>{"ok", "bad"});
}

TEST_CASE("schedule screen: with no schedule for any proposal in the window the role's order stands") {
    search::ScheduleScreen screen;
    FakeSchedule schedule;  // knows no design: a toolchain without a schedule command
    // the role put an exploring move first although the model predicts it slowest
    std::vector<search::Proposal> proposals = {proposal("explore", "tiles", 300), proposal("b", "tiles", 100),
                                               proposal("c", "tiles", 200)};
    screen.rank(proposals, 3, schedule.fn());
    CHECK(hashes(proposals) == std::vector<std::string>{"explore", "b", "c"});
    CHECK(screen.uninformed_rankings() == 1);
    CHECK(proposals.front().reason == "ranked by the model");  // nothing claimed of a screen
    // one schedule in the window is enough to rank it again
    schedule.set("c", 20);
    search::ScheduleScreen informed;
    informed.rank(proposals, 3, schedule.fn());
    CHECK(hashes(proposals).front() == "c");
    CHECK(informed.uninformed_rankings() == 0);
}

TEST_CASE("schedule screen: a toolchain whose schedule never answers is called no more") {
    search::ScheduleScreen screen;
    FakeSchedule schedule;  // answers nothing, as a target whose schedule is unsupported
    std::vector<search::Proposal> proposals;
    for (int idx = 0; idx < 20; ++idx) proposals.push_back(proposal(fmt::format("p{}", idx), "tiles", 100.0 + idx));
    CHECK_FALSE(screen.blind());
    screen.rank(proposals, 20, schedule.fn());
    CHECK(screen.calls() == search::ScheduleScreen::k_blind_after);  // it stopped asking mid-window
    CHECK(screen.blind());
    CHECK(hashes(proposals).front() == "p0");
    screen.rank(proposals, 20, schedule.fn());
    CHECK(screen.calls() == search::ScheduleScreen::k_blind_after);

    // one answer among the first calls and the screen keeps asking
    search::ScheduleScreen answered;
    FakeSchedule one;
    one.set("p3", 50);
    answered.rank(proposals, 20, one.fn());
    CHECK_FALSE(answered.blind());
    CHECK(answered.calls() == 20);
    CHECK(hashes(proposals).front() == "p3");
}

TEST_CASE("schedule screen: a window whose budget runs out asks no more and keeps the unasked for later") {
    search::ScheduleScreen screen;
    FakeSchedule schedule;
    schedule.set("a", 300);
    schedule.set("b", 200);
    schedule.set("c", 40);
    schedule.set("d", 50);
    int budget = 2;  // calls the campaign still affords
    int asked = 0;
    search::ScreenFn metered = [&](const search::Proposal& item) {
        ++asked;
        if (budget <= 0) return search::ScreenEstimate{std::nullopt, false, "the screen's share is spent", true};
        --budget;
        return schedule.fn()(item);
    };
    std::vector<search::Proposal> proposals = {proposal("a", "tiles", 100), proposal("b", "tiles", 110),
                                               proposal("c", "tiles", 120), proposal("d", "tiles", 130)};
    screen.rank(proposals, 4, metered);
    CHECK(asked == 3);             // a and b answered; c found the budget spent, d was not asked
    CHECK(screen.calls() == 2);    // the unasked are no calls
    CHECK(screen.unasked() == 2);
    CHECK_FALSE(screen.blind());
    // c and d keep the model's word (120, 130); b's combined estimate (148) beats a's (173)
    CHECK(hashes(proposals) == std::vector<std::string>{"c", "d", "b", "a"});

    // with budget again, the unasked are asked (they were not cached), the answered are not
    budget = 10;
    asked = 0;
    screen.rank(proposals, 4, metered);
    CHECK(asked == 2);
    CHECK(screen.calls() == 4);
    CHECK(hashes(proposals).front() == "c");  // schedule 40 against the model's 120: geometric mean 69
}

TEST_CASE("schedule screen: the bias is learnt per family and the better predictor gets the weight") {
    search::ScheduleScreen screen;
    FakeSchedule schedule;
    // family tiles: measured is always 2.0x the schedule (±1 %); the model is off by ±30 %
    const std::vector<double> schedules = {1000, 1500, 2200, 3100, 800};
    const std::vector<double> model_off = {1.3, 0.7, 1.25, 0.75, 1.3};
    const std::vector<double> noise = {1.01, 0.99, 1.0, 1.01, 0.99};
    for (std::size_t idx = 0; idx < schedules.size(); ++idx) {
        const std::string hash = "m" + std::to_string(idx);
        schedule.set(hash, schedules[idx]);
        const double measured = 2.0 * schedules[idx] * noise[idx];
        std::vector<search::Proposal> pair = {proposal(hash, "tiles", measured / model_off[idx]),
                                              proposal("other", "tiles", 1e6)};
        schedule.set("other", 1e6);
        screen.rank(pair, 2, schedule.fn());
        for (const auto& item : pair) {
            if (item.design.content_hash == hash) screen.observe(item, measured);
        }
    }
    const search::ScreenFit tiles = screen.fit("tiles");
    CHECK(tiles.schedule_points == 5);
    CHECK(std::exp(tiles.schedule_bias) == doctest::Approx(2.0).epsilon(0.02));
    CHECK(tiles.schedule_spread < 0.03);
    CHECK(tiles.model_spread > 0.2);
    CHECK(tiles.schedule_weight > 0.95);
    // a family never measured borrows the pooled bias
    CHECK(std::exp(screen.fit("stream").schedule_bias) == doctest::Approx(2.0).epsilon(0.02));
    CHECK(screen.fit("stream").schedule_points == 5);

    // now the schedule decides: x is the model's first, y the schedule's
    schedule.set("x", 3000);
    schedule.set("y", 2000);
    std::vector<search::Proposal> proposals = {proposal("x", "tiles", 4000), proposal("y", "tiles", 4400)};
    screen.rank(proposals, 2, schedule.fn());
    CHECK(hashes(proposals) == std::vector<std::string>{"y", "x"});
    CHECK(proposals.front().reason.find("learnt bias 2.00 (5 measured)") != std::string::npos);

    // a measurement of a design the screen never saw teaches it nothing
    screen.observe(proposal("never", "tiles", 100), 50);
    CHECK(screen.fit("tiles").schedule_points == 5);
}
