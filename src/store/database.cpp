#include "store/database.hpp"

#include <sqlite3.h>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"

#include <unistd.h>

#include <array>
#include <fstream>

namespace npuopt::store {
namespace {

/// The database file a connection has open ("" for an in-memory one).
std::string file_of(sqlite3* handle) {
    const char* name = sqlite3_db_filename(handle, "main");
    return name != nullptr && *name != '\0' ? std::string(name) : std::string("(in-memory database)");
}

/// Whether `file` and its directory can be written (false on a read-only file system too).
bool file_writable(const std::string& file) {
    const std::string dir = std::filesystem::path(file).parent_path().string();
    return ::access(file.c_str(), W_OK) == 0 && ::access(dir.empty() ? "." : dir.c_str(), W_OK) == 0;
}

/// An Error(store) for SQLite result `rc` on `handle`: names the file, and says what to do when
/// the cause is a read-only file or a full disk.
Error sqlite_error(sqlite3* handle, int rc, std::string_view what) {
    const std::string file = file_of(handle);
    const std::string message = handle != nullptr ? sqlite3_errmsg(handle) : sqlite3_errstr(rc);
    switch (rc & 0xff) {
        case SQLITE_READONLY:
            return Error(ErrorKind::store,
                         fmt::format("database {} is read-only ({}): cannot {}; make the file and its directory "
                                     "writable, or use a read-only command such as `npuopt status`",
                                     file, message, what));
        case SQLITE_FULL:
            return Error(ErrorKind::store,
                         fmt::format("database {}: disk full ({}): cannot {}; free space on its file system (the "
                                     "last transaction was rolled back, nothing recorded before it is lost)",
                                     file, message, what));
        case SQLITE_CANTOPEN:
            if (!file_writable(file)) {
                return Error(ErrorKind::store,
                             fmt::format("database {} is read-only ({}: the file or its directory cannot be written, "
                                         "and SQLite needs its -wal and -shm files beside it): cannot {}; make them "
                                         "writable, or use a read-only command such as `npuopt status`",
                                         file, message, what));
            }
            return Error(ErrorKind::store, fmt::format("database {}: cannot {}: {}", file, what, message));
        case SQLITE_CORRUPT:
        case SQLITE_NOTADB:
            return Error(ErrorKind::store,
                         fmt::format("database {} is damaged ({}): cannot {}; restore it from a backup (npuopt did "
                                     "not change it)",
                                     file, message, what));
        default: return Error(ErrorKind::store, fmt::format("database {}: cannot {}: {}", file, what, message));
    }
}

/// Checks an existing file's SQLite header before SQLite opens it for writing: an empty,
/// foreign or truncated file must be an error that changes nothing, never a fresh database.
void check_existing_file(const std::filesystem::path& file) {
    std::error_code error_code;
    const auto size = std::filesystem::file_size(file, error_code);
    if (error_code) return;  // SQLite reports what is wrong with it
    if (size == 0) {
        throw Error(ErrorKind::store,
                    fmt::format("database {} is empty (0 bytes): not a campaign database; npuopt left it unchanged "
                                "(restore it from a backup, or remove it and create the campaign with `npuopt init`)",
                                file.string()));
    }
    std::array<unsigned char, 100> header{};
    std::ifstream stream(file, std::ios::binary);
    stream.read(reinterpret_cast<char*>(header.data()), static_cast<std::streamsize>(header.size()));
    const auto got = static_cast<std::size_t>(stream.gcount());
    static constexpr std::string_view k_magic{"SQLite format 3\0", 16};
    if (got < header.size() || std::string_view(reinterpret_cast<const char*>(header.data()), 16) != k_magic) {
        throw Error(ErrorKind::store,
                    fmt::format("database {} is not an SQLite database ({} bytes, no SQLite header); npuopt left it "
                                "unchanged",
                                file.string(), size));
    }
    auto be32 = [&](std::size_t at) {
        return (std::uint32_t{header[at]} << 24) | (std::uint32_t{header[at + 1]} << 16) |
               (std::uint32_t{header[at + 2]} << 8) | std::uint32_t{header[at + 3]};
    };
    std::uint64_t page_size = (std::uint32_t{header[16]} << 8) | header[17];
    if (page_size == 1) page_size = 65536;
    const std::uint32_t page_count = be32(28);
    const bool count_valid = be32(24) == be32(92) && page_count > 0;  // SQLite's own validity rule
    if (count_valid && size < page_size * page_count) {
        throw Error(ErrorKind::store,
                    fmt::format("database {} is truncated: {} bytes where its header says {} pages of {} bytes "
                                "({} bytes); restore it from a backup (npuopt left it unchanged)",
                                file.string(), size, page_count, page_size, page_size * page_count));
    }
}

/// Prepared statement, finalised on scope exit.
class Statement {
public:
    Statement(sqlite3* handle, std::string_view sql) {
        const int rc = sqlite3_prepare_v2(handle, sql.data(), static_cast<int>(sql.size()), &m_statement, nullptr);
        if (rc != SQLITE_OK) throw sqlite_error(handle, rc, fmt::format("prepare SQL: {}", sql));
    }
    ~Statement() { sqlite3_finalize(m_statement); }
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;

