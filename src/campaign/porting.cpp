#include "campaign/porting.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/error.hpp"

namespace npuopt::campaign {

void install_source_rewrites(std::vector<std::unique_ptr<KernelRuntime>>& kernels,
                             const std::vector<knowledge::SourceRewrite>& rewrites) {
    search::SourceRewriter rewriter;
    if (!rewrites.empty()) {
        rewriter = [list = rewrites](const std::string& source) { return knowledge::apply_rewrites(source, list).source; };
    }
    for (auto& kernel : kernels) {
        for (auto& tmpl : kernel->setup.templates) tmpl->set_source_rewriter(rewriter);
    }
}

std::optional<search::Design> rewritten_design(const KernelRuntime& kernel, const search::Design& design,
                                               const std::vector<knowledge::SourceRewrite>& rewrites) {
    auto found = kernel.templates_by_name.find(design.template_name);
    if (found != kernel.templates_by_name.end()) {
        try {
            return found->second->instantiate(design.params);
        } catch (const Error&) {
        }
    }
    if (design.source.empty()) return std::nullopt;
    search::Design copy = design;
    copy.source = knowledge::apply_rewrites(design.source, rewrites).source;
    if (copy.source != design.source) {
        copy.content_hash = search::design_hash(copy.target, copy.kernel, copy.shape_text, copy.source);
    }
    return copy;
}

std::vector<std::shared_ptr<search::Template>> open_templates(const KernelRuntime& kernel, knowledge::SourceRules* rules,
                                                              std::string* why) {
    if (why) why->clear();
    if (!rules) return kernel.setup.templates;
    std::map<std::string, std::string> blocked;
    for (const auto& failure : rules->known_failures(2)) {
        blocked.emplace(failure.family, fmt::format("{}: {} ({} designs)", failure.family, failure.statement, failure.designs));
    }
    std::vector<std::shared_ptr<search::Template>> open;
    std::vector<std::string> reasons;
    bool any_family = false;
    for (const auto& tmpl : kernel.setup.templates) {
        if (tmpl->is_baseline()) {
            open.push_back(tmpl);
            continue;
        }
        any_family = true;
        auto found = blocked.find(tmpl->family());
        if (found == blocked.end()) {
            open.push_back(tmpl);
        } else if (std::find(reasons.begin(), reasons.end(), found->second) == reasons.end()) {
            reasons.push_back(found->second);
        }
    }
    const bool none_left =
        any_family && std::none_of(open.begin(), open.end(), [](const auto& tmpl) { return !tmpl->is_baseline(); });
    if (why && none_left) *why = fmt::format("{}", fmt::join(reasons, "; "));
    return open;
}

std::vector<search::Design> port_candidates(CampaignRecords& records, const KernelRuntime& kernel, int max_designs) {
    std::vector<search::Design> candidates;
    std::set<std::string> seen;
    auto add = [&](std::int64_t design_id) {
        auto record = records.store().find_design(design_id);
        if (!record) return;
        auto design = records.design_from_record(kernel, *record);
        if (!design || design->is_baseline || !seen.insert(design->content_hash).second) return;
        candidates.push_back(std::move(*design));
    };
    auto tree = records.trees();
    if (kernel.champion) add(kernel.champion_design_id);
    auto path = tree.champion_path(kernel.name());
    for (auto link = path.rbegin(); link != path.rend(); ++link) add(link->design_id);
    std::vector<std::pair<double, std::int64_t>> measured;
    for (const auto& edge : tree.list_edges(kernel.name())) {
        if (edge.cycles && *edge.cycles > 0) measured.emplace_back(*edge.cycles, edge.design_id);
    }
    std::sort(measured.begin(), measured.end());
    for (const auto& [cycles, design_id] : measured) {
        if (static_cast<int>(candidates.size()) >= max_designs) break;
        add(design_id);
    }
    return candidates;
}

}  // namespace npuopt::campaign
