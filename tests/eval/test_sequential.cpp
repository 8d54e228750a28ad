#include "core/error.hpp"
#include "eval/race.hpp"
#include "eval/sequential.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

using namespace npuopt::eval;

namespace {

std::shared_ptr<const SequentialDesign> default_design() {
    static const auto design = std::make_shared<const SequentialDesign>(make_sequential_design({}));
    return design;
}

// The device's launch noise: log-normal jitter and occasional slow outliers. The default is the
// device as the brief describes it: 2% log-normal launch noise, 1% of launches 3x slower.
struct Noise {
    double sigma = 0.02;
    double outlier_rate = 0.01;
    double outlier_scale = 3.0;
};

struct NoisyDevice {
    std::mt19937_64 rng;
    Noise noise_model{};
    std::normal_distribution<double> noise{0.0, noise_model.sigma};
    std::uniform_real_distribution<double> unit{0.0, 1.0};
    double launch(double base_secs) {
        double secs = base_secs * std::exp(noise(rng));
        if (unit(rng) < noise_model.outlier_rate) secs *= noise_model.outlier_scale;
        return secs;
    }
};

struct RaceFigures {
    double accept_rate = 0.0;
    double reject_rate = 0.0;
    double pairs_median = 0.0;
    double pairs_p95 = 0.0;
};

// Full races through Race (interleaving, bookkeeping) on the simulated device.
RaceFigures simulate_races(const std::shared_ptr<const SequentialDesign>& design, double true_speedup,
                           std::size_t race_count, std::uint64_t seed, Noise noise = {}) {
    NoisyDevice device{std::mt19937_64(seed), noise};
    std::size_t accepts = 0;
    std::size_t rejects = 0;
    std::vector<double> pairs;
    for (std::size_t race_idx = 0; race_idx < race_count; ++race_idx) {
        Race race(design, RaceConfig{seed + race_idx, 3, 10});
        while (auto plan = race.next_pair()) {
            PairOutcome outcome;
            for (Side side : plan->order) {  // launch in the planned order
                const double secs = device.launch(side == Side::champion ? 1.0 : 1.0 / (1.0 + true_speedup));
                (side == Side::champion ? outcome.champion : outcome.candidate) = LaunchResult::timed(secs);
            }
            race.record_pair(*plan, outcome);
        }
        accepts += race.verdict().decision == Decision::accept ? 1 : 0;
        rejects += race.verdict().decision == Decision::reject ? 1 : 0;
        pairs.push_back(static_cast<double>(race.verdict().pairs_completed));
    }
    std::sort(pairs.begin(), pairs.end());
    const double count = static_cast<double>(race_count);
    return {static_cast<double>(accepts) / count, static_cast<double>(rejects) / count,
            quantile(pairs, 0.5), quantile(pairs, 0.95)};
}

}  // namespace

TEST_CASE("error-spending functions match their closed forms") {
    // mpmath: 2 - 2 Phi(z_{0.975} / sqrt(0.5)) and 0.05 log(1 + (e - 1) / 2).
    CHECK(error_spent(Spending::obrien_fleming, 0.05, 0.5) == doctest::Approx(0.005574596680784411).epsilon(1e-10));
    CHECK(error_spent(Spending::pocock, 0.05, 0.5) == doctest::Approx(0.03100572534791387).epsilon(1e-12));
    CHECK(error_spent(Spending::obrien_fleming, 0.05, 1.0) == doctest::Approx(0.05).epsilon(1e-12));
    CHECK(error_spent(Spending::pocock, 0.10, 1.0) == doctest::Approx(0.10).epsilon(1e-12));
}

TEST_CASE("a single-look design reproduces the exact signed-rank critical value") {
    // n = 30, one-sided 5%: the exact null law (enumerated in Python) gives P(W+ >= 314) = 0.04805
    // and P(W+ >= 313) just above 0.05; in Z units W+ = 314 is 1.67632, 313 is 1.65575 and each step
    // of W+ is 0.01454. With 40000 calibration paths (standard error 0.0011 on the level) the
    // boundary may land one attainable value either side of the exact one.
    SequentialConfig config;
    config.looks = {30};
    config.score_cap = 1.0;  // the plain signed-rank sum
    const SequentialDesign design = make_sequential_design(config);
    REQUIRE(design.accept_bounds.size() == 1);
    CHECK(design.accept_bounds[0] > 1.65575 - 0.01454);
    CHECK(design.accept_bounds[0] < 1.67632 + 0.01454);
    CHECK(design.accept_spent[0] == doctest::Approx(0.04805).epsilon(0.08));  // Monte-Carlo error
}

