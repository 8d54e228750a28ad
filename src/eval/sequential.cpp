#include "eval/sequential.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <numeric>
#include <numbers>
#include <random>

namespace npuopt::eval {
namespace {

constexpr double k_infinity = std::numeric_limits<double>::infinity();

void require_config(bool condition, const char* field, const std::string& expectation) {
    if (!condition) {
        throw Error(ErrorKind::invalid_config,
                    fmt::format("sequential test: '{}' must be {}", field, expectation));
    }
}

std::vector<std::size_t> resolve_looks(const SequentialConfig& config) {
    if (!config.looks.empty()) return config.looks;
    std::vector<std::size_t> looks;
    for (std::size_t pairs = config.min_pairs; pairs <= config.max_pairs; ++pairs) looks.push_back(pairs);
    return looks;
}

// The rank above which the capped scores stop growing: ceil(score_cap * n), at least 1.
double score_ceiling(double score_cap, std::size_t n) {
    return std::max(1.0, std::ceil(score_cap * static_cast<double>(n) - 1e-9));
}

// The scores of ranks 1..n, min(r, ceil(score_cap * n)) (whole numbers, so their signed sums
// are exact and equal statistics compare equal), and the root of their sum of squares, which
// standardises the signed sum.
struct RankScores {
    std::vector<double> scores;
    double norm = 0.0;
};

RankScores rank_scores(std::size_t n, double score_cap) {
    const double ceiling = score_ceiling(score_cap, n);
    RankScores result;
    double squares = 0.0;
    for (std::size_t rank = 1; rank <= n; ++rank) {
        result.scores.push_back(std::min(static_cast<double>(rank), ceiling));
        squares += result.scores.back() * result.scores.back();
    }
    result.norm = std::sqrt(squares);
    return result;
}

// Null paths of the standardised signed-rank score statistic: z[look_idx][path_idx]. Under the
// null (values symmetric about 0, continuous) signs are fair coins independent of the ranks,
// whatever the distribution, so uniform magnitudes with random signs give the exact joint law
// for any score function of the ranks.
std::vector<std::vector<double>> simulate_null_paths(const std::vector<std::size_t>& looks, std::size_t path_count,
                                                     std::uint64_t seed, double score_cap) {
    std::vector<std::vector<double>> z(looks.size(), std::vector<double>(path_count));
    std::vector<RankScores> look_scores;
    for (std::size_t look : looks) look_scores.push_back(rank_scores(look, score_cap));
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> magnitude_dist(0.0, 1.0);
    const std::size_t max_pairs = looks.back();
    std::vector<double> magnitudes;
    std::vector<int> signs;
    for (std::size_t path_idx = 0; path_idx < path_count; ++path_idx) {
        magnitudes.clear();
        signs.clear();
        std::size_t look_idx = 0;
        for (std::size_t pairs = 1; pairs <= max_pairs; ++pairs) {
            const double magnitude = magnitude_dist(rng);
            const int sign = (rng() & 1U) != 0U ? 1 : -1;
            const auto insert_at = static_cast<std::size_t>(
                std::lower_bound(magnitudes.begin(), magnitudes.end(), magnitude) - magnitudes.begin());
            magnitudes.insert(magnitudes.begin() + static_cast<std::ptrdiff_t>(insert_at), magnitude);
            signs.insert(signs.begin() + static_cast<std::ptrdiff_t>(insert_at), sign);
            if (look_idx < looks.size() && looks[look_idx] == pairs) {
                const RankScores& scores = look_scores[look_idx];
                double signed_sum = 0.0;
                for (std::size_t pos = 0; pos < pairs; ++pos) signed_sum += signs[pos] * scores.scores[pos];
                z[look_idx][path_idx] = signed_sum / scores.norm;
                ++look_idx;
            }
        }
    }
    return z;
}

// Upper boundaries that spend `total` along `spending`: at each look, the boundary is placed so
// that the share of null paths that have crossed by then stays within the spent error. The
// statistic is discrete, so boundaries sit midway between attainable values and error not
// spent at one look carries over to the next.
void place_bounds(const std::vector<std::vector<double>>& z, const std::vector<std::size_t>& looks,
                  double total, Spending spending, std::vector<double>& bounds,
                  std::vector<double>& spent) {
    const std::size_t path_count = z.front().size();
    std::vector<char> alive(path_count, 1);
    std::size_t crossed = 0;
    std::vector<double> values;
    for (std::size_t look_idx = 0; look_idx < looks.size(); ++look_idx) {
        const double information = static_cast<double>(looks[look_idx]) / static_cast<double>(looks.back());
        const double target = error_spent(spending, total, information) * static_cast<double>(path_count);
        const auto allowed_total = static_cast<std::size_t>(std::floor(target + 1e-9));
        const std::size_t allowed_new = allowed_total > crossed ? allowed_total - crossed : 0;
        values.clear();
        for (std::size_t path_idx = 0; path_idx < path_count; ++path_idx) {
            if (alive[path_idx] != 0) values.push_back(z[look_idx][path_idx]);
        }
        double bound = k_infinity;
        if (allowed_new > 0 && !values.empty()) {
            // Only the largest allowed_new + 1 values matter: partition them to the front.
            const std::size_t head = std::min(allowed_new + 1, values.size());
            std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(head - 1),
                             values.end(), std::greater<>());
            std::sort(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(head), std::greater<>());
            std::size_t take = std::min(allowed_new, values.size());
            // Do not split a group of equal values: back off to the previous distinct value.
            while (take > 0 && take < head && values[take] == values[take - 1]) --take;
            if (take > 0) {
                bound = take < head ? 0.5 * (values[take - 1] + values[take]) : values[take - 1] - 1.0;
            }
        }
        bounds.push_back(bound);
        for (std::size_t path_idx = 0; path_idx < path_count; ++path_idx) {
            if (alive[path_idx] != 0 && z[look_idx][path_idx] >= bound) {
                alive[path_idx] = 0;
                ++crossed;
            }
        }
        spent.push_back(static_cast<double>(crossed) / static_cast<double>(path_count));
    }
}

std::string format_bound(double bound) {
    return std::isinf(bound) ? std::string("inf") : fmt::format("{:.3f}", bound);
}

}  // namespace