    void bind(std::initializer_list<Value> params) {
        int param_idx = 1;
        for (const Value& param : params) {
            int rc = SQLITE_OK;
            if (std::holds_alternative<std::nullptr_t>(param)) {
                rc = sqlite3_bind_null(m_statement, param_idx);
            } else if (const auto* integer = std::get_if<std::int64_t>(&param)) {
                rc = sqlite3_bind_int64(m_statement, param_idx, *integer);
            } else if (const auto* real = std::get_if<double>(&param)) {
                rc = sqlite3_bind_double(m_statement, param_idx, *real);
            } else {
                const auto& text = std::get<std::string>(param);
                rc = sqlite3_bind_text(m_statement, param_idx, text.data(), static_cast<int>(text.size()),
                                       SQLITE_TRANSIENT);
            }
            if (rc != SQLITE_OK) throw Error(ErrorKind::store, fmt::format("cannot bind parameter {}", param_idx));
            ++param_idx;
        }
    }

    /// Step once: true when a row is available.
    bool step(sqlite3* handle) {
        int rc = sqlite3_step(m_statement);
        if (rc == SQLITE_ROW) return true;
        if (rc == SQLITE_DONE) return false;
        throw sqlite_error(handle, rc, fmt::format("run SQL: {}", sqlite3_sql(m_statement)));
    }

    Row row() {
        Row values;
        int column_count = sqlite3_column_count(m_statement);
        for (int column_idx = 0; column_idx < column_count; ++column_idx) {
            switch (sqlite3_column_type(m_statement, column_idx)) {
                case SQLITE_NULL: values.emplace_back(nullptr); break;
                case SQLITE_INTEGER: values.emplace_back(static_cast<std::int64_t>(sqlite3_column_int64(m_statement, column_idx))); break;
                case SQLITE_FLOAT: values.emplace_back(sqlite3_column_double(m_statement, column_idx)); break;
                case SQLITE_BLOB: {  // bytes as they are (compressed audit text)
                    const auto* bytes = static_cast<const char*>(sqlite3_column_blob(m_statement, column_idx));
                    const auto size = static_cast<std::size_t>(sqlite3_column_bytes(m_statement, column_idx));
                    values.emplace_back(bytes == nullptr ? std::string() : std::string(bytes, size));
                    break;
                }
                default: {
                    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(m_statement, column_idx));
                    values.emplace_back(std::string(text, static_cast<std::size_t>(sqlite3_column_bytes(m_statement, column_idx))));
                }
            }
        }
        return values;
    }

private:
    sqlite3_stmt* m_statement = nullptr;
};

}  // namespace

