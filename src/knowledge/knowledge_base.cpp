#include "knowledge/knowledge_base.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include <map>

#include "core/error.hpp"
#include "knowledge/docs.hpp"

namespace npuopt::knowledge {

namespace {

std::string meta_key(const std::string& target, std::string_view what) {
    return fmt::format("knowledge.{}.{}", target, what);
}

nlohmann::json parse_or(const std::string& text, nlohmann::json fallback) {
    auto json = nlohmann::json::parse(text, nullptr, false);
    return json.is_discarded() ? fallback : json;
}

}  // namespace

KnowledgeBase::KnowledgeBase(store::Database& database, std::string target, std::filesystem::path docs_dir)
    : m_store(std::make_unique<store::KnowledgeStore>(database)), m_target(std::move(target)),
      m_docs_dir(std::move(docs_dir)) {}

KnowledgeBase KnowledgeBase::for_target(store::Database& database, const config::TargetConfig& target) {
    return KnowledgeBase(database, target.name, target.docs_dir);
}

std::string KnowledgeBase::current_version() { return m_store->meta(meta_key(m_target, "toolchain_version")).value_or(""); }

std::string KnowledgeBase::toolchain_name() { return m_store->meta(meta_key(m_target, "toolchain_name")).value_or(""); }

void KnowledgeBase::set_current_version(const std::string& toolchain_name, const std::string& version) {
    store::Transaction transaction(m_store->database());
    m_store->toolchain_version_id(m_target, toolchain_name, version);
    m_store->set_meta(meta_key(m_target, "toolchain_name"), toolchain_name);
    m_store->set_meta(meta_key(m_target, "toolchain_version"), version);
    transaction.commit();
}

IngestReport KnowledgeBase::ingest_docs(Summarizer* summarizer) {
    const std::string version = current_version();
    if (version.empty()) {
        throw Error(ErrorKind::invalid_input,
                    fmt::format("knowledge base of {} has no toolchain version yet: refresh it first", m_target));
    }
    auto doc_set = select_doc_set(m_docs_dir, version);
    if (!doc_set) {
        throw Error(ErrorKind::invalid_config,
                    fmt::format("target {}: no documentation for toolchain {} in {} (expected a directory of "
                                "Markdown pages, or release subdirectories such as {}/1.0)",
                                m_target, version, m_docs_dir.string(), m_docs_dir.string()));
    }
    ExtractiveSummarizer extractive;
    Summarizer& librarian = summarizer != nullptr ? *summarizer : extractive;

    IngestReport report;
    report.doc_set = doc_set->name;
    report.toolchain_version = version;
    std::vector<DocSection> sections = read_doc_set(doc_set->dir);
    report.sections = static_cast<int>(sections.size());

    std::map<std::string, store::DocSectionRecord> existing;  // source|heading → fresh record of this version
    for (auto& record : m_store->list_sections(m_target, version, false)) {
        existing[record.source_path + "|" + record.heading_path] = record;
    }

    store::Transaction transaction(m_store->database());
    for (const DocSection& section : sections) {
        const std::string key = section.source_path + "|" + section.heading_path;
        auto found = existing.find(key);
        if (found != existing.end()) {
            bool unchanged = found->second.content_hash == section.content_hash;
            if (!unchanged) m_store->mark_section_stale(found->second.id);
            existing.erase(found);
            if (unchanged) continue;
        }
        store::DocSectionRecord record;
        record.target = m_target;
        record.doc_set = doc_set->name;
        record.source_path = section.source_path;
        record.heading_path = section.heading_path;
        record.ordinal = section.ordinal;
        record.text = section.text;
        record.content_hash = section.content_hash;
        record.toolchain_version = version;
        const std::int64_t section_id = m_store->insert_section(record);
        ++report.sections_added;

        if (auto earlier = m_store->find_summary_by_content(section.content_hash, librarian.name())) {
            store::DocSummaryRecord copy = *earlier;
            copy.section_id = section_id;
            copy.stale = false;
            m_store->insert_summary(copy, m_store->list_summary_failures(earlier->id));
            ++report.summaries_reused;
            report.claims_kept += static_cast<int>(parse_or(copy.claims_json, nlohmann::json::array()).size());
            report.claims_dropped += static_cast<int>(copy.claims_dropped);
            continue;
        }
        CheckedSummary checked = check_summary(librarian.summarize(section.heading_path, section.text), section.text);
        store::DocSummaryRecord summary;
        summary.section_id = section_id;
        summary.summarizer = checked.summarizer.empty() ? librarian.name() : checked.summarizer;
        summary.claims_json = nlohmann::json(checked.kept).dump();
        for (const std::string& claim : checked.kept) summary.text += claim + "\n";
        summary.claims_dropped = static_cast<std::int64_t>(checked.failed.size());
        std::vector<store::SummaryFailureRecord> failures;
        for (const ClaimCheck& failed : checked.failed) {
            failures.push_back({0, 0, failed.claim, nlohmann::json(failed.failures).dump()});
        }
        m_store->insert_summary(summary, failures);
        ++report.summaries_written;
        report.claims_kept += static_cast<int>(checked.kept.size());
        report.claims_dropped += static_cast<int>(checked.failed.size());
    }
    for (const auto& [key, record] : existing) {
        m_store->mark_section_stale(record.id);
        ++report.sections_removed;
    }
    transaction.commit();
    return report;
}

RuleBook KnowledgeBase::rules() { return RuleBook(*m_store, m_target, current_version()); }

std::vector<SearchHit> KnowledgeBase::search(std::string_view query, int limit) {
    return knowledge::search(*m_store, m_target, query, limit);
}

nlohmann::json KnowledgeBase::export_json() {
    nlohmann::json json;
    json["target"] = m_target;
    json["toolchain_version"] = current_version();
    json["toolchain_name"] = toolchain_name();
    nlohmann::json sections = nlohmann::json::array();
    for (const auto& section : m_store->list_sections(m_target)) {
        nlohmann::json entry = {{"id", section.id},
                                {"source_path", section.source_path},
                                {"doc_set", section.doc_set},
                                {"heading_path", section.heading_path},
                                {"content_hash", section.content_hash},
                                {"toolchain_version", section.toolchain_version},
                                {"stale", section.stale}};
        if (auto summary = m_store->summary_of_section(section.id)) {
            nlohmann::json dropped = nlohmann::json::array();
            for (const auto& failure : m_store->list_summary_failures(summary->id)) {
                dropped.push_back({{"claim", failure.claim}, {"reasons", parse_or(failure.reasons_json, {})}});
            }
            entry["summary"] = {{"summarizer", summary->summarizer},
                                {"claims", parse_or(summary->claims_json, nlohmann::json::array())},
                                {"dropped_claims", dropped}};
        }
        sections.push_back(std::move(entry));
    }
    json["sections"] = std::move(sections);
    nlohmann::json rules = nlohmann::json::array();
    for (const auto& rule : m_store->list_rules(m_target)) {
        nlohmann::json evidence = nlohmann::json::array();
        for (const auto& item : m_store->list_rule_evidence(rule.id)) {
            evidence.push_back({{"design_hash", item.design_hash},
                                {"source_path", item.source_path},
                                {"outcome", item.outcome},
                                {"toolchain_version", item.toolchain_version},
                                {"quantities", parse_or(item.quantities_json, nlohmann::json::object())},
                                {"message", item.message}});
        }
        rules.push_back({{"id", rule.id},
                         {"code", rule.code},
                         {"kind", rule.kind},
                         {"statement", rule.statement},
                         {"quantity", rule.quantity},
                         {"limit", rule.limit ? nlohmann::json(*rule.limit) : nlohmann::json(nullptr)},
                         {"features", parse_or(rule.features_json, nlohmann::json::object())},
                         {"confidence", rule.confidence},
                         {"status", rule.status},
                         {"origin", rule.origin},
                         {"toolchain_version", rule.toolchain_version},
                         {"stale", rule.stale},
                         {"retired_in", rule.retired_in},
                         {"evidence_count", rule.evidence_count},
                         {"counter_count", rule.counter_count},
                         {"text", render_rule(rule)},
                         {"evidence", evidence}});
    }
    json["rules"] = std::move(rules);
    nlohmann::json facts = nlohmann::json::array();
    for (const auto& fact : m_store->list_facts(m_target)) {
        facts.push_back({{"id", fact.id},
                         {"kind", fact.kind},
                         {"key", fact.key},
                         {"text", fact.text},
                         {"value", fact.value ? nlohmann::json(*fact.value) : nlohmann::json(nullptr)},
                         {"evidence", parse_or(fact.evidence_json, nlohmann::json::object())},
                         {"toolchain_version", fact.toolchain_version},
                         {"stale", fact.stale}});
    }
    json["facts"] = std::move(facts);
    return json;
}

std::string KnowledgeBase::export_markdown() {
    const std::string version = current_version();
    std::string out = fmt::format("# Knowledge base: {}\n\nToolchain: {} {}. Entries of other versions are marked "
                                  "*stale*: kept for reference, not relied on.\n\n",
                                  m_target, toolchain_name(), version.empty() ? "(not refreshed yet)" : version);
    auto stale_mark = [](bool stale) { return stale ? " *(stale)*" : ""; };

    out += "## Legality rules\n\nLearnt from the toolchain's diagnostics and runtime failures; each with the "
           "designs that triggered it.\n\n";
    for (const auto& rule : m_store->list_rules(m_target)) {
        // render_rule() starts with the code and marks a stale rule itself: said once here
        std::string text = render_rule(rule);
        if (text.rfind(rule.code + " ", 0) == 0) text.erase(0, rule.code.size() + 1);
        out += fmt::format("- **{}** {}\n", rule.code, text);
        // evidence with the same outcome, version and message: one line naming its designs
        struct EvidenceGroup { std::string outcome, version, message; std::vector<std::string> designs; };
        std::vector<EvidenceGroup> groups;
        for (const auto& item : m_store->list_rule_evidence(rule.id)) {
            const std::string design = item.design_hash.empty() ? std::string("?") : item.design_hash.substr(0, 12);
            auto group = std::find_if(groups.begin(), groups.end(), [&](const EvidenceGroup& candidate) {
                return candidate.outcome == item.outcome && candidate.version == item.toolchain_version &&
                       candidate.message == item.message;
            });
            if (group == groups.end()) {
                groups.push_back({item.outcome, item.toolchain_version, item.message, {design}});
            } else {
                group->designs.push_back(design);
            }
        }
        constexpr std::size_t k_designs_named = 3;
        for (const auto& group : groups) {
            std::vector<std::string> named;
            for (std::size_t design_idx = 0; design_idx < std::min(group.designs.size(), k_designs_named); ++design_idx) {
                named.push_back(fmt::format("`{}`", group.designs[design_idx]));
            }
            const std::string designs =
                group.designs.size() == 1 ? fmt::format("design {}", named.front())
                : group.designs.size() <= k_designs_named
                    ? fmt::format("{} designs ({})", group.designs.size(), fmt::join(named, ", "))
                    : fmt::format("{} designs ({}, …)", group.designs.size(), fmt::join(named, ", "));
            out += fmt::format("  - {} by {} on {}: {}\n", group.outcome, designs, group.version, group.message);
        }
    }
    out += "\n## Measured facts\n";
    // A fact's text usually restates its key and value ("clusters = 2 count …", "dma_engine {…}
    // ok: …"): then it is printed after the key instead of both. Grouped by kind; the toolchain
    // named only where it is not the current one.
    std::optional<std::string> kind_shown;
    for (const auto& fact : m_store->list_facts(m_target)) {
        if (fact.kind != kind_shown) {
            kind_shown = fact.kind;
            out += fmt::format("\n### {}\n\n", fact.kind);
        }
        std::string key_as_text = fact.key;
        if (auto colon = key_as_text.find(':'); colon != std::string::npos) key_as_text[colon] = ' ';
        std::string rest;
        if (fact.text.rfind(fact.key, 0) == 0) {
            rest = fact.text.substr(fact.key.size());
        } else if (fact.text.rfind(key_as_text, 0) == 0) {
            rest = fact.text.substr(key_as_text.size());
        } else {
            rest = fmt::format(" = {} {}", fact.value ? fmt::format("{:g}", *fact.value) : std::string("—"), fact.text);
        }
        const std::string version_note =
            fact.stale || fact.toolchain_version != version ? fmt::format(" (toolchain {})", fact.toolchain_version) : "";
        out += fmt::format("- **{}**{}{}{}\n", fact.key, rest, version_note, stale_mark(fact.stale));
    }
    out += "\n## Documentation (checked summaries)\n\n";
    for (const auto& section : m_store->list_sections(m_target)) {
        out += fmt::format("### {}\n\n`{}` (docs {}, toolchain {}){}\n\n", section.heading_path, section.source_path,
                           section.doc_set.empty() ? std::string("-") : section.doc_set, section.toolchain_version,
                           stale_mark(section.stale));
        auto summary = m_store->summary_of_section(section.id);
        if (!summary) continue;
        for (const auto& claim : parse_or(summary->claims_json, nlohmann::json::array())) {
            out += fmt::format("- {}\n", claim.get<std::string>());
        }
        for (const auto& failure : m_store->list_summary_failures(summary->id)) {
            out += fmt::format("- ~~{}~~ (dropped: {})\n", failure.claim,
                               fmt::join(parse_or(failure.reasons_json, nlohmann::json::array())
                                             .get<std::vector<std::string>>(),
                                         "; "));
        }
        out += "\n";
    }
    return out;
}

}  // namespace npuopt::knowledge
