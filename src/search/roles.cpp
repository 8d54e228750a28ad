#include "search/roles.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace npuopt::search {

const Template* find_template(const SearchContext& context, const std::string& name) {
    for (const auto& tmpl : context.templates) {
        if (tmpl->name() == name) return tmpl.get();
    }
    return nullptr;
}

namespace {

std::map<std::string, double> merged_quantities(const Template& tmpl, const Assignment& assignment) {
    auto quantities = tmpl.evaluate_quantities(assignment);
    for (auto& [name, value] : tmpl.evaluate_features(assignment)) quantities.emplace(name, value);
    return quantities;
}

/// Sort best predicted first; predictions within 0.5 % count as ties, broken by the seed.
void rank(std::vector<ScoredAssignment>& scored, std::uint64_t seed) {
    std::mt19937_64 random(seed);
    std::shuffle(scored.begin(), scored.end(), random);
    auto key = [](const ScoredAssignment& item) {
        return item.predicted ? std::floor((std::log(*item.predicted) - item.explore) / 0.005) : 1e18;
    };
    std::stable_sort(scored.begin(), scored.end(),
                     [&](const ScoredAssignment& lhs, const ScoredAssignment& rhs) { return key(lhs) < key(rhs); });
}

/// Instantiate the ranked candidates into proposals, skipping known and duplicate designs.
std::vector<Proposal> to_proposals(const SearchContext& context, const std::vector<ScoredAssignment>& ranked,
                                   const std::string& role,
                                   const std::function<std::string(const ScoredAssignment&)>& reason) {
    std::vector<Proposal> proposals;
    std::set<std::string> seen;
    for (const auto& item : ranked) {
        if (static_cast<int>(proposals.size()) >= std::max(context.max_proposals, context.screen_width)) break;
        Design design = item.source_template->instantiate(item.assignment);
        if (!seen.insert(design.content_hash).second) continue;
        if (context.is_known && context.is_known(design.content_hash)) continue;
        Proposal proposal;
        proposal.design = std::move(design);
        proposal.role = role;
        proposal.move = item.move;
        proposal.reason = reason(item);
        proposal.predicted_cycles = item.predicted;
        proposal.changed_params = item.changed_params;
        proposal.model_log_gain = item.model_log_gain;
        proposals.push_back(std::move(proposal));
    }
    return proposals;
}

std::string cycles_text(std::optional<double> cycles) {
    return cycles ? fmt::format("{:.0f}", *cycles) : std::string("?");
}

/// The optimism, in log cycles, for a parameter value never measured (about 3%).
constexpr double k_explore = 0.03;

/// Optimism for the unknown: a parameter value that no measured design of the family had has no
/// learnt effect, so a move whose quantities do not change (an engine placement, an exchange
/// scheme) is predicted no faster than the champion and would never be tried. A one-parameter
/// move to such a value ranks as if k_explore faster (a pair would confound the new value's
/// effect with another change).
double explore_credit(const SearchContext& context, const std::map<std::string, double>& effects,
                      const Assignment& assignment) {
    if (effects.empty() || !context.champion) return 0.0;
    int changed = 0;
    bool unseen = false;
    for (const auto& [name, value] : assignment) {
        auto was = context.champion->params.find(name);
        if (was != context.champion->params.end() && was->second == value) continue;
        ++changed;
        if (!effects.count(param_key(name, value))) unseen = true;
    }
    return changed == 1 && unseen ? k_explore : 0.0;
}

class Analyst final : public Role {
public:
    std::string name() const override { return "analyst"; }

