/* Helpers for the client tests: run build/VARIANT/sonded on temporary sockets, and a
 * producer child process that writes recognizable packets. */
#ifndef SONDE_TEST_CLIENT_UTIL_H
#define SONDE_TEST_CLIENT_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct client_svc {
	pid_t pid;
	char psock[256], csock[256];
};

/* Starts sonded and waits until both sockets accept connections. */
void client_svc_start(struct client_svc *s);
/* The same on the socket names prod and cons (TCP addresses, lists). */
void client_svc_start_at(struct client_svc *s, const char *prod, const char *cons);
/* SIGTERM and wait. */
void client_svc_stop(struct client_svc *s);

/* TracePacket field of the test payload: for_testing (TestEvent{1: str}). */
enum { CT_FOR_TESTING = 900, CT_TEST_STR = 1, CT_TEST_SEQ = 2 };

struct client_prod_opts {
	const char *socket;
	const char *ds_name; /* default "client.test" */
	int packets;	     /* packets written when the instance starts */
	size_t big;	     /* > 0: each packet carries a nested payload of this size */
	bool provided_smb;
	bool commit_on_start; /* else chunks wait for a flush */
	uint32_t smb_size, page_size;
	const char *config_out; /* the DataSourceConfig its instance got is written here */
};

/* Forks a producer process; returns its pid. It exits 0 after its instance was stopped, 2
 * if it could not connect, 3 on timeout (20 s), 4 if never started, 5 if the service did
 * not adopt the SMB it provided. */
pid_t client_prod_spawn(const struct client_prod_opts *o);

/* The packet payload string of packet i. */
void client_packet_str(char *out, size_t n, int i);

/* Counts, in a trace (Trace records), the test packets: checks each one's payload and
 * that packets i = 0..n-1 each appear exactly once. Returns how many were found. */
int client_count_test_packets(const void *trace, size_t len, int n, size_t big);

/* Waits until the service lists data source `name` (QueryServiceState), up to 10 s. */
void client_wait_data_source(const char *csock, const char *name);

#endif
