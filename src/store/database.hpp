#pragma once
// A SQLite connection with the campaign's pragmas (WAL, foreign keys, busy timeout), schema
// migrations keyed by PRAGMA user_version, RAII transactions and a fault-injection countdown.
// Only store/ includes sqlite3.h, and only in .cpp files.

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

struct sqlite3;

namespace npuopt::store {

/// A bound parameter or a column value.
using Value = std::variant<std::nullptr_t, std::int64_t, double, std::string>;
/// One result row, columns in SELECT order.
using Row = std::vector<Value>;

std::int64_t as_int(const Value& value);               ///< integer column (error when NULL or text)
double as_double(const Value& value);                  ///< numeric column
std::string as_text(const Value& value);               ///< text column ("" for NULL)
std::optional<std::int64_t> as_optional_int(const Value& value);
std::optional<double> as_optional_double(const Value& value);
Value optional_value(const std::optional<std::int64_t>& value);
Value optional_value(const std::optional<double>& value);

/// Reads one row's columns in SELECT order, so a mapping names fields, not column indices:
///   RowReader read(row); record.id = read.integer(); record.name = read.text(); read.finish();
/// finish() (and reading past the end) throws Error(internal) when the SELECT and the mapping
/// disagree on the column count.
class RowReader {
public:
    explicit RowReader(const Row& row) : m_row(&row) {}
    std::int64_t integer() { return as_int(next()); }
    double real() { return as_double(next()); }
    std::string text() { return as_text(next()); }
    bool flag() { return as_int(next()) != 0; }
    std::optional<std::int64_t> optional_integer() { return as_optional_int(next()); }
    std::optional<double> optional_real() { return as_optional_double(next()); }
    std::optional<std::string> optional_text();
    void finish() const;

private:
    const Value& next();
    const Row* m_row;
    std::size_t m_column_idx = 0;
};

/// One migration step: the SQL that takes the schema from version-1 to version.
struct Migration {
    int version;
    std::string_view description;
    std::string_view sql;
};

/// The ordered migration steps; the last one's version is the current schema version.
const std::vector<Migration>& migrations();
int current_schema_version();

class Transaction;

/// An open database file. Move-only; closes on destruction.
class Database {
public:
    struct Options {
        bool create = true;                 ///< create the file when missing (else Error(store))
        bool migrate = true;                ///< apply pending migrations on open
        bool read_only = false;             ///< never write (status): works on a read-only file and
                                            ///< directory (then opened immutable); implies no create
                                            ///< and no migration
        std::optional<int> migrate_to;      ///< stop at this version (tests create older schemas)
        int busy_timeout_ms = 5000;
    };

    /// An existing file is checked before anything is written to it: a zero-byte, truncated or
    /// non-SQLite file is an Error(store) naming it, and the file is left unchanged. Errors of
    /// SQLite name the file and say "read-only" or "disk full" where that is the cause.
    static Database open(const std::filesystem::path& file, const Options& options);
    static Database open(const std::filesystem::path& file) { return open(file, Options{}); }
    Database(Database&& other) noexcept;
    Database& operator=(Database&& other) noexcept;
    Database(const Database&) = delete;
    Database& operator=(const Database&) = delete;
    ~Database();

    /// PRAGMA user_version of the file.
    int schema_version();
    /// Apply pending migration steps up to `to` (default: current), each in its own transaction.
    void migrate(std::optional<int> to = std::nullopt);

    /// Run a statement that changes data; returns the number of changed rows.
    int execute(std::string_view sql, std::initializer_list<Value> params = {});
    /// Run a query; returns all rows.
    std::vector<Row> query(std::string_view sql, std::initializer_list<Value> params = {});
    /// Run SQL text of one or more statements without parameters (schema, pragmas).
    void execute_script(std::string_view sql);
    std::int64_t last_insert_id();

    /// Begin a transaction (nested calls become savepoints).
    Transaction transaction();

    /// Fault injection: the Nth write (execute) from now fails with Error(store); nullopt disables.
    void set_fault_countdown(std::optional<int> writes_until_fault) { m_fault_countdown = writes_until_fault; }

    /// "ok" when PRAGMA integrity_check passes, else its first complaint.
    std::string integrity_check();
    /// PRAGMA journal_mode (e.g. "wal").
    std::string journal_mode();
    const std::filesystem::path& file() const { return m_file; }
    bool read_only() const { return m_read_only; }

private:
    friend class Transaction;
    Database(sqlite3* handle, std::filesystem::path file) : m_handle(handle), m_file(std::move(file)) {}
    [[noreturn]] void fail(std::string_view what);

    sqlite3* m_handle = nullptr;
    std::filesystem::path m_file;
    /// Serialises threads that share this connection (a campaign's parallel evaluations): each
    /// statement holds it, and a Transaction holds it from BEGIN to COMMIT/ROLLBACK, so another
    /// thread's statements never land inside this thread's transaction. Recursive: a thread
    /// nests freely.
    std::unique_ptr<std::recursive_mutex> m_mutex = std::make_unique<std::recursive_mutex>();
    int m_transaction_depth = 0;
    std::optional<int> m_fault_countdown;
    bool m_read_only = false;
};

/// RAII transaction: rolls back on destruction unless commit() was called.
class Transaction {
public:
    explicit Transaction(Database& database);
    Transaction(Transaction&& other) noexcept;
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    Transaction& operator=(Transaction&&) = delete;
    ~Transaction();
    void commit();

private:
    Database* m_database;
    std::unique_lock<std::recursive_mutex> m_lock;  ///< the database's, held until commit or rollback
    int m_depth;
    bool m_done = false;
};

}  // namespace npuopt::store