    std::vector<Proposal> propose(const SearchContext& context) override {
        if (!context.champion || context.champion->is_baseline) return {};
        const Template* tmpl = find_template(context, context.champion->template_name);
        if (!tmpl || !context.cost_model) return {};
        if (!context.reopened_terms.empty()) {
            auto reopened = reopen(context, *tmpl);
            if (!reopened.empty()) return reopened;
        }
        Attribution attribution = attribute(context);
        CostTerms champion_terms = attribution.terms;
        auto champion_quantities = merged_quantities(*tmpl, context.champion->params);

        std::vector<ScoredAssignment> shrinking;
        std::vector<ScoredAssignment> invisible;
        // When the model explains too little of the champion, the moves it cannot see come first,
        // but the largest term it does see is still worth shrinking.
        const std::string target =
            attribution.dominant == "unexplained" ? champion_terms.dominant() : attribution.dominant;
        const auto effects = context.cost_model->param_effects(tmpl->family());
        for (auto& [assignment, move] : neighbour_assignments(*tmpl, context.champion->params)) {
            auto scored = score_assignment(context, *tmpl, assignment, move);
            if (!scored) continue;
            if (scored->quantities == champion_quantities) {
                scored->explore = explore_credit(context, effects, scored->assignment);
                invisible.push_back(std::move(*scored));
                continue;
            }
            auto terms = context.cost_model->terms(scored->quantities).as_map();
            auto before = champion_terms.as_map();
            if (!target.empty() && terms[target] < before[target] * 0.98) {
                shrinking.push_back(std::move(*scored));
            }
        }
        rank(shrinking, context.seed);
        rank(invisible, context.seed ^ 0x9e3779b97f4a7c15ULL);
        std::vector<ScoredAssignment> ordered;
        bool unexplained_first = attribution.dominant == "unexplained";
        auto& first = unexplained_first ? invisible : shrinking;
        auto& second = unexplained_first ? shrinking : invisible;
        for (std::size_t idx = 0; idx < std::max(first.size(), second.size()); ++idx) {
            if (idx < first.size()) ordered.push_back(first[idx]);
            if (idx < second.size()) ordered.push_back(second[idx]);
        }
        return to_proposals(context, ordered, name(), [&](const ScoredAssignment& item) {
            bool is_invisible = item.quantities == champion_quantities;
            return fmt::format("{} → {}; predicted {} cycles{}", attribution.text,
                               is_invisible ? "try a param the model cannot see (overlap, layout)"
                                            : "shrink " + target,
                               cycles_text(item.predicted),
                               item.explore > 0.0 ? "; moves to a value never measured" : "");
        });
    }

private:
    /// After a toolchain update: the champion's neighbours that change a re-opened cost term (one
    /// whose hardware parameters the refit moved), ranked by the refitted model; those it predicts
    /// no worse than the champion (within 2 %) are proposed. The trade-off the old chip made —
    /// fewer passes for more DMA commands, say — may be the wrong one on the new.
    std::vector<Proposal> reopen(const SearchContext& context, const Template& tmpl) const {
        const auto champion_quantities = merged_quantities(tmpl, context.champion->params);
        const auto champion_terms = context.cost_model->terms(champion_quantities).as_map();
        const auto champion_predicted =
            context.cost_model->predict(tmpl.family(), champion_quantities, &context.champion->params);
        std::vector<ScoredAssignment> changing;
        for (auto& [assignment, move] : neighbour_assignments(tmpl, context.champion->params)) {
            auto scored = score_assignment(context, tmpl, assignment, move);
            if (!scored || !scored->predicted) continue;
            if (champion_predicted && *scored->predicted > *champion_predicted * 1.02) continue;
            const auto terms = context.cost_model->terms(scored->quantities).as_map();
            for (const auto& term : context.reopened_terms) {
                auto before = champion_terms.find(term);
                auto after = terms.find(term);
                if (before == champion_terms.end() || after == terms.end()) continue;
                if (std::abs(after->second - before->second) > 0.02 * std::max(before->second, 1.0)) {
                    scored->move += fmt::format(" (re-opened: {})", term);
                    changing.push_back(std::move(*scored));
                    break;
                }
            }
        }
        rank(changing, context.seed ^ 0x5bd1e995ULL);
        auto proposals = to_proposals(context, changing, name(), [&](const ScoredAssignment& item) {
            return fmt::format("the toolchain update moved the chip's {} term; the refitted model predicts {} "
                               "cycles (the champion {})",
                               fmt::join(context.reopened_terms, ", "), cycles_text(item.predicted),
                               cycles_text(champion_predicted));
        });
        for (auto& proposal : proposals) proposal.reopened = true;
        return proposals;
    }
};

/// A prediction better than `than` by more than the ranking's tie width (0.5 %).
bool clearly_better(const std::optional<double>& candidate, const std::optional<double>& than) {
    return candidate && (!than || *candidate < *than * 0.995);
}

/// The point of `tmpl` the cost model predicts best, by coordinate descent from `start`: each
/// sweep moves every parameter to its best predicted value, and only a clearly better prediction
/// moves it, so a parameter the model cannot see (an overlap or layout choice) keeps its start
/// value — the template's documented default when the descent starts there.
ScoredAssignment descend(const SearchContext& context, const Template& tmpl, ScoredAssignment start) {
    constexpr int k_max_sweeps = 6;
    for (int sweep = 0; sweep < k_max_sweeps; ++sweep) {
        bool moved = false;
        for (const auto& param : tmpl.params()) {
            for (double value : param.values) {
                if (start.assignment.at(param.name) == value) continue;
                Assignment next = start.assignment;
                next[param.name] = value;
                auto scored = score_assignment(context, tmpl, next, start.move);
                if (scored && clearly_better(scored->predicted, start.predicted)) {
                    start = std::move(*scored);
                    moved = true;
                }
            }
        }
        if (!moved) break;
    }
    return start;
}

/// Every parameter whose declared default the model predicts no worse (within the tie width) goes
/// back to its default: what the model cannot see is the template author's reading of the docs,
/// not the value a random sample happened to draw.
ScoredAssignment snap_to_defaults(const SearchContext& context, const Template& tmpl, ScoredAssignment point) {
    const Assignment defaults = tmpl.default_assignment();
    for (const auto& param : tmpl.params()) {
        auto wanted = defaults.find(param.name);
        if (wanted == defaults.end() || point.assignment.at(param.name) == wanted->second) continue;
        Assignment next = point.assignment;
        next[param.name] = wanted->second;
        auto scored = score_assignment(context, tmpl, next, point.move);
        if (scored && scored->predicted && point.predicted && *scored->predicted <= *point.predicted * 1.005) {
            point = std::move(*scored);
        }
    }
    return point;
}

/// Where the architect enters a family never measured: the model's best point for this chip,
/// descended from the defaults (invisible parameters stay there) and from the best sample
/// (another basin); the defaults' descent unless the sample's is clearly better; then every
/// parameter the model is indifferent to goes back to its default.
std::optional<ScoredAssignment> entry_point(const SearchContext& context, const Template& tmpl,
                                            const std::optional<ScoredAssignment>& defaults,
                                            const std::vector<ScoredAssignment>& ranked) {
    std::optional<ScoredAssignment> best;
    if (defaults && defaults->predicted) best = descend(context, tmpl, *defaults);
    for (const auto& sample : ranked) {
        if (!sample.predicted) continue;
        ScoredAssignment other = descend(context, tmpl, sample);
        if (!best || clearly_better(other.predicted, best->predicted)) best = std::move(other);
        break;  // the best-ranked sample only
    }
    if (!best) return best;
    best = snap_to_defaults(context, tmpl, std::move(*best));
    best->move = fmt::format("family {} (model's best point)", tmpl.family());
    return best;
}

/// The cost model's prediction for the champion (nullopt: a baseline, a design from source, or
/// nothing the model can predict).
std::optional<double> predicted_champion(const SearchContext& context) {
    if (!context.champion || context.champion->is_baseline || context.champion->from_source || !context.cost_model) {
        return std::nullopt;
    }
    const Template* tmpl = find_template(context, context.champion->template_name);
    if (!tmpl) return std::nullopt;
    return context.cost_model->predict(tmpl->family(), merged_quantities(*tmpl, context.champion->params),
                                       &context.champion->params);
}

class Architect final : public Role {
public:
    explicit Architect(int samples_per_family) : m_samples_per_family(samples_per_family) {}
    std::string name() const override { return "architect"; }