double error_spent(Spending spending, double total, double information) {
    switch (spending) {
        case Spending::obrien_fleming:
            return 2.0 - 2.0 * normal_cdf(normal_quantile(1.0 - 0.5 * total) / std::sqrt(information));
        case Spending::pocock:
            return total * std::log1p((std::numbers::e - 1.0) * information);
    }
    return total;
}

SequentialConfig SequentialConfig::strict() {
    SequentialConfig config;
    config.alpha = 0.01;
    config.min_pairs = 8;
    config.max_pairs = 40;
    return config;
}

SequentialConfig within_pairs(const SequentialConfig& config, std::size_t max_pairs) {
    SequentialConfig capped = config;
    capped.max_pairs = std::max<std::size_t>(2, std::min(config.max_pairs, max_pairs));
    capped.min_pairs = std::min(config.min_pairs, capped.max_pairs);
    if (!config.looks.empty()) {
        capped.looks.clear();
        for (std::size_t look : config.looks) {
            if (look < capped.max_pairs) capped.looks.push_back(look);
        }
        capped.looks.push_back(capped.max_pairs);
        capped.min_pairs = std::min(capped.min_pairs, capped.looks.front());
    }
    return capped;
}

void validate_sequential_config(const SequentialConfig& config) {
    require_config(config.alpha > 0.0 && config.alpha < 0.5, "alpha", "in (0, 0.5)");
    require_config(config.beta > 0.0 && config.beta < 0.5, "beta", "in (0, 0.5)");
    require_config(config.min_effect > 0.0 && config.min_effect < 1.0, "min_effect",
                   "in (0, 1) (0.01 = 1% faster)");
    require_config(config.min_pairs >= 2, "min_pairs", "at least 2");
    require_config(config.max_pairs >= config.min_pairs, "max_pairs", "at least min_pairs");
    require_config(config.max_pairs <= 10000, "max_pairs", "at most 10000");
    require_config(config.interval_level > 0.0 && config.interval_level < 1.0, "interval_level",
                   "in (0, 1)");
    require_config(config.accept_null_fraction >= 0.0 && config.accept_null_fraction < 1.0,
                   "accept_null_fraction", "in [0, 1)");
    require_config(config.score_cap > 0.0 && config.score_cap <= 1.0, "score_cap",
                   "in (0, 1] (1: the plain signed-rank sum)");
    require_config(config.calibration_paths >= 1000, "calibration_paths", "at least 1000");
    for (std::size_t look_idx = 0; look_idx < config.looks.size(); ++look_idx) {
        const std::size_t look = config.looks[look_idx];
        require_config(look >= config.min_pairs && look <= config.max_pairs, "looks",
                       fmt::format("pair counts within [min_pairs, max_pairs] = [{}, {}], got {}",
                                   config.min_pairs, config.max_pairs, look));
        require_config(look_idx == 0 || look > config.looks[look_idx - 1], "looks", "strictly increasing");
    }
    require_config(config.looks.empty() || config.looks.back() == config.max_pairs, "looks",
                   "ending at max_pairs");
}