std::int64_t as_int(const Value& value) {
    if (const auto* integer = std::get_if<std::int64_t>(&value)) return *integer;
    if (const auto* real = std::get_if<double>(&value)) return static_cast<std::int64_t>(*real);
    throw Error(ErrorKind::store, "expected an integer column");
}

double as_double(const Value& value) {
    if (const auto* real = std::get_if<double>(&value)) return *real;
    if (const auto* integer = std::get_if<std::int64_t>(&value)) return static_cast<double>(*integer);
    throw Error(ErrorKind::store, "expected a numeric column");
}

std::string as_text(const Value& value) {
    if (const auto* text = std::get_if<std::string>(&value)) return *text;
    if (std::holds_alternative<std::nullptr_t>(value)) return {};
    if (const auto* integer = std::get_if<std::int64_t>(&value)) return std::to_string(*integer);
    return fmt::format("{}", std::get<double>(value));
}

std::optional<std::int64_t> as_optional_int(const Value& value) {
    if (std::holds_alternative<std::nullptr_t>(value)) return std::nullopt;
    return as_int(value);
}

std::optional<double> as_optional_double(const Value& value) {
    if (std::holds_alternative<std::nullptr_t>(value)) return std::nullopt;
    return as_double(value);
}

Value optional_value(const std::optional<std::int64_t>& value) {
    return value ? Value(*value) : Value(nullptr);
}

Value optional_value(const std::optional<double>& value) { return value ? Value(*value) : Value(nullptr); }

const Value& RowReader::next() {
    if (m_column_idx >= m_row->size()) {
        throw Error(ErrorKind::internal,
                    fmt::format("row mapping reads column {} of a row of {}", m_column_idx + 1, m_row->size()));
    }
    return (*m_row)[m_column_idx++];
}

std::optional<std::string> RowReader::optional_text() {
    const Value& value = next();
    if (std::holds_alternative<std::nullptr_t>(value)) return std::nullopt;
    return as_text(value);
}

void RowReader::finish() const {
    if (m_column_idx != m_row->size()) {
        throw Error(ErrorKind::internal,
                    fmt::format("row mapping read {} of the row's {} columns", m_column_idx, m_row->size()));
    }
}

int current_schema_version() { return migrations().back().version; }

namespace {

/// sqlite3_open_v2 that throws an Error(store) naming the file.
sqlite3* open_handle(const std::string& name, int flags, const std::filesystem::path& file) {
    sqlite3* handle = nullptr;
    const int rc = sqlite3_open_v2(name.c_str(), &handle, flags, nullptr);
    if (rc != SQLITE_OK) {
        std::string message = handle != nullptr ? sqlite3_errmsg(handle) : "out of memory";
        sqlite3_close(handle);
        throw Error(ErrorKind::store, fmt::format("cannot open database {}: {}", file.string(), message));
    }
    sqlite3_extended_result_codes(handle, 1);
    return handle;
}

/// A URI naming `file` for sqlite3_open_v2 with SQLITE_OPEN_URI ('?' and '#' escaped).
std::string file_uri(const std::filesystem::path& file, std::string_view query) {
    std::string uri = "file:";
    for (char ch : std::filesystem::absolute(file).string()) {
        if (ch == '?' || ch == '#' || ch == '%') uri += fmt::format("%{:02X}", static_cast<unsigned char>(ch));
        else uri += ch;
    }
    return uri + "?" + std::string(query);
}

}  // namespace