TEST_CASE("capped scores: a single-look design reproduces the exact critical value of the capped score sum") {
    // n = 10 at score_cap 0.6: scores 1 2 3 4 5 6 6 6 6 6 (sum of squares 255). All 1024 sign
    // patterns enumerated in Python: P(S >= 27) = 0.04590, P(S >= 25) = 0.05859; in Z units S = 27
    // is 1.76129 and S = 25 is 1.63082 (S moves in steps of 2). The boundary lies between them.
    SequentialConfig config;
    config.looks = {10};
    config.min_pairs = 10;
    config.max_pairs = 10;
    config.score_cap = 0.6;
    const SequentialDesign design = make_sequential_design(config);
    REQUIRE(design.accept_bounds.size() == 1);
    CHECK(design.accept_bounds[0] > 1.63082);
    CHECK(design.accept_bounds[0] <= 1.76129);
    CHECK(design.accept_spent[0] == doctest::Approx(0.04590).epsilon(0.08));  // Monte-Carlo error
    // the same design with the plain sum has another boundary: the cap is what is simulated
    config.score_cap = 1.0;
    CHECK(make_sequential_design(config).accept_bounds[0] != design.accept_bounds[0]);
    config.score_cap = 0.0;
    CHECK_THROWS_AS(make_sequential_design(config), npuopt::Error);
}

TEST_CASE("default design spends at most alpha and beta and cannot accept at the first looks") {
    const auto design = default_design();
    REQUIRE(design->looks.size() == 27);  // every pair from 4 to 30
    CHECK(design->looks.front() == 4);
    CHECK(design->accept_spent.back() <= 0.05);
    CHECK(design->accept_spent.back() > 0.045);
    CHECK(design->reject_spent.back() <= 0.10);
    CHECK(std::isinf(design->accept_bounds.front()));
    for (std::size_t look_idx = 1; look_idx < design->looks.size(); ++look_idx) {
        CHECK(design->accept_spent[look_idx] >= design->accept_spent[look_idx - 1]);
    }
    MESSAGE("accept bound at 12 pairs " << design->accept_bounds[8] << ", at 30 pairs "
                                        << design->accept_bounds.back());
}

TEST_CASE("earliest_accept_pairs is the first pair count at which all-favourable pairs accept") {
    for (const auto& config : {SequentialConfig{}, SequentialConfig::strict()}) {
        SequentialConfig quick = config;
        quick.calibration_paths = 4000;
        const auto design = std::make_shared<const SequentialDesign>(make_sequential_design(quick));
        const auto first = earliest_accept_pairs(*design);
        REQUIRE(first.has_value());
        CHECK(*first > design->looks.front());  // O'Brien-Fleming spends nothing at the first look
        MESSAGE("alpha " << quick.alpha << ", looks " << quick.min_pairs << ".." << quick.max_pairs
                         << ": first possible accept at " << *first << " pairs");
        // the same large speedup every pair: no accept before `first` pairs, an accept at it
        SequentialTest test(design);
        std::size_t accepted_at = 0;
        for (std::size_t pair = 1; pair <= design->looks.back() && !test.is_final(); ++pair) {
            // distinct magnitudes (no ties), all clearly faster
            if (test.add_log_ratio(-0.2 - 0.001 * static_cast<double>(pair)).decision == Decision::accept) accepted_at = pair;
        }
        CHECK(accepted_at == *first);
    }
    // a design whose only look cannot accept has none
    SequentialConfig tiny;
    tiny.min_pairs = 2;
    tiny.max_pairs = 2;
    tiny.alpha = 0.001;
    tiny.calibration_paths = 4000;
    CHECK_FALSE(earliest_accept_pairs(make_sequential_design(tiny)).has_value());
}