SequentialDesign make_sequential_design(const SequentialConfig& config) {
    validate_sequential_config(config);
    SequentialDesign design;
    design.config = config;
    design.looks = resolve_looks(config);
    const auto z = simulate_null_paths(design.looks, config.calibration_paths, config.calibration_seed,
                                       config.score_cap);
    place_bounds(z, design.looks, config.alpha, config.accept_spending, design.accept_bounds,
                 design.accept_spent);
    place_bounds(z, design.looks, config.beta, config.reject_spending, design.reject_bounds,
                 design.reject_spent);
    return design;
}

std::optional<std::size_t> earliest_accept_pairs(const SequentialDesign& design) {
    for (std::size_t look_idx = 0; look_idx < design.looks.size() && look_idx < design.accept_bounds.size(); ++look_idx) {
        // every pair favourable: the sum of all scores, standardised
        const RankScores scores = rank_scores(design.looks[look_idx], design.config.score_cap);
        const double largest = std::accumulate(scores.scores.begin(), scores.scores.end(), 0.0) / scores.norm + 1e-12;
        const double bound = design.accept_bounds[look_idx];
        if (std::isfinite(bound) && bound <= largest) return design.looks[look_idx];
    }
    return std::nullopt;
}

std::string_view decision_name(Decision decision) {
    switch (decision) {
        case Decision::continue_racing: return "continue";
        case Decision::accept: return "accept";
        case Decision::reject: return "reject";
        case Decision::inconclusive: return "inconclusive";
    }
    return "unknown";
}

double signed_rank_z(std::span<const double> values, double score_cap) {
    std::vector<double> magnitudes;
    magnitudes.reserve(values.size());
    for (double value : values) magnitudes.push_back(std::fabs(value));
    const std::vector<double> ranks = midranks(magnitudes);
    const double ceiling = score_ceiling(score_cap, values.size());
    double signed_sum = 0.0;
    double rank_squares = 0.0;
    for (std::size_t idx = 0; idx < values.size(); ++idx) {
        if (values[idx] == 0.0) continue;
        const double score = std::min(ranks[idx], ceiling);
        signed_sum += values[idx] > 0.0 ? score : -score;
        rank_squares += score * score;
    }
    return rank_squares > 0.0 ? signed_sum / std::sqrt(rank_squares) : 0.0;
}

SequentialTest::SequentialTest(std::shared_ptr<const SequentialDesign> design)
    : m_design(std::move(design)) {
    if (!m_design) throw Error(ErrorKind::internal, "SequentialTest: design is null");
    m_result.accept_bound = m_design->accept_bounds.front();
    m_result.reject_bound = m_design->reject_bounds.front();
}

