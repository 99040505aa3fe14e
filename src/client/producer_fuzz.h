/* Entry point for fuzzing the producer's command handling. Internal to libsonde. */
#ifndef SONDE_CLIENT_PRODUCER_FUZZ_H
#define SONDE_CLIENT_PRODUCER_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Runs data, a sequence of length-delimited GetAsyncCommandResponse messages, through a
 * producer that has no connection and two data sources named "a" and "b". Returns 0 or
 * -ENOMEM. */
int sonde__producer_fuzz_commands(const uint8_t *data, size_t len);

#endif