    std::vector<Proposal> propose(const SearchContext& context) override {
        std::mt19937_64 random(context.seed);
        struct FamilyBest {
            std::vector<ScoredAssignment> ranked;
            std::int64_t explored = 0;
            std::optional<ScoredAssignment> defaults;
            std::optional<ScoredAssignment> entry;  ///< the model's best point (unmeasured families)
        };
        std::vector<FamilyBest> families;
        for (const auto& tmpl : context.templates) {
            if (tmpl->is_baseline() || tmpl->params().empty()) continue;
            std::vector<ScoredAssignment> samples;
            std::optional<ScoredAssignment> defaults =
                score_assignment(context, *tmpl, tmpl->default_assignment(), fmt::format("family {} (defaults)", tmpl->family()));
            if (defaults) samples.push_back(*defaults);
            for (int sample_idx = 0; sample_idx < m_samples_per_family; ++sample_idx) {
                Assignment assignment;
                for (const auto& param : tmpl->params()) {
                    std::uniform_int_distribution<std::size_t> pick(0, param.values.size() - 1);
                    assignment[param.name] = param.values[pick(random)];
                }
                if (auto scored = score_assignment(context, *tmpl, assignment, fmt::format("family {}", tmpl->family()))) {
                    samples.push_back(std::move(*scored));
                }
            }
            rank(samples, random());
            auto explored = context.family_designs.find(tmpl->family());
            const std::int64_t count = explored == context.family_designs.end() ? 0 : explored->second;
            std::optional<ScoredAssignment> entry;
            if (count == 0) entry = entry_point(context, *tmpl, defaults, samples);
            families.push_back({std::move(samples), count, std::move(defaults), std::move(entry)});
        }
        // Families never measured first, least explored first: each entered at the point the
        // fitted model predicts best for this chip, with the parameters the model cannot see
        // (overlap, placement and layout choices no quantity shows) at their declared defaults,
        // the template author's reading of the docs; then at the defaults themselves, then at
        // its best predicted samples (a compile failure costs no device run). Once every family
        // has a measurement, its learnt correction says where it stands: then all samples
        // compete on their corrected prediction, so that the families that measured well get
        // the proposals instead of a round-robin that keeps paying for families already shown
        // to be slow.
        std::stable_sort(families.begin(), families.end(),
                         [](const FamilyBest& lhs, const FamilyBest& rhs) { return lhs.explored < rhs.explored; });
        std::vector<ScoredAssignment> ordered;
        std::vector<ScoredAssignment> measured;
        // In the families already measured, only points the corrected model predicts faster than
        // it predicts the champion: the tuner and the analyst walk the champion's neighbourhood,
        // and a sample the model itself ranks behind the champion is a device run spent on noise.
        const std::optional<double> champion_predicted = predicted_champion(context);
        for (auto& family : families) {
            if (family.explored == 0) continue;
            for (const auto& sample : family.ranked) {
                if (!champion_predicted || (sample.predicted && *sample.predicted < *champion_predicted * 0.99)) {
                    measured.push_back(sample);
                }
            }
        }
        // Among the unmeasured families, the one whose best point the model predicts fastest first.
        auto first_prediction = [](const FamilyBest& family) {
            return family.ranked.empty() || !family.ranked.front().predicted ? 1e300 : *family.ranked.front().predicted;
        };
        std::stable_sort(families.begin(), families.end(), [&](const FamilyBest& lhs, const FamilyBest& rhs) {
            if ((lhs.explored == 0) != (rhs.explored == 0)) return lhs.explored == 0;
            return lhs.explored == 0 && first_prediction(lhs) < first_prediction(rhs);
        });
        // the unmeasured families entered at the model's best point for this chip (the defaults
        // where the model has no prediction), the one predicted fastest first
        std::vector<ScoredAssignment> entries;
        for (const auto& family : families) {
            if (family.explored != 0) continue;
            if (family.entry) entries.push_back(*family.entry);
            else if (family.defaults) entries.push_back(*family.defaults);
        }
        std::stable_sort(entries.begin(), entries.end(), [](const ScoredAssignment& lhs, const ScoredAssignment& rhs) {
            return lhs.predicted.value_or(1e300) < rhs.predicted.value_or(1e300);
        });
        // then the defaults of the families entered elsewhere
        for (const auto& family : families) {
            if (family.explored == 0 && family.entry && family.defaults) entries.push_back(*family.defaults);
        }
        ordered.insert(ordered.end(), entries.begin(), entries.end());
        std::size_t depth = 0;
        for (const auto& family : families) {
            if (family.explored == 0) depth = std::max(depth, family.ranked.size());
        }
        for (std::size_t rank_idx = 0; rank_idx < depth; ++rank_idx) {
            for (const auto& family : families) {
                if (family.explored == 0 && rank_idx < family.ranked.size()) ordered.push_back(family.ranked[rank_idx]);
            }
        }
        rank(measured, random());
        ordered.insert(ordered.end(), measured.begin(), measured.end());
        double champion = context.champion_cycles;
        return to_proposals(context, ordered, name(), [&](const ScoredAssignment& item) {
            auto explored = context.family_designs.find(item.source_template->family());
            std::int64_t count = explored == context.family_designs.end() ? 0 : explored->second;
            return fmt::format("explore family {} ({} designs so far): best predicted of {} seeded samples, {} "
                               "cycles vs champion {}",
                               item.source_template->family(), count, m_samples_per_family + 1,
                               cycles_text(item.predicted), champion > 0 ? fmt::format("{:.0f}", champion) : "?");
        });
    }

private:
    int m_samples_per_family;
};

/// With a wide static screen: the screen's window (its first `screen_width` unknown designs) holds
/// every one-parameter move of the champion, up to three quarters of the window, and the model's
/// best other moves after them; the rest keep the model's order behind. The window's order does
/// not matter, the screen ranks it.
void screen_singles_first(std::vector<ScoredAssignment>& scored, const SearchContext& context) {
    const std::size_t width = static_cast<std::size_t>(context.screen_width);
    const std::size_t single_room = width - width / 4;
    std::vector<ScoredAssignment> window;
    std::vector<ScoredAssignment> rest;
    std::size_t singles = 0;
    auto known = [&](const ScoredAssignment& item) {
        return context.is_known && context.is_known(item.source_template->instantiate(item.assignment).content_hash);
    };
    for (auto& item : scored) {
        if (item.changed_params == 1 && singles < single_room && !known(item)) {
            window.push_back(std::move(item));
            ++singles;
        } else {
            rest.push_back(std::move(item));
        }
    }
    std::size_t filled = singles;
    std::vector<ScoredAssignment> ordered = std::move(window);
    std::vector<ScoredAssignment> behind;
    for (auto& item : rest) {
        if (filled < width && !known(item)) {
            ordered.push_back(std::move(item));
            ++filled;
        } else {
            behind.push_back(std::move(item));
        }
    }
    for (auto& item : behind) ordered.push_back(std::move(item));
    scored = std::move(ordered);
}

class Tuner final : public Role {
public:
    std::string name() const override { return "tuner"; }

