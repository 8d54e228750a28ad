// The schema, as an ordered list of migration steps (SCHEMA.md describes the tables).
// Never edit a released step: append a new one.

#include "store/database.hpp"

namespace npuopt::store {

const std::vector<Migration>& migrations() {
    static const std::vector<Migration> k_migrations = {
        {1, "campaign meta, toolchain versions, designs, evaluations, measurements, events", R"sql(
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE toolchain_versions (
    id         INTEGER PRIMARY KEY,
    target     TEXT NOT NULL,
    name       TEXT NOT NULL,
    version    TEXT NOT NULL,
    first_seen TEXT NOT NULL,
    UNIQUE (target, name, version)
);
CREATE TABLE designs (
    id           INTEGER PRIMARY KEY,
    content_hash TEXT NOT NULL UNIQUE,
    target       TEXT NOT NULL,
    kernel       TEXT NOT NULL,
    shape        TEXT NOT NULL,
    template     TEXT NOT NULL,
    params       TEXT NOT NULL DEFAULT '{}',
    source       TEXT,
    parent_id    INTEGER REFERENCES designs (id),
    created_at   TEXT NOT NULL
);
CREATE INDEX designs_by_kernel ON designs (target, kernel, shape);
CREATE TABLE evaluations (
    id                   INTEGER PRIMARY KEY,
    design_id            INTEGER NOT NULL REFERENCES designs (id),
    toolchain_version_id INTEGER REFERENCES toolchain_versions (id),
    bench_config_hash    TEXT NOT NULL,
    stage                TEXT NOT NULL,
    verdict              TEXT NOT NULL,
    reason               TEXT NOT NULL DEFAULT '',
    secs                 REAL NOT NULL DEFAULT 0,
    stale                INTEGER NOT NULL DEFAULT 0,
    created_at           TEXT NOT NULL
);
CREATE INDEX evaluations_by_design ON evaluations (design_id, stage);
CREATE TABLE measurements (
    id            INTEGER PRIMARY KEY,
    evaluation_id INTEGER NOT NULL REFERENCES evaluations (id),
    launch_order  INTEGER NOT NULL,
    seed          INTEGER NOT NULL,
    repeat_idx    INTEGER NOT NULL,
    cycles        REAL NOT NULL,
    UNIQUE (evaluation_id, launch_order, repeat_idx)
);
CREATE TABLE events (
    id      INTEGER PRIMARY KEY,
    ts      TEXT NOT NULL,
    kind    TEXT NOT NULL,
    payload TEXT NOT NULL DEFAULT '{}'
);
)sql"},
        {2, "knowledge entries and legality rules; wall time per measurement", R"sql(
ALTER TABLE measurements ADD COLUMN wall_ms REAL;
CREATE TABLE knowledge_entries (
    id                   INTEGER PRIMARY KEY,
    target               TEXT NOT NULL,
    kind                 TEXT NOT NULL,
    key                  TEXT NOT NULL,
    text                 TEXT NOT NULL DEFAULT '',
    value                REAL,
    evidence             TEXT NOT NULL DEFAULT '{}',
    toolchain_version_id INTEGER REFERENCES toolchain_versions (id),
    stale                INTEGER NOT NULL DEFAULT 0,
    created_at           TEXT NOT NULL
);
CREATE INDEX knowledge_by_key ON knowledge_entries (target, kind, key);
CREATE TABLE rules (
    id                   INTEGER PRIMARY KEY,
    target               TEXT NOT NULL,
    code                 TEXT NOT NULL,
    statement            TEXT NOT NULL,
    quantity             TEXT NOT NULL DEFAULT '',
    limit_value          REAL,
    confidence           REAL NOT NULL DEFAULT 0,
    toolchain_version_id INTEGER REFERENCES toolchain_versions (id),
    status               TEXT NOT NULL DEFAULT 'proposed',
    stale                INTEGER NOT NULL DEFAULT 0,
    created_at           TEXT NOT NULL
);
CREATE INDEX rules_by_code ON rules (target, code);
)sql"},
        {3, "design trees: edges (role, move, reason, outcome), champion path, role stats, campaign state", R"sql(
CREATE TABLE tree_edges (
    id               INTEGER PRIMARY KEY,
    kernel           TEXT NOT NULL,
    design_id        INTEGER NOT NULL REFERENCES designs (id),
    parent_design_id INTEGER REFERENCES designs (id),
    role             TEXT NOT NULL,
    move             TEXT NOT NULL DEFAULT '',
    reason           TEXT NOT NULL DEFAULT '',
    step             INTEGER NOT NULL,
    verdict          TEXT NOT NULL,
    last_stage       TEXT NOT NULL DEFAULT '',
    final_reason     TEXT NOT NULL DEFAULT '',
    cycles           REAL,
    predicted_cycles REAL,
    speedup          REAL,
    device_runs      INTEGER NOT NULL DEFAULT 0,
    device_secs      REAL NOT NULL DEFAULT 0,
    quantities       TEXT NOT NULL DEFAULT '{}',
    created_at       TEXT NOT NULL,
    UNIQUE (kernel, design_id)
);
CREATE INDEX tree_edges_by_step ON tree_edges (kernel, step);
CREATE TABLE champion_path (
    id           INTEGER PRIMARY KEY,
    kernel       TEXT NOT NULL,
    design_id    INTEGER NOT NULL REFERENCES designs (id),
    step         INTEGER NOT NULL,
    cycles       REAL NOT NULL,
    reason       TEXT NOT NULL DEFAULT '',
    active       INTEGER NOT NULL DEFAULT 1,
    ended_reason TEXT NOT NULL DEFAULT '',
    created_at   TEXT NOT NULL
);
CREATE INDEX champion_path_by_kernel ON champion_path (kernel, active);
CREATE TABLE role_stats (
    kernel      TEXT NOT NULL,
    role        TEXT NOT NULL,
    pulls       INTEGER NOT NULL DEFAULT 0,
    accepts     INTEGER NOT NULL DEFAULT 0,
    empty       INTEGER NOT NULL DEFAULT 0,
    reward      REAL NOT NULL DEFAULT 0,
    device_secs REAL NOT NULL DEFAULT 0,
    rate_sum    REAL NOT NULL DEFAULT 0,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (kernel, role)
);
CREATE TABLE campaign_state (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
)sql"},
        // Knowledge base (src/knowledge; accessors in knowledge_store.hpp). One FTS5 table for every
        // kind, so that bm25() scores of sections, summaries, rules and facts come from one corpus and
        // rank together; triggers keep it in step with its sources, whoever writes them
        // (knowledge_entries belongs to the microbenchmark/hardware-model code). The v2 `rules` table
        // holds a rule's core; rule_facets its kind (upper_bound | lower_bound | multiple_of |
        // statement | runtime), features and retirement; rule statuses add demoted, retired, unverified.
        {4, "knowledge base: doc sections, checked summaries, rule facets and evidence, one FTS5 index", R"sql(
CREATE TABLE IF NOT EXISTS doc_sections (
    id                   INTEGER PRIMARY KEY,
    target               TEXT NOT NULL,
    doc_set              TEXT NOT NULL DEFAULT '',
    source_path          TEXT NOT NULL,
    heading_path         TEXT NOT NULL,
    ordinal              INTEGER NOT NULL DEFAULT 0,
    text                 TEXT NOT NULL,
    content_hash         TEXT NOT NULL,
    toolchain_version_id INTEGER REFERENCES toolchain_versions (id),
    stale                INTEGER NOT NULL DEFAULT 0,
    created_at           TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS doc_sections_by_version ON doc_sections (target, toolchain_version_id);
CREATE TABLE IF NOT EXISTS doc_summaries (
    id             INTEGER PRIMARY KEY,
    section_id     INTEGER NOT NULL REFERENCES doc_sections (id),
    summarizer     TEXT NOT NULL,
    text           TEXT NOT NULL,
    claims         TEXT NOT NULL DEFAULT '[]',
    claims_dropped INTEGER NOT NULL DEFAULT 0,
    stale          INTEGER NOT NULL DEFAULT 0,
    created_at     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS doc_summaries_by_section ON doc_summaries (section_id);
CREATE TABLE IF NOT EXISTS summary_check_failures (
    id         INTEGER PRIMARY KEY,
    summary_id INTEGER NOT NULL REFERENCES doc_summaries (id),
    claim      TEXT NOT NULL,
    reasons    TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS rule_facets (
    rule_id        INTEGER PRIMARY KEY REFERENCES rules (id),
    kind           TEXT NOT NULL,
    features       TEXT NOT NULL DEFAULT '{}',
    signature      TEXT NOT NULL,
    origin         TEXT NOT NULL DEFAULT 'check',
    evidence_count INTEGER NOT NULL DEFAULT 0,
    counter_count  INTEGER NOT NULL DEFAULT 0,
    retired_in     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS rule_facets_by_signature ON rule_facets (signature);
CREATE TABLE IF NOT EXISTS rule_evidence (
    id                INTEGER PRIMARY KEY,
    rule_id           INTEGER NOT NULL REFERENCES rules (id),
    design_hash       TEXT NOT NULL,
    source_path       TEXT NOT NULL DEFAULT '',
    outcome           TEXT NOT NULL,
    toolchain_version TEXT NOT NULL,
    quantities        TEXT NOT NULL DEFAULT '{}',
    message           TEXT NOT NULL DEFAULT '',
    created_at        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS rule_evidence_by_rule ON rule_evidence (rule_id);
CREATE VIRTUAL TABLE IF NOT EXISTS kb_fts USING fts5 (
    title, body, kind UNINDEXED, ref_id UNINDEXED, target UNINDEXED, tokenize = "porter unicode61 tokenchars '_'"
);
CREATE TRIGGER IF NOT EXISTS doc_sections_fts_insert AFTER INSERT ON doc_sections BEGIN
    INSERT INTO kb_fts (title, body, kind, ref_id, target) VALUES (new.heading_path, new.text, 'section', new.id, new.target);
END;
CREATE TRIGGER IF NOT EXISTS doc_summaries_fts_insert AFTER INSERT ON doc_summaries BEGIN
    INSERT INTO kb_fts (title, body, kind, ref_id, target)
    SELECT heading_path, new.text, 'summary', new.id, target FROM doc_sections WHERE id = new.section_id;
END;
CREATE TRIGGER IF NOT EXISTS rules_fts_insert AFTER INSERT ON rules BEGIN
    INSERT INTO kb_fts (title, body, kind, ref_id, target)
    VALUES (trim(new.code || ' ' || new.quantity), new.statement, 'rule', new.id, new.target);
END;
CREATE TRIGGER IF NOT EXISTS rules_fts_update AFTER UPDATE OF code, quantity, statement ON rules BEGIN
    DELETE FROM kb_fts WHERE kind = 'rule' AND ref_id = old.id;
    INSERT INTO kb_fts (title, body, kind, ref_id, target)
    VALUES (trim(new.code || ' ' || new.quantity), new.statement, 'rule', new.id, new.target);
END;
CREATE TRIGGER IF NOT EXISTS knowledge_entries_fts_insert AFTER INSERT ON knowledge_entries BEGIN
    INSERT INTO kb_fts (title, body, kind, ref_id, target)
    VALUES (new.kind || ' ' || new.key, new.text || coalesce(' = ' || new.value, ''), 'fact', new.id, new.target);
END;
CREATE TRIGGER IF NOT EXISTS knowledge_entries_fts_update AFTER UPDATE OF kind, key, text, value ON knowledge_entries BEGIN
    DELETE FROM kb_fts WHERE kind = 'fact' AND ref_id = old.id;
    INSERT INTO kb_fts (title, body, kind, ref_id, target)
    VALUES (new.kind || ' ' || new.key, new.text || coalesce(' = ' || new.value, ''), 'fact', new.id, new.target);
END;
CREATE TRIGGER IF NOT EXISTS knowledge_entries_fts_delete AFTER DELETE ON knowledge_entries BEGIN
    DELETE FROM kb_fts WHERE kind = 'fact' AND ref_id = old.id;
END;
INSERT INTO kb_fts (title, body, kind, ref_id, target)
SELECT kind || ' ' || key, text || coalesce(' = ' || value, ''), 'fact', id, target FROM knowledge_entries
WHERE id NOT IN (SELECT ref_id FROM kb_fts WHERE kind = 'fact');
)sql"},
        // Every launch is a row, failed ones included: a measurement says which side of a race it ran
        // (candidate | champion), its outcome (ok | transient | failed) and error, its retry attempt and
        // race pair; cycles become nullable (a failed launch has none), so the table is rebuilt (SQLite
        // cannot drop NOT NULL in place). Rows from v4 were all timed launches: outcome 'ok', attempt 0,
        // side 'champion' where they hang off a champion's race row, else 'candidate'. Evaluations
        // gain their launch counts (NULL on rows from before v5: not recorded then).
        {5, "measurements of failed launches (side, outcome, error, attempt, pair); launch counts per evaluation", R"sql(
CREATE TABLE measurements_v5 (
    id            INTEGER PRIMARY KEY,
    evaluation_id INTEGER NOT NULL REFERENCES evaluations (id),
    launch_order  INTEGER NOT NULL,
    seed          INTEGER NOT NULL,
    repeat_idx    INTEGER NOT NULL,
    cycles        REAL,
    wall_ms       REAL,
    side          TEXT NOT NULL DEFAULT 'candidate' CHECK (side IN ('candidate', 'champion')),
    outcome       TEXT NOT NULL DEFAULT 'ok' CHECK (outcome IN ('ok', 'transient', 'failed')),
    error         TEXT,
    attempt       INTEGER NOT NULL DEFAULT 0,
    pair_idx      INTEGER,
    UNIQUE (evaluation_id, launch_order, repeat_idx),
    CHECK ((outcome = 'ok') = (error IS NULL)),
    CHECK (outcome <> 'ok' OR cycles IS NOT NULL)
);
INSERT INTO measurements_v5 (id, evaluation_id, launch_order, seed, repeat_idx, cycles, wall_ms, side, outcome, error,
                             attempt, pair_idx)
SELECT m.id, m.evaluation_id, m.launch_order, m.seed, m.repeat_idx, m.cycles, m.wall_ms,
       CASE WHEN e.stage = 'race' AND e.verdict = 'champion' THEN 'champion' ELSE 'candidate' END, 'ok', NULL, 0, NULL
FROM measurements m LEFT JOIN evaluations e ON e.id = m.evaluation_id;
DROP TABLE measurements;
ALTER TABLE measurements_v5 RENAME TO measurements;
CREATE INDEX measurements_by_outcome ON measurements (evaluation_id, outcome);
ALTER TABLE evaluations ADD COLUMN launches INTEGER;
ALTER TABLE evaluations ADD COLUMN failed_launches INTEGER;
ALTER TABLE evaluations ADD COLUMN retries INTEGER;
)sql"},
        // v6: the LLM's audit (every prompt and reply, zlib-compressed, with their hashes, tokens
        // and cost; llm_store.hpp) and the provenance of tree edges whose design an LLM wrote.
        {6, "LLM calls (prompts and replies compressed, hashes, tokens, cost); LLM provenance of tree edges", R"sql(
CREATE TABLE llm_calls (
    id                INTEGER PRIMARY KEY,
    kernel            TEXT NOT NULL,
    role              TEXT NOT NULL,
    purpose           TEXT NOT NULL DEFAULT 'propose',
    strategy          TEXT NOT NULL DEFAULT '',
    model             TEXT NOT NULL DEFAULT '',
    step              INTEGER NOT NULL DEFAULT 0,
    status            TEXT NOT NULL,
    message           TEXT NOT NULL DEFAULT '',
    prompt_hash       TEXT NOT NULL,
    reply_hash        TEXT NOT NULL DEFAULT '',
    prompt_z          BLOB NOT NULL,
    reply_z           BLOB,
    choices           TEXT NOT NULL DEFAULT '[]',
    context           TEXT NOT NULL DEFAULT '[]',
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    tokens_reported   INTEGER NOT NULL DEFAULT 1,
    cost              REAL NOT NULL DEFAULT 0,
    n                 INTEGER NOT NULL DEFAULT 1,
    attempts          INTEGER NOT NULL DEFAULT 0,
    http_status       INTEGER,
    wall_secs         REAL NOT NULL DEFAULT 0,
    created_at        TEXT NOT NULL
);
CREATE INDEX llm_calls_by_kernel ON llm_calls (kernel, role);
ALTER TABLE tree_edges ADD COLUMN llm_call_id INTEGER REFERENCES llm_calls (id);
ALTER TABLE tree_edges ADD COLUMN prompt_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE tree_edges ADD COLUMN reply_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE tree_edges ADD COLUMN llm_tokens INTEGER NOT NULL DEFAULT 0;
)sql"},
        // v7: portable tuning records (`npuopt export` / `npuopt import`; records_store.hpp). An import
        // is a row of `imports`; the designs it added are rows of `imported_designs`; an imported
        // evaluation keeps its import, the fingerprint it had where it was measured (imports dedupe on
        // it) and a note saying where it came from and why it is stale, where it is.
        {7, "imports and imported designs; the import, origin fingerprint and note of imported evaluations", R"sql(
CREATE TABLE imports (
    id                  INTEGER PRIMARY KEY,
    created_at          TEXT NOT NULL,
    source_file         TEXT NOT NULL,
    source_campaign     TEXT NOT NULL DEFAULT '',
    source_fingerprint  TEXT NOT NULL DEFAULT '',
    source_target       TEXT NOT NULL,
    source_toolchain    TEXT NOT NULL DEFAULT '',
    format_version      INTEGER NOT NULL,
    designs_added       INTEGER NOT NULL DEFAULT 0,
    designs_present     INTEGER NOT NULL DEFAULT 0,
    designs_skipped     INTEGER NOT NULL DEFAULT 0,
    designs_queued      INTEGER NOT NULL DEFAULT 0,
    evaluations_added   INTEGER NOT NULL DEFAULT 0,
    evaluations_present INTEGER NOT NULL DEFAULT 0,
    evaluations_stale   INTEGER NOT NULL DEFAULT 0,
    measurements_added  INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE imported_designs (
    import_id    INTEGER NOT NULL REFERENCES imports (id),
    design_id    INTEGER NOT NULL REFERENCES designs (id),
    origin_hash  TEXT NOT NULL,
    origin_role  TEXT NOT NULL DEFAULT '',
    queued       INTEGER NOT NULL DEFAULT 0,
    stale        INTEGER NOT NULL DEFAULT 0,
    stale_reason TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (import_id, design_id)
);
CREATE INDEX imported_designs_by_design ON imported_designs (design_id);
ALTER TABLE evaluations ADD COLUMN import_id INTEGER REFERENCES imports (id);
ALTER TABLE evaluations ADD COLUMN origin_fingerprint TEXT;
ALTER TABLE evaluations ADD COLUMN import_note TEXT;
CREATE INDEX evaluations_by_origin ON evaluations (origin_fingerprint);
)sql"},
    };
    return k_migrations;
}

}  // namespace npuopt::store