TEST_CASE("within_pairs caps the last look and still spends at most alpha") {
    SequentialConfig config;
    config.calibration_paths = 4000;
    const SequentialConfig six = within_pairs(config, 6);
    CHECK(six.max_pairs == 6);
    CHECK(six.min_pairs == 4);
    const auto design = make_sequential_design(six);
    CHECK(design.looks.back() == 6);
    CHECK(design.accept_spent.back() <= config.alpha);
    REQUIRE(earliest_accept_pairs(design).has_value());
    CHECK(*earliest_accept_pairs(design) <= 6);
    CHECK(within_pairs(config, 100).max_pairs == config.max_pairs);  // never raises the cap
    CHECK(within_pairs(config, 3).min_pairs == 3);
    SequentialConfig looked = config;
    looked.looks = {4, 10, 20, 30};
    CHECK(within_pairs(looked, 12).looks == std::vector<std::size_t>{4, 10, 12});
    // a 3-pair test cannot reach alpha 0.05 (1/8 of sign patterns are all favourable): no accept
    CHECK_FALSE(earliest_accept_pairs(make_sequential_design(within_pairs(config, 3))).has_value());
}

TEST_CASE("accept_probability: a gain the launch noise hides is seldom confirmed, one far above it almost surely") {
    SequentialConfig config;
    config.calibration_paths = 4000;
    const auto eight = std::make_shared<const SequentialDesign>(make_sequential_design(within_pairs(config, 8)));
    auto residuals = [](double sigma) {
        std::mt19937_64 rng(11);
        std::normal_distribution<double> noise(0.0, sigma);
        std::vector<double> values(200);
        for (double& value : values) value = noise(rng);
        return values;
    };
    const auto quiet = residuals(0.005);
    const auto noisy = residuals(0.04);
    const double gain = std::log(0.97);  // 3 % faster
    const double quiet_chance = accept_probability(eight, 8, quiet, gain, 1);
    const double noisy_chance = accept_probability(eight, 8, noisy, gain, 1);
    MESSAGE("3 % gain, 8 pairs: chance ", quiet_chance, " at 0.5 % launch noise, ", noisy_chance, " at 4 %");
    CHECK(quiet_chance > 0.9);
    CHECK(noisy_chance < 0.4);
    // more pairs make the same gain easier to confirm on the noisy device
    const auto thirty = std::make_shared<const SequentialDesign>(make_sequential_design(config));
    CHECK(accept_probability(thirty, 30, noisy, gain, 1) > noisy_chance + 0.2);
    // no gain: accepted about as often as alpha allows (plus Monte-Carlo error)
    CHECK(accept_probability(eight, 8, quiet, 0.0, 1) <= 0.1);
    CHECK(accept_probability(eight, 8, noisy, 0.0, 1) <= 0.1);
    // deterministic in the seed; nothing to draw from or no pairs: no chance
    CHECK(accept_probability(eight, 8, noisy, gain, 1) == noisy_chance);
    CHECK(accept_probability(eight, 8, {}, gain, 1) == 0.0);
    CHECK(accept_probability(eight, 0, noisy, gain, 1) == 0.0);
}

TEST_CASE("the design is a pure function of the configuration") {
    SequentialConfig config;
    config.calibration_paths = 5000;
    const SequentialDesign first = make_sequential_design(config);
    const SequentialDesign second = make_sequential_design(config);
    CHECK(first.accept_bounds == second.accept_bounds);
    CHECK(first.reject_bounds == second.reject_bounds);
}

TEST_CASE("bad configurations are refused with the field named") {
    SequentialConfig config;
    config.alpha = 0.0;
    CHECK_THROWS_WITH_AS(make_sequential_design(config), "sequential test: 'alpha' must be in (0, 0.5)",
                         npuopt::Error);
    config = {};
    config.looks = {4, 10, 20};
    CHECK_THROWS_WITH_AS(make_sequential_design(config), "sequential test: 'looks' must be ending at max_pairs",
                         npuopt::Error);
    config.looks = {10, 8, 30};
    CHECK_THROWS_AS(make_sequential_design(config), npuopt::Error);
    config = {};
    config.max_pairs = 3;
    CHECK_THROWS_AS(make_sequential_design(config), npuopt::Error);
}

