/* Symbol visibility: the library is built with -fvisibility=hidden and exports only what
 * is marked SONDE_API. */
#ifndef SONDE_EXPORT_H
#define SONDE_EXPORT_H

#define SONDE_API __attribute__((visibility("default")))

#endif
