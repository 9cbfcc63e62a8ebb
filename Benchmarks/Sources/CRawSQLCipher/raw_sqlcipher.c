#define SQLITE_HAS_CODEC 1
#include <sqlcipher/sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <signal.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include "raw_sqlcipher.h"

/// CPU time of the whole process (every thread), user and system.
static double cpu_now(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return (double)(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
        + (double)(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static sqlite3 *open_keyed(const char *path, const char *key, const char *setup, char *error) {
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK) {
        snprintf(error, 256, "open: %s", db ? sqlite3_errmsg(db) : "no memory");
        sqlite3_close(db);
        return NULL;
    }
    if (key && sqlite3_key(db, key, (int)strlen(key)) != SQLITE_OK) {
        snprintf(error, 256, "key: %s", sqlite3_errmsg(db));
        sqlite3_close(db);
        return NULL;
    }
    char *message = NULL;
    if (setup && sqlite3_exec(db, setup, NULL, NULL, &message) != SQLITE_OK) {
        snprintf(error, 256, "setup: %s", message ? message : "?");
        sqlite3_free(message);
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

double raw_insert(const char *path, const char *key, const char *setup, const char *insert, raw_rows rows,
                  int perTransaction, double *cpuSeconds, char *error) {
    sqlite3 *db = open_keyed(path, key, setup, error);
    if (!db) return -1;
    sqlite3_stmt *statement = NULL;
    if (sqlite3_prepare_v2(db, insert, -1, &statement, NULL) != SQLITE_OK) {
        snprintf(error, 256, "prepare: %s", sqlite3_errmsg(db));
        sqlite3_close(db);
        return -1;
    }
    double start = now();
    double cpuStart = cpu_now();
    for (int row = 0; row < rows.rows; row++) {
        if (row % perTransaction == 0) sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
        for (int column = 0; column < rows.columns; column++) {
            int cell = row * rows.columns + column;
            switch (rows.types[cell]) {
            case 1: sqlite3_bind_int64(statement, column + 1, rows.ints[cell]); break;
            case 2: sqlite3_bind_double(statement, column + 1, rows.doubles[cell]); break;
            case 3:
                sqlite3_bind_text(statement, column + 1, rows.text + rows.textStart[cell], rows.textLength[cell], SQLITE_STATIC);
                break;
            case 4:
                sqlite3_bind_blob(statement, column + 1, rows.text + rows.textStart[cell], rows.textLength[cell], SQLITE_STATIC);
                break;
            default: sqlite3_bind_null(statement, column + 1);
            }
        }
        if (sqlite3_step(statement) != SQLITE_DONE) {
            snprintf(error, 256, "insert: %s", sqlite3_errmsg(db));
            sqlite3_finalize(statement);
            sqlite3_close(db);
            return -1;
        }
        sqlite3_reset(statement);
        if (row % perTransaction == perTransaction - 1 || row == rows.rows - 1) sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    }
    double seconds = now() - start;
    *cpuSeconds = cpu_now() - cpuStart;
    sqlite3_finalize(statement);
    sqlite3_close(db);
    return seconds;
}

double raw_query(const char *path, const char *key, const char *setup, const char *query, int rounds,
                 int *rowCount, char *error) {
    sqlite3 *db = open_keyed(path, key, setup, error);
    if (!db) return -1;
    sqlite3_stmt *statement = NULL;
    if (sqlite3_prepare_v2(db, query, -1, &statement, NULL) != SQLITE_OK) {
        snprintf(error, 256, "prepare: %s", sqlite3_errmsg(db));
        sqlite3_close(db);
        return -1;
    }
    double best = -1;
    volatile long long sink = 0;
    for (int round = 0; round < rounds; round++) {
        double start = now();
        int count = 0;
        while (sqlite3_step(statement) == SQLITE_ROW) {
            for (int column = 0; column < sqlite3_column_count(statement); column++) {
                switch (sqlite3_column_type(statement, column)) {
                case SQLITE_INTEGER: sink += sqlite3_column_int64(statement, column); break;
                case SQLITE_FLOAT: sink += (long long)sqlite3_column_double(statement, column); break;
                case SQLITE_TEXT: sink += sqlite3_column_bytes(statement, column) + (sqlite3_column_text(statement, column) != NULL); break;
                default: break;
                }
            }
            count++;
        }
        sqlite3_reset(statement);
        double seconds = now() - start;
        if (best < 0 || seconds < best) best = seconds;
        *rowCount = count;
    }
    sqlite3_finalize(statement);
    sqlite3_close(db);
    return best;
}

double raw_export(const char *path, const char *key, const char *setup, const char *target, int pageSize,
                  char *error) {
    sqlite3 *db = open_keyed(path, key, setup, error);
    if (!db) return -1;
    char *sql = sqlite3_mprintf(
        "ATTACH DATABASE %Q AS exported KEY %Q; PRAGMA exported.cipher_page_size = %d; "
        "SELECT sqlcipher_export('exported'); PRAGMA exported.journal_mode = WAL; DETACH DATABASE exported;",
        target, key, pageSize);
    char *message = NULL;
    double start = now();
    int status = sqlite3_exec(db, sql, NULL, NULL, &message);
    double seconds = now() - start;
    sqlite3_free(sql);
    if (status != SQLITE_OK) {
        snprintf(error, 256, "export: %s", message ? message : sqlite3_errmsg(db));
        sqlite3_free(message);
        sqlite3_close(db);
        return -1;
    }
    sqlite3_close(db);
    return seconds;
}

void raw_end_with_parent(void) {
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
}

double raw_update(const char *path, const char *key, const char *setup, const char *update, long long first,
                  long long step, int count, int round, char *error) {
    sqlite3 *db = open_keyed(path, key, setup, error);
    if (!db) return -1;
    sqlite3_stmt *statement = NULL;
    if (sqlite3_prepare_v2(db, update, -1, &statement, NULL) != SQLITE_OK) {
        snprintf(error, 256, "prepare: %s", sqlite3_errmsg(db));
        sqlite3_close(db);
        return -1;
    }
    char name[96];
    double start = now();
    sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    for (int row = 0; row < count; row++) {
        long long id = first + step * row;
        int length = snprintf(name, sizeof name, "Product number %lld, changed in raw round %d", id, round);
        sqlite3_bind_text(statement, 1, name, length, SQLITE_STATIC);
        sqlite3_bind_int64(statement, 2, id);
        if (sqlite3_step(statement) != SQLITE_DONE || sqlite3_changes(db) != 1) {
            snprintf(error, 256, "update of %lld: %s", id, sqlite3_errmsg(db));
            sqlite3_finalize(statement);
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            sqlite3_close(db);
            return -1;
        }
        sqlite3_reset(statement);
    }
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(error, 256, "commit: %s", sqlite3_errmsg(db));
        sqlite3_finalize(statement);
        sqlite3_close(db);
        return -1;
    }
    double seconds = now() - start;
    sqlite3_finalize(statement);
    sqlite3_close(db);
    return seconds;
}