    std::vector<Proposal> propose(const SearchContext& context) override {
        if (!context.champion || context.champion->is_baseline) return {};
        const Template* tmpl = find_template(context, context.champion->template_name);
        if (!tmpl) return {};
        std::vector<ScoredAssignment> scored;
        // a one-parameter move to a value never measured ranks as if k_explore faster
        std::map<std::string, double> effects;
        if (context.cost_model) effects = context.cost_model->param_effects(tmpl->family());
        for (auto& [assignment, move] : neighbour_assignments(*tmpl, context.champion->params)) {
            auto item = score_assignment(context, *tmpl, assignment, move);
            if (!item) continue;
            item->explore = explore_credit(context, effects, item->assignment);
            scored.push_back(std::move(*item));
        }
        rank(scored, context.seed);
        if (context.screen_width > context.max_proposals) screen_singles_first(scored, context);
        std::optional<double> champion_predicted = context.champion_model_cycles;
        if (!context.champion_quantities && context.cost_model) {
            champion_predicted = context.cost_model->predict(tmpl->family(), merged_quantities(*tmpl, context.champion->params),
                                                             &context.champion->params);
        }
        auto proposals = to_proposals(context, scored, name(), [&](const ScoredAssignment& item) {
            return fmt::format("neighbour of the champion ranked by the cost model: predicted {} vs {} cycles{}",
                               cycles_text(item.predicted), cycles_text(champion_predicted),
                               item.explore > 0.0 ? "; moves to a value never measured" : "");
        });
        if (!proposals.empty() || !context.is_known) return proposals;
        // Every feasible neighbour of the champion is measured (or in flight): a family of a few
        // params has some 50 of them where DM binds, fewer than a 100-run budget. The walk goes on
        // from the neighbours, one or two moves farther, ranked by the model as before, instead of
        // ending the kernel with runs left (session 28: a project_qkv search stopped after 75 of its
        // 100 runs).
        std::vector<ScoredAssignment> farther;
        std::set<Assignment> seen = {context.champion->params};
        for (const auto& item : scored) seen.insert(item.assignment);
        for (const auto& via : scored) {
            for (auto& [assignment, move] : neighbour_assignments(*tmpl, via.assignment)) {
                if (!seen.insert(assignment).second) continue;
                auto item = score_assignment(context, *tmpl, assignment, via.move + " then " + move);
                if (!item) continue;
                item->explore = explore_credit(context, effects, item->assignment);
                farther.push_back(std::move(*item));
            }
        }
        rank(farther, context.seed ^ 0x2545f4914f6cdd1dULL);
        return to_proposals(context, farther, name(), [&](const ScoredAssignment& item) {
            return fmt::format("the champion's neighbours are all measured: a move beyond them ranked by the cost "
                               "model, predicted {} vs {} cycles",
                               cycles_text(item.predicted), cycles_text(champion_predicted));
        });
    }
};

}  // namespace

