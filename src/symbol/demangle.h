/* C++ and Rust (legacy and v0) demangling through libiberty's cplus_demangle, the
 * demangler binutils and gdb use. Internal. */
#ifndef SONDE_SYMBOL_DEMANGLE_H
#define SONDE_SYMBOL_DEMANGLE_H

#include "symbol/strpool.h"

/* The demangled form of name copied into the pool, or name itself when it is not a
 * mangled C++/Rust name (or cannot be demangled). NULL only when name is NULL. */
const char *sonde__sym_demangle(struct strpool *pool, const char *name);

#endif