Database Database::open(const std::filesystem::path& file, const Options& options) {
    std::error_code error_code;
    const bool exists = std::filesystem::is_regular_file(file, error_code);
    if ((!options.create || options.read_only) && !exists) {
        throw Error(ErrorKind::store, fmt::format("database {} does not exist (is this a campaign directory? "
                                                  "create one with `npuopt init`)",
                                                  file.string()));
    }
    if (exists) check_existing_file(file);
    if (options.read_only) {
        // Read-only, as a reader beside a running campaign; when even that needs a write (the WAL
        // index of a campaign on a read-only directory), immutable: no locks, no WAL, no writes.
        for (const char* query : {"mode=ro", "immutable=1"}) {
            sqlite3* handle = open_handle(file_uri(file, query), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI |
                                                                     SQLITE_OPEN_FULLMUTEX, file);
            Database database(handle, file);
            database.m_read_only = true;
            sqlite3_busy_timeout(handle, options.busy_timeout_ms);
            try {
                const int version = database.schema_version();
                if (version > current_schema_version() || version < current_schema_version()) {
                    throw Error(ErrorKind::store,
                                fmt::format("database {} has schema version {}, this npuopt reads version {} (open "
                                            "it writable once, e.g. with `npuopt run`, to migrate it; or upgrade "
                                            "npuopt)",
                                            file.string(), version, current_schema_version()));
                }
                return database;
            } catch (const Error& error) {
                if (std::string_view(query) != "mode=ro" ||
                    std::string_view(error.what()).find("schema version") != std::string_view::npos) {
                    throw;
                }
            }
        }
        throw Error(ErrorKind::internal, "unreachable: read-only open");
    }
    sqlite3* handle = open_handle(file.string(), SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX |
                                                     (options.create ? SQLITE_OPEN_CREATE : 0),
                                  file);
    Database database(handle, file);
    sqlite3_busy_timeout(handle, options.busy_timeout_ms);
    auto check = database.query("PRAGMA schema_version");  // fails fast on a file that is not SQLite
    (void)check;
    database.execute_script("PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;");
    int version = database.schema_version();
    if (version > current_schema_version()) {
        throw Error(ErrorKind::store,
                    fmt::format("database {} has schema version {}, newer than this npuopt's {} (upgrade npuopt)",
                                file.string(), version, current_schema_version()));
    }
    if (options.migrate) database.migrate(options.migrate_to);
    return database;
}

Database::Database(Database&& other) noexcept
    : m_handle(other.m_handle), m_file(std::move(other.m_file)), m_mutex(std::move(other.m_mutex)),
      m_transaction_depth(other.m_transaction_depth),
      m_fault_countdown(other.m_fault_countdown), m_read_only(other.m_read_only) {
    other.m_handle = nullptr;
}

Database& Database::operator=(Database&& other) noexcept {
    if (this != &other) {
        sqlite3_close_v2(m_handle);
        m_handle = other.m_handle;
        m_file = std::move(other.m_file);
        m_mutex = std::move(other.m_mutex);
        m_transaction_depth = other.m_transaction_depth;
        m_fault_countdown = other.m_fault_countdown;
        m_read_only = other.m_read_only;
        other.m_handle = nullptr;
    }
    return *this;
}

Database::~Database() { sqlite3_close_v2(m_handle); }

void Database::fail(std::string_view what) { throw sqlite_error(m_handle, sqlite3_errcode(m_handle), what); }

int Database::schema_version() {
    return static_cast<int>(as_int(query("PRAGMA user_version").at(0).at(0)));
}

void Database::migrate(std::optional<int> to) {
    int target_version = to.value_or(current_schema_version());
    for (const Migration& migration : migrations()) {
        int version = schema_version();
        if (migration.version <= version || migration.version > target_version) continue;
        if (migration.version != version + 1) {
            throw Error(ErrorKind::internal, fmt::format("migration list has a gap before version {}", migration.version));
        }
        log::debug("migrating {} to schema version {}: {}", m_file.string(), migration.version, migration.description);
        Transaction transaction(*this);
        execute_script(migration.sql);
        execute_script(fmt::format("PRAGMA user_version = {}", migration.version));
        transaction.commit();
    }
}