void prepare_champion_model(SearchContext& context) {
    context.champion_quantities.reset();
    context.champion_model_cycles.reset();
    if (!context.champion || context.champion->is_baseline || context.champion->from_source) return;
    const Template* tmpl = find_template(context, context.champion->template_name);
    if (!tmpl) return;
    context.champion_quantities = merged_quantities(*tmpl, context.champion->params);
    if (context.cost_model) {
        context.champion_model_cycles =
            context.cost_model->predict(tmpl->family(), *context.champion_quantities, &context.champion->params);
    }
}

std::optional<ScoredAssignment> score_assignment(const SearchContext& context, const Template& tmpl,
                                                 const Assignment& assignment, std::string move) {
    if (tmpl.check_domain(assignment)) return std::nullopt;
    if (tmpl.check_constraints(assignment)) return std::nullopt;
    ScoredAssignment scored;
    scored.source_template = &tmpl;
    scored.assignment = assignment;
    scored.quantities = merged_quantities(tmpl, assignment);
    if (context.rule_check && context.rule_check(scored.quantities)) return std::nullopt;
    if (context.cost_model) scored.predicted = context.cost_model->predict(tmpl.family(), scored.quantities, &assignment);
    scored.move = std::move(move);
    if (context.champion && context.champion->template_name == tmpl.name()) {
        for (const auto& [name, value] : assignment) {
            auto was = context.champion->params.find(name);
            if (was == context.champion->params.end() || was->second != value) ++scored.changed_params;
        }
    }
    if (scored.predicted && scored.changed_params > 0 && context.cost_model) {
        // The champion's prediction by the same model (once per proposal where the search prepared
        // it): the move's predicted gain is the ratio, shrunk by how far such gains have come true
        // (prediction_trust).
        const auto champion_predicted =
            context.champion_quantities
                ? context.champion_model_cycles
                : context.cost_model->predict(tmpl.family(), merged_quantities(tmpl, context.champion->params),
                                              &context.champion->params);
        if (champion_predicted && *champion_predicted > 0.0 && *scored.predicted > 0.0) {
            const double log_gain = std::log(*scored.predicted / *champion_predicted);
            scored.model_log_gain = log_gain;
            // Only a predicted gain is shrunk: the trust is learnt from the gains the model
            // promised; its predicted losses are not what the search has been measuring.
            auto trust = context.prediction_trust.find(scored.changed_params);
            if (log_gain < 0.0 && trust != context.prediction_trust.end()) {
                scored.predicted = *champion_predicted * std::exp(trust->second * log_gain);
            }
        }
    }
    return scored;
}

