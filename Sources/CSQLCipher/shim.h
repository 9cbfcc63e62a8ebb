#ifndef CSQLCIPHER_SHIM_H
#define CSQLCIPHER_SHIM_H
// SQLCipher's key functions are only declared with SQLITE_HAS_CODEC.
#define SQLITE_HAS_CODEC 1
#include <sqlcipher/sqlite3.h>

// SQLITE_TRANSIENT is a cast macro Swift cannot import; tell SQLite to copy bound buffers.
static inline void (*csqlcipher_transient(void))(void *) { return (void (*)(void *))-1; }
#endif