TEST_CASE("signed-rank statistic: mid-ranks for ties and zeros contribute nothing") {
    // |x| ranks 1 2 3 4, all positive: (1+2+3+4) / sqrt(30).
    CHECK(signed_rank_z(std::vector<double>{0.1, 0.2, 0.3, 0.4}) == doctest::Approx(10.0 / std::sqrt(30.0)));
    CHECK(signed_rank_z(std::vector<double>{-0.1, 0.1}) == doctest::Approx(0.0));
    CHECK(signed_rank_z(std::vector<double>{0.0, 0.0}) == 0.0);
    // Ranks of |x| = 1.5 1.5 3 for 0.1 -0.1 0.5; zero first gets rank 1 but no sign.
    CHECK(signed_rank_z(std::vector<double>{0.0, 0.1, -0.1, 0.5}) ==
          doctest::Approx(4.0 / std::sqrt(2.5 * 2.5 * 2.0 + 16.0)));
    // Capped scores (score_cap 0.6 of 5 values: ranks above 3 score 3): 1 2 3 3 3, the largest
    // negative: (1 + 2 + 3 + 3 - 3) / sqrt(1 + 4 + 9 + 9 + 9).
    CHECK(signed_rank_z(std::vector<double>{0.1, 0.2, 0.3, 0.4, -0.9}, 0.6) == doctest::Approx(6.0 / std::sqrt(32.0)));
    // the plain sum gives the outlier the top rank: (1 + 2 + 3 + 4 - 5) / sqrt(55)
    CHECK(signed_rank_z(std::vector<double>{0.1, 0.2, 0.3, 0.4, -0.9}) == doctest::Approx(5.0 / std::sqrt(55.0)));
}

TEST_CASE("a clear improvement is accepted with estimate and interval around the truth") {
    std::vector<double> log_ratios;
    std::mt19937_64 rng(3);
    std::normal_distribution<double> noise(std::log(1.0 / 1.05), 0.01);
    for (int pair = 0; pair < 30; ++pair) log_ratios.push_back(noise(rng));
    const SequentialResult result = run_sequential_test(default_design(), log_ratios);
    CHECK(result.decision == Decision::accept);
    CHECK(result.pairs < 30);
    CHECK(result.accept_statistic >= result.accept_bound);
    CHECK(result.speedup == doctest::Approx(1.05).epsilon(0.01));
    CHECK(result.speedup_interval.lower < result.speedup);
    CHECK(result.speedup_interval.upper > result.speedup);
    MESSAGE(result.reason);
}

TEST_CASE("a slower candidate is rejected early and the test then refuses more pairs") {
    SequentialTest test(default_design());
    std::mt19937_64 rng(4);
    std::normal_distribution<double> noise(std::log(1.03), 0.02);
    while (!test.is_final()) test.add_log_ratio(noise(rng));
    CHECK(test.result().decision == Decision::reject);
    CHECK(test.result().pairs <= 10);
    CHECK_THROWS_AS(test.add_log_ratio(0.0), npuopt::Error);
    CHECK_THROWS_AS(SequentialTest(default_design()).add_log_ratio(std::nan("")), npuopt::Error);
}

TEST_CASE("identical designs end inconclusive or rejected and never accepted at the cap") {
    // Perfectly balanced A/A data: Z_accept stays below any boundary.
    std::vector<double> log_ratios;
    for (int pair = 0; pair < 30; ++pair) log_ratios.push_back(pair % 2 == 0 ? 0.004 : -0.004);
    const SequentialResult result = run_sequential_test(default_design(), log_ratios);
    CHECK(result.decision != Decision::accept);
    CHECK(result.decision != Decision::continue_racing);
}

TEST_CASE("outlier launches cannot carry an accept") {
    // A/A noise plus two champion launches 3x slower (log-ratio -log 3 each): a mean-based test
    // would see a 7% "speedup"; the ranks see two observations.
    std::mt19937_64 rng(5);
    std::normal_distribution<double> noise(0.0, 0.028);
    for (int trial = 0; trial < 50; ++trial) {
        std::vector<double> log_ratios;
        for (int pair = 0; pair < 30; ++pair) log_ratios.push_back(noise(rng));
        log_ratios[5] = -std::log(3.0);
        log_ratios[17] = -std::log(3.0);
        CHECK(run_sequential_test(default_design(), log_ratios).decision != Decision::accept);
    }
}