std::vector<std::pair<Assignment, std::string>> neighbour_assignments(const Template& tmpl, const Assignment& base) {
    std::vector<std::pair<Assignment, std::string>> result;
    const auto& params = tmpl.params();
    auto index_of = [&](const config::TemplateParam& param) {
        auto found = std::find(param.values.begin(), param.values.end(), base.at(param.name));
        return static_cast<std::ptrdiff_t>(found - param.values.begin());
    };
    for (const auto& param : params) {
        if (!base.count(param.name)) return result;
    }
    for (const auto& param : params) {
        for (double value : param.values) {
            if (value == base.at(param.name)) continue;
            Assignment next = base;
            next[param.name] = value;
            result.emplace_back(std::move(next), fmt::format("{} {}→{}", param.name, format_param_value(base.at(param.name)),
                                                             format_param_value(value)));
        }
    }
    for (std::size_t first_idx = 0; first_idx < params.size(); ++first_idx) {
        for (std::size_t second_idx = first_idx + 1; second_idx < params.size(); ++second_idx) {
            const auto& first = params[first_idx];
            const auto& second = params[second_idx];
            for (int first_step : {-1, 1}) {
                for (int second_step : {-1, 1}) {
                    std::ptrdiff_t first_pos = index_of(first) + first_step;
                    std::ptrdiff_t second_pos = index_of(second) + second_step;
                    if (first_pos < 0 || second_pos < 0 || first_pos >= std::ssize(first.values) ||
                        second_pos >= std::ssize(second.values)) {
                        continue;
                    }
                    Assignment next = base;
                    next[first.name] = first.values[static_cast<std::size_t>(first_pos)];
                    next[second.name] = second.values[static_cast<std::size_t>(second_pos)];
                    result.emplace_back(std::move(next),
                                        fmt::format("{} {}→{}, {} {}→{}", first.name,
                                                    format_param_value(base.at(first.name)),
                                                    format_param_value(next.at(first.name)), second.name,
                                                    format_param_value(base.at(second.name)),
                                                    format_param_value(next.at(second.name))));
                }
            }
        }
    }
    return result;
}