namespace {
/// The rowid of the last INSERT this thread made through `handle` (another thread sharing the
/// connection may insert in between, so sqlite3_last_insert_rowid alone would not do).
thread_local std::pair<const sqlite3*, std::int64_t> t_last_insert{nullptr, 0};
}  // namespace

int Database::execute(std::string_view sql, std::initializer_list<Value> params) {
    std::lock_guard lock(*m_mutex);
    if (m_fault_countdown) {
        if (--*m_fault_countdown <= 0) {
            m_fault_countdown.reset();
            throw Error(ErrorKind::store, fmt::format("injected fault before: {}", sql));
        }
    }
    Statement statement(m_handle, sql);
    statement.bind(params);
    while (statement.step(m_handle)) {
    }
    t_last_insert = {m_handle, sqlite3_last_insert_rowid(m_handle)};
    return sqlite3_changes(m_handle);
}

std::vector<Row> Database::query(std::string_view sql, std::initializer_list<Value> params) {
    std::lock_guard lock(*m_mutex);
    Statement statement(m_handle, sql);
    statement.bind(params);
    std::vector<Row> rows;
    while (statement.step(m_handle)) rows.push_back(statement.row());
    return rows;
}

void Database::execute_script(std::string_view sql) {
    std::lock_guard lock(*m_mutex);
    char* message = nullptr;
    std::string text(sql);
    const int rc = sqlite3_exec(m_handle, text.c_str(), nullptr, nullptr, &message);
    if (rc != SQLITE_OK) {
        sqlite3_free(message);  // sqlite3_errmsg() says the same
        throw sqlite_error(m_handle, rc, fmt::format("run SQL: {}", text.substr(0, 200)));
    }
}

std::int64_t Database::last_insert_id() {
    std::lock_guard lock(*m_mutex);
    return t_last_insert.first == m_handle ? t_last_insert.second : sqlite3_last_insert_rowid(m_handle);
}

Transaction Database::transaction() { return Transaction(*this); }

std::string Database::integrity_check() { return as_text(query("PRAGMA integrity_check").at(0).at(0)); }

std::string Database::journal_mode() { return as_text(query("PRAGMA journal_mode").at(0).at(0)); }

Transaction::Transaction(Database& database)
    : m_database(&database), m_lock(*database.m_mutex), m_depth(database.m_transaction_depth) {
    if (m_depth == 0) {
        m_database->execute_script("BEGIN IMMEDIATE");
    } else {
        m_database->execute_script(fmt::format("SAVEPOINT npuopt_{}", m_depth));
    }
    ++m_database->m_transaction_depth;
}

Transaction::Transaction(Transaction&& other) noexcept
    : m_database(other.m_database), m_lock(std::move(other.m_lock)), m_depth(other.m_depth), m_done(other.m_done) {
    other.m_done = true;
}

void Transaction::commit() {
    if (m_done) throw Error(ErrorKind::internal, "transaction committed twice");
    if (m_depth == 0) {
        m_database->execute_script("COMMIT");
    } else {
        m_database->execute_script(fmt::format("RELEASE npuopt_{}", m_depth));
    }
    m_done = true;
    --m_database->m_transaction_depth;
    m_lock.unlock();
}

Transaction::~Transaction() {
    if (m_done) return;
    if (m_depth == 0 && sqlite3_get_autocommit(m_database->m_handle) != 0) {
        // SQLite already rolled the transaction back (a failed COMMIT on a full disk, say)
        --m_database->m_transaction_depth;
        return;
    }
    try {
        if (m_depth == 0) {
            m_database->execute_script("ROLLBACK");
        } else {
            m_database->execute_script(fmt::format("ROLLBACK TO npuopt_{0}; RELEASE npuopt_{0}", m_depth));
        }
    } catch (const Error& error) {
        log::error("rollback failed: {}", error.what());
    }
    --m_database->m_transaction_depth;
}

}  // namespace npuopt::store
