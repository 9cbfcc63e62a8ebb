#ifndef CSQLCIPHER_SHIM_H
#define CSQLCIPHER_SHIM_H
// The one place that names the SQLite provider (see docs/apple.md): SQLCipher, whose header is
// <sqlcipher/sqlite3.h> in Debian's libsqlcipher-dev and in Homebrew's sqlcipher, and which an
// Apple app supplies the same way. SQLCipher declares its key functions only with
// SQLITE_HAS_CODEC.
#define SQLITE_HAS_CODEC 1
#if __has_include(<sqlcipher/sqlite3.h>)
#include <sqlcipher/sqlite3.h>
#else
#error "SQLCipher's header <sqlcipher/sqlite3.h> was not found: install libsqlcipher-dev (Debian) or sqlcipher (Homebrew), or see docs/apple.md"
#endif

// SQLITE_TRANSIENT is a cast macro Swift cannot import; tell SQLite to copy bound buffers.
static inline void (*csqlcipher_transient(void))(void *) { return (void (*)(void *))-1; }

// Gives memory freed to glibc's arenas back to the system (malloc_trim, which Swift's Glibc
// module does not declare); nothing elsewhere. For a store's release of its page caches.
#if defined(__linux__) && __has_include(<malloc.h>)
#include <malloc.h>
#endif
#if defined(__GLIBC__)
static inline void csqlcipher_return_free_memory(void) { (void)malloc_trim(0); }
#else
static inline void csqlcipher_return_free_memory(void) {}
#endif
#endif
