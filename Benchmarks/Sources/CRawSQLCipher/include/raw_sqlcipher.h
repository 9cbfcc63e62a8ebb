#ifndef RAW_SQLCIPHER_H
#define RAW_SQLCIPHER_H

/// The physical limit for the benchmarks: the SQLCipher C API called directly, with one
/// prepared statement, on the same table and stored forms as the store.

/// Rows to insert: `rows` × `columns` cells, row after row. types: 0 NULL, 1 integer
/// (ints), 2 double (doubles), 3 text and 4 blob (bytes in text at textStart, textLength).
typedef struct {
    int rows;
    int columns;
    const int *types;
    const long long *ints;
    const double *doubles;
    const char *text;
    const int *textStart;
    const int *textLength;
} raw_rows;

/// Opens `path` with `key` (NULL: no key), runs `setup` (pragmas, CREATE TABLE …; may be
/// NULL), then inserts the rows with `insert` (one `?` per column), committing every
/// `perTransaction` rows. Returns the seconds the inserts took (setup excluded), or -1 with
/// the message in `error` (256 bytes); `cpuSeconds` gets the process's CPU time during them.
double raw_insert(const char *path, const char *key, const char *setup, const char *insert, raw_rows rows,
                  int perTransaction, double *cpuSeconds, char *error);

/// Opens `path` with `key`, runs `setup`, then prepares `query` and steps through every row,
/// reading every column (as the store reads them: integers, doubles, text). Returns the
/// seconds the best of `rounds` runs took; `rowCount` gets the rows of the last run.
double raw_query(const char *path, const char *key, const char *setup, const char *query, int rounds,
                 int *rowCount, char *error);

/// Opens `path` with `key`, runs `setup`, then runs `update` (parameters: a new name, then a
/// key) for the keys `first`, `first + step`, … (`count` of them) in one transaction, each
/// changing exactly one row: what applying a delta of those rows costs at the least. Returns
/// the seconds from BEGIN to the end of COMMIT, or -1 with the message in `error`.
double raw_update(const char *path, const char *key, const char *setup, const char *update, long long first,
                  long long step, int count, int round, char *error);

/// Copies the keyed store at `path` (opened with `setup`, which sets its page size) into a new
/// file `target` with the same key and `pageSize`-byte encrypted pages (`sqlcipher_export`),
/// left in WAL mode. Returns the seconds the copy took, or -1 with the message in `error`.
double raw_export(const char *path, const char *key, const char *setup, const char *target, int pageSize,
                  char *error);

/// Makes this process end (SIGTERM) when its parent does (Linux), so that a benchmark's child
/// server never outlives it.
void raw_end_with_parent(void);

#endif