Attribution attribute(const SearchContext& context) {
    Attribution attribution;
    attribution.measured_cycles = context.champion_cycles;
    if (context.speed_of_light_cycles > 0.0 && context.champion_cycles > 0.0) {
        attribution.sol_ratio = context.champion_cycles / context.speed_of_light_cycles;
    }
    if (!context.champion || context.champion->is_baseline || context.champion->from_source || !context.cost_model) {
        attribution.dominant = "unexplained";
        attribution.text = fmt::format("champion {} ({:.0f} cycles{}) declares no quantities: no attribution",
                                       context.champion ? context.champion->label() : "none", context.champion_cycles,
                                       attribution.sol_ratio > 0 ? fmt::format(", {:.1f}× the weight-movement minimum",
                                                                               attribution.sol_ratio)
                                                                 : "");
        return attribution;
    }
    const std::map<std::string, double> quantities = context.champion->quantities_and_features();
    attribution.terms = context.cost_model->terms(quantities);
    attribution.predicted_cycles = attribution.terms.combined();
    attribution.explained = attribution.measured_cycles > 0.0 ? attribution.predicted_cycles / attribution.measured_cycles
                                                              : 0.0;
    attribution.dominant = attribution.terms.dominant();
    if (attribution.measured_cycles > 0.0 && attribution.explained < 0.5) attribution.dominant = "unexplained";
    if (attribution.dominant.empty()) attribution.dominant = "unexplained";
    const config::CostTermSpec* dominant_term = context.cost_model->term_spec(attribution.dominant);
    if (dominant_term) attribution.reduce = dominant_term->reduce;
    std::string terms_text;
    for (const auto& [name, value] : attribution.terms.as_map()) {
        if (value <= 0.0) continue;
        terms_text += fmt::format("{}{} {:.0f}", terms_text.empty() ? "" : ", ", name, value);
    }
    attribution.text = fmt::format(
        "champion {:.0f} cycles{}; model terms: {}; model explains {:.0f}%; dominant: {}{}", attribution.measured_cycles,
        attribution.sol_ratio > 0 ? fmt::format(" ({:.2f}× the weight-movement minimum)", attribution.sol_ratio) : "",
        terms_text.empty() ? "none" : terms_text, 100.0 * attribution.explained, attribution.dominant,
        !dominant_term || dominant_term->lever.empty() ? " (overlap, stalls or penalties the model does not see)"
                                                       : " → " + dominant_term->lever);
    return attribution;
}

std::unique_ptr<Role> make_analyst() { return std::make_unique<Analyst>(); }
std::unique_ptr<Role> make_architect(int samples_per_family) { return std::make_unique<Architect>(samples_per_family); }
std::unique_ptr<Role> make_tuner() { return std::make_unique<Tuner>(); }

std::vector<std::unique_ptr<Role>> make_heuristic_roles() {
    std::vector<std::unique_ptr<Role>> roles;
    roles.push_back(make_analyst());
    roles.push_back(make_architect());
    roles.push_back(make_tuner());
    return roles;
}

}  // namespace npuopt::search