const SequentialResult& SequentialTest::add_log_ratio(double log_ratio) {
    if (is_final()) {
        throw Error(ErrorKind::internal,
                    fmt::format("SequentialTest: pair added after the final decision '{}'",
                                decision_name(m_result.decision)));
    }
    if (!std::isfinite(log_ratio)) {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("SequentialTest: log-ratio must be finite, got {}", log_ratio));
    }
    m_log_ratios.push_back(log_ratio);
    const SequentialConfig& config = m_design->config;
    const double delta = std::log1p(config.min_effect);
    const std::size_t pairs = m_log_ratios.size();

    std::vector<double> faster(pairs);     // -d - f delta: positive when clearly faster
    std::vector<double> shortfall(pairs);  // d + delta: positive when it misses min_effect
    for (std::size_t idx = 0; idx < pairs; ++idx) {
        faster[idx] = -m_log_ratios[idx] - config.accept_null_fraction * delta;
        shortfall[idx] = m_log_ratios[idx] + delta;
    }
    SequentialResult result;
    result.pairs = pairs;
    result.accept_statistic = signed_rank_z(faster, config.score_cap);
    result.reject_statistic = signed_rank_z(shortfall, config.score_cap);
    result.log_ratio_estimate = hodges_lehmann(m_log_ratios);
    result.log_ratio_interval = hodges_lehmann_interval(m_log_ratios, config.interval_level);
    result.speedup = std::exp(-result.log_ratio_estimate);
    result.speedup_interval = {std::exp(-result.log_ratio_interval.upper),
                               std::exp(-result.log_ratio_interval.lower)};

    const std::size_t look_idx = std::min(m_next_look_idx, m_design->looks.size() - 1);
    result.accept_bound = m_design->accept_bounds[look_idx];
    result.reject_bound = m_design->reject_bounds[look_idx];
    const std::string estimate =
        fmt::format("speedup {:.4f} [{:.4f}, {:.4f}] after {} pairs", result.speedup,
                    result.speedup_interval.lower, result.speedup_interval.upper, pairs);
    if (m_next_look_idx < m_design->looks.size() && m_design->looks[m_next_look_idx] == pairs) {
        result.look_idx = m_next_look_idx;
        ++m_next_look_idx;
        const bool crosses_accept = result.accept_statistic >= result.accept_bound;
        const bool crosses_reject = result.reject_statistic >= result.reject_bound;
        if (crosses_reject) {
            result.decision = Decision::reject;
            result.reason = fmt::format(
                "{}: Z_reject {:.3f} >= {}: not faster by min_effect {:.2f}%; {}",
                crosses_accept ? "reject (faster, but by less than min_effect)" : "reject",
                result.reject_statistic, format_bound(result.reject_bound), 100.0 * config.min_effect,
                estimate);
        } else if (crosses_accept) {
            result.decision = Decision::accept;
            result.reason = fmt::format("accept: Z_accept {:.3f} >= {}; {}", result.accept_statistic,
                                        format_bound(result.accept_bound), estimate);
        } else if (m_next_look_idx == m_design->looks.size()) {
            result.decision = Decision::inconclusive;
            result.reason = fmt::format(
                "inconclusive at the cap: Z_accept {:.3f} < {}, Z_reject {:.3f} < {}; {}",
                result.accept_statistic, format_bound(result.accept_bound), result.reject_statistic,
                format_bound(result.reject_bound), estimate);
        }
    }
    if (result.decision == Decision::continue_racing) {
        result.reason = fmt::format("continue: {}", estimate);
    }
    m_result = std::move(result);
    return m_result;
}

SequentialResult run_sequential_test(std::shared_ptr<const SequentialDesign> design,
                                     std::span<const double> log_ratios) {
    SequentialTest test(std::move(design));
    for (double log_ratio : log_ratios) {
        if (test.add_log_ratio(log_ratio).decision != Decision::continue_racing) break;
    }
    return test.result();
}

double accept_probability(std::shared_ptr<const SequentialDesign> design, std::size_t max_pairs,
                          std::span<const double> launch_residuals, double log_ratio, std::uint64_t seed,
                          std::size_t paths) {
    if (!design) throw Error(ErrorKind::internal, "accept_probability: design is null");
    if (launch_residuals.empty() || max_pairs == 0 || paths == 0) return 0.0;
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::size_t> pick(0, launch_residuals.size() - 1);
    std::size_t accepted = 0;
    for (std::size_t path = 0; path < paths; ++path) {
        SequentialTest test(design);
        for (std::size_t pair = 0; pair < max_pairs && !test.is_final(); ++pair) {
            const double candidate_noise = launch_residuals[pick(rng)];
            const double champion_noise = launch_residuals[pick(rng)];
            test.add_log_ratio(log_ratio + candidate_noise - champion_noise);
        }
        if (test.result().decision == Decision::accept) ++accepted;
    }
    return static_cast<double>(accepted) / static_cast<double>(paths);
}

}  // namespace npuopt::eval