TEST_CASE("Monte-Carlo operating characteristics on a noisy device with outliers") {
    const auto started = std::chrono::steady_clock::now();
    const auto design = default_design();
    const RaceFigures same = simulate_races(design, 0.0, 1000, 1001);
    const RaceFigures three = simulate_races(design, 0.03, 500, 2002);
    const RaceFigures one = simulate_races(design, 0.01, 500, 3003);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    MESSAGE("A/A (1000 races): false-accept " << same.accept_rate << ", reject " << same.reject_rate
                                              << ", pairs median " << same.pairs_median << " p95 "
                                              << same.pairs_p95);
    MESSAGE("3% faster (500 races): accept " << three.accept_rate << ", pairs median "
                                             << three.pairs_median << " p95 " << three.pairs_p95);
    MESSAGE("1% faster (500 races): accept " << one.accept_rate << ", reject " << one.reject_rate
                                             << ", pairs median " << one.pairs_median << " p95 "
                                             << one.pairs_p95);
    MESSAGE("simulation took " << secs << " s");
    CHECK(same.accept_rate <= 0.05);   // alpha
    CHECK(same.accept_rate <= 0.01);   // the goal
    CHECK(three.accept_rate >= 0.90);
    CHECK(one.reject_rate <= 0.10 + 0.04);  // beta at exactly min_effect, with Monte-Carlo slack
}

TEST_CASE("capped scores: on a device whose outliers land on the candidate, a real gain is accepted more often, and false accepts stay under alpha") {
    // A device with the generated chips' worst outliers (1.7% jitter, 5% of launches 1.45x
    // slower) and one with plain noise (3.3% jitter, no outliers). Races of at most 10 pairs (a
    // race capped by its share of a 100-run budget) and uncapped ones (4..30), each test with its
    // boundaries placed for its own scores; the same seeds for both tests.
    SequentialConfig plain;
    plain.score_cap = 1.0;
    SequentialConfig capped;
    capped.score_cap = 0.6;
    const Noise outliers{0.017, 0.05, 1.45};
    const Noise gaussian{0.033, 0.0, 1.0};
    for (std::size_t cap : {std::size_t{10}, std::size_t{30}}) {
        const double gain = cap == 10 ? 0.05 : 0.02;
        const auto plain_design = std::make_shared<const SequentialDesign>(make_sequential_design(within_pairs(plain, cap)));
        const auto capped_design = std::make_shared<const SequentialDesign>(make_sequential_design(within_pairs(capped, cap)));
        const RaceFigures plain_gain = simulate_races(plain_design, gain, 1000, 6006, outliers);
        const RaceFigures capped_gain = simulate_races(capped_design, gain, 1000, 6006, outliers);
        const RaceFigures plain_normal = simulate_races(plain_design, gain, 1000, 7007, gaussian);
        const RaceFigures capped_normal = simulate_races(capped_design, gain, 1000, 7007, gaussian);
        const RaceFigures plain_same = simulate_races(plain_design, 0.0, 1000, 8008, outliers);
        const RaceFigures capped_same = simulate_races(capped_design, 0.0, 1000, 8008, outliers);
        const RaceFigures capped_edge = simulate_races(capped_design, 0.005, 1000, 9009, outliers);
        MESSAGE("races of at most " << cap << " pairs, " << 100.0 * gain << "% faster, outliers: accept plain "
                                    << plain_gain.accept_rate << ", capped " << capped_gain.accept_rate
                                    << "; no outliers: plain " << plain_normal.accept_rate << ", capped "
                                    << capped_normal.accept_rate << "; A/A plain " << plain_same.accept_rate
                                    << ", capped " << capped_same.accept_rate
                                    << "; capped at the accept null (0.5% faster) " << capped_edge.accept_rate);
        CHECK(capped_gain.accept_rate >= plain_gain.accept_rate + (cap == 10 ? 0.08 : 0.02));
        CHECK(capped_normal.accept_rate >= plain_normal.accept_rate - 0.05);  // little lost without outliers
        CHECK(capped_same.accept_rate <= 0.02);
        CHECK(capped_edge.accept_rate <= 0.05 + 0.02);  // alpha at the accept null, Monte-Carlo slack
    }
}

TEST_CASE("strict preset: alpha 0.01 and min_pairs 8 still accept a 3% improvement") {
    const auto design = std::make_shared<const SequentialDesign>(make_sequential_design(SequentialConfig::strict()));
    CHECK(design->looks.front() == 8);
    CHECK(design->accept_spent.back() <= 0.01);
    const RaceFigures same = simulate_races(design, 0.0, 300, 4004);
    const RaceFigures three = simulate_races(design, 0.03, 200, 5005);
    MESSAGE("strict: A/A false-accept " << same.accept_rate << "; 3% accept " << three.accept_rate
                                        << ", pairs median " << three.pairs_median << " p95 " << three.pairs_p95);
    CHECK(same.accept_rate <= 0.01);
    CHECK(three.accept_rate >= 0.90);
}

