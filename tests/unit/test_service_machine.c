/* The clock offset a relayed machine's SyncClock exchanges give (src/service/machine.c),
 * on exchanges made up with a known offset and known delays. */
#include "../test.h"
#include "ipc/protos.h"
#include "service/internal.h"

/* One exchange: the relay reads its clock at client (its BOOTTIME and REALTIME), the host
 * at host (BOOTTIME only). */
static void exchange(struct svc_machine *m, enum relay_sync_phase phase, uint64_t client,
		     uint64_t host)
{
	struct svc_synced *x = &m->synced[m->nsynced++];

	x->phase = phase;
	x->n_client = 2;
	x->client[0] = (struct relay_clock){PF_CLOCK_BOOTTIME, client};
	x->client[1] = (struct relay_clock){PF_CLOCK_REALTIME, client + 1000};
	x->n_host = 1;
	x->host[0] = (struct relay_clock){PF_CLOCK_BOOTTIME, host};
}

TEST(machine_clock_offset_from_round_trips)
{
	/* relay clock = host clock + 5 ms; each one-way trip takes 100 us, so t1h follows
	 * t1c by 100 us of host time, t2c follows t1h by 100 us, t2h follows t2c by 100 us */
	const int64_t off = 5000000;
	const uint64_t t1h = 10000000000ull;
	struct svc_machine m = {.id = 1};
	int64_t got;

	ASSERT(!sonde__machine_clock_offset(&m, PF_CLOCK_BOOTTIME, &got)); /* none yet */
	exchange(&m, RELAY_SYNC_PING, t1h - 100000 + off, t1h);
	ASSERT(!sonde__machine_clock_offset(&m, PF_CLOCK_BOOTTIME, &got)); /* one is no trip */
	exchange(&m, RELAY_SYNC_UPDATE, t1h + 100000 + off, t1h + 200000);
	ASSERT(sonde__machine_clock_offset(&m, PF_CLOCK_BOOTTIME, &got));
	ASSERT_INT(got, ==, off);
	/* a clock the host did not read has no offset */
	ASSERT(!sonde__machine_clock_offset(&m, PF_CLOCK_REALTIME, &got));

	/* asymmetric trips (300 us there, 100 us back): the estimate is off by half the
	 * difference, within the round trip */
	struct svc_machine a = {.id = 2};
	exchange(&a, RELAY_SYNC_PING, t1h - 300000 + off, t1h);
	exchange(&a, RELAY_SYNC_UPDATE, t1h + 100000 + off, t1h + 400000);
	ASSERT(sonde__machine_clock_offset(&a, PF_CLOCK_BOOTTIME, &got));
	ASSERT_INT(got > off ? got - off : off - got, <=, 400000);
	ASSERT_INT(got, !=, off);

	/* exchanges 30 s apart or more are two rounds, not a round trip */
	struct svc_machine r = {.id = 3};
	exchange(&r, RELAY_SYNC_UPDATE, t1h + off, t1h);
	exchange(&r, RELAY_SYNC_PING, t1h + 30000000000ull + off, t1h + 30000000000ull);
	ASSERT(!sonde__machine_clock_offset(&r, PF_CLOCK_BOOTTIME, &got));
}
