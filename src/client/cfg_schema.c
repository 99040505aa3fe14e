/* Field tables for the text-format TraceConfig parser, transcribed from Perfetto's
 * protos/perfetto/config (v14, plus the HEAD fields noted). Numbers are the wire contract:
 * they never change upstream, so a table is a faithful and allocation-free schema. */
#include <stddef.h>
#include <string.h>

#include "client/cfg_schema.h"

#define F(n, num, t)                                                                               \
	{                                                                                          \
		n, num, t, false, NULL, NULL                                                       \
	}
#define R(n, num, t)                                                                               \
	{                                                                                          \
		n, num, t, true, NULL, NULL                                                        \
	}
#define M(n, num, m)                                                                               \
	{                                                                                          \
		n, num, CT_MSG, false, &m, NULL                                                    \
	}
#define RM(n, num, m)                                                                              \
	{                                                                                          \
		n, num, CT_MSG, true, &m, NULL                                                     \
	}
#define E(n, num, e)                                                                               \
	{                                                                                          \
		n, num, CT_ENUM, false, NULL, &e                                                   \
	}
#define RE(n, num, e)                                                                              \
	{                                                                                          \
		n, num, CT_ENUM, true, NULL, e                                                     \
	}
#define END                                                                                        \
	{                                                                                          \
		NULL, 0, 0, false, NULL, NULL                                                      \
	}

/* --- enums --- */

static const struct cfg_enum_val fill_policy_vals[] = {
	{"UNSPECIFIED", 0}, {"RING_BUFFER", 1}, {"DISCARD", 2}, {NULL, 0}};
static const struct cfg_enum fill_policy = {"FillPolicy", fill_policy_vals};

static const struct cfg_enum_val lockdown_vals[] = {
	{"LOCKDOWN_UNCHANGED", 0}, {"LOCKDOWN_CLEAR", 1}, {"LOCKDOWN_SET", 2}, {NULL, 0}};
static const struct cfg_enum lockdown = {"LockdownModeOperation", lockdown_vals};

static const struct cfg_enum_val trigger_mode_vals[] = {{"UNSPECIFIED", 0},
							{"START_TRACING", 1},
							{"STOP_TRACING", 2},
							{"CLONE_SNAPSHOT", 4}, /* HEAD */
							{NULL, 0}};
static const struct cfg_enum trigger_mode = {"TriggerMode", trigger_mode_vals};

static const struct cfg_enum_val compression_vals[] = {
	{"COMPRESSION_TYPE_UNSPECIFIED", 0}, {"COMPRESSION_TYPE_DEFLATE", 1}, {NULL, 0}};
static const struct cfg_enum compression = {"CompressionType", compression_vals};

static const struct cfg_enum_val statsd_logging_vals[] = {{"STATSD_LOGGING_UNSPECIFIED", 0},
							  {"STATSD_LOGGING_ENABLED", 1},
							  {"STATSD_LOGGING_DISABLED", 2},
							  {NULL, 0}};
static const struct cfg_enum statsd_logging = {"StatsdLogging", statsd_logging_vals};

static const struct cfg_enum_val clock_vals[] = {
	{"BUILTIN_CLOCK_UNKNOWN", 0},	       {"BUILTIN_CLOCK_REALTIME", 1},
	{"BUILTIN_CLOCK_REALTIME_COARSE", 2},  {"BUILTIN_CLOCK_MONOTONIC", 3},
	{"BUILTIN_CLOCK_MONOTONIC_COARSE", 4}, {"BUILTIN_CLOCK_MONOTONIC_RAW", 5},
	{"BUILTIN_CLOCK_BOOTTIME", 6},	       {NULL, 0}};
static const struct cfg_enum builtin_clock = {"BuiltinClock", clock_vals};

static const struct cfg_enum_val quirks_vals[] = {{"QUIRKS_UNSPECIFIED", 0},
						  {"DISABLE_INITIAL_DUMP", 1},
						  {"DISABLE_ON_DEMAND", 2},
						  {NULL, 0}};
static const struct cfg_enum quirks = {"Quirks", quirks_vals};

static const struct cfg_enum_val stat_counters_vals[] = {
	{"STAT_UNSPECIFIED", 0},    {"STAT_CPU_TIMES", 1},  {"STAT_IRQ_COUNTS", 2},
	{"STAT_SOFTIRQ_COUNTS", 3}, {"STAT_FORK_COUNT", 4}, {NULL, 0}};
static const struct cfg_enum stat_counters = {"StatCounters", stat_counters_vals};

static const struct cfg_enum_val counter_vals[] = {{"UNKNOWN_COUNTER", 0},  {"SW_CPU_CLOCK", 1},
						   {"SW_PAGE_FAULTS", 2},   {"HW_CPU_CYCLES", 10},
						   {"HW_INSTRUCTIONS", 11}, {NULL, 0}};
static const struct cfg_enum perf_counter = {"PerfEvents.Counter", counter_vals};

static const struct cfg_enum_val client_priority_vals[] = {
	{"UNKNOWN", 0}, {"BACKGROUND", 1}, {"USER_INITIATED", 2}, {NULL, 0}};
static const struct cfg_enum client_priority = {"ClientPriority", client_priority_vals};

/* --- data source sub-configs --- */

static const struct cfg_field compact_sched_f[] = {F("enabled", 1, CT_BOOL), END};
static const struct cfg_msg compact_sched = {"CompactSchedConfig", compact_sched_f};

static const struct cfg_field ftrace_f[] = {
	R("ftrace_events", 1, CT_STRING),
	R("atrace_categories", 2, CT_STRING),
	R("atrace_apps", 3, CT_STRING),
	F("buffer_size_kb", 10, CT_U32),
	F("drain_period_ms", 11, CT_U32),
	M("compact_sched", 12, compact_sched),
	F("symbolize_ksyms", 13, CT_BOOL),
	F("initialize_ksyms_synchronously_for_testing", 14, CT_BOOL),
	F("throttle_rss_stat", 15, CT_BOOL),
	F("disable_generic_events", 16, CT_BOOL),
	END};
static const struct cfg_msg ftrace_config = {"FtraceConfig", ftrace_f};

static const struct cfg_field process_stats_f[] = {RE("quirks", 1, &quirks),
						   F("scan_all_processes_on_start", 2, CT_BOOL),
						   F("record_thread_names", 3, CT_BOOL),
						   F("proc_stats_poll_ms", 4, CT_U32),
						   F("proc_stats_cache_ttl_ms", 6, CT_U32),
						   F("record_thread_time_in_state", 7, CT_BOOL),
						   F("thread_time_in_state_cache_size", 8, CT_U32),
						   END};
static const struct cfg_msg process_stats_config = {"ProcessStatsConfig", process_stats_f};

/* MeminfoCounters and VmstatCounters have ~100 names each; they are accepted as numbers. */
static const struct cfg_field sys_stats_f[] = {F("meminfo_period_ms", 1, CT_U32),
					       RE("meminfo_counters", 2, NULL),
					       F("vmstat_period_ms", 3, CT_U32),
					       RE("vmstat_counters", 4, NULL),
					       F("stat_period_ms", 5, CT_U32),
					       RE("stat_counters", 6, &stat_counters),
					       F("devfreq_period_ms", 7, CT_U32),
					       F("cpufreq_period_ms", 8, CT_U32),
					       END};
static const struct cfg_msg sys_stats_config = {"SysStatsConfig", sys_stats_f};

static const struct cfg_field track_event_f[] = {R("disabled_categories", 1, CT_STRING),
						 R("enabled_categories", 2, CT_STRING),
						 R("disabled_tags", 3, CT_STRING),
						 R("enabled_tags", 4, CT_STRING),
						 F("disable_incremental_timestamps", 5, CT_BOOL),
						 F("timestamp_unit_multiplier", 6, CT_U64),
						 F("filter_debug_annotations", 7, CT_BOOL),
						 F("enable_thread_time_sampling", 8, CT_BOOL),
						 F("filter_dynamic_event_names", 9, CT_BOOL),
						 F("thread_time_subsampling_ns", 10, CT_U64),
						 END};
static const struct cfg_msg track_event_config = {"TrackEventConfig", track_event_f};

static const struct cfg_field tracepoint_f[] = {F("name", 1, CT_STRING), F("filter", 2, CT_STRING),
						END};
static const struct cfg_msg tracepoint = {"PerfEvents.Tracepoint", tracepoint_f};

static const struct cfg_field timebase_f[] = {F("period", 1, CT_U64),
					      F("frequency", 2, CT_U64),
					      M("tracepoint", 3, tracepoint),
					      E("counter", 4, perf_counter),
					      F("poll_period_ms", 6, CT_U32),
					      F("name", 10, CT_STRING),
					      END};
static const struct cfg_msg timebase = {"PerfEvents.Timebase", timebase_f};

static const struct cfg_field scope_f[] = {R("target_pid", 1, CT_I32),
					   R("target_cmdline", 2, CT_STRING),
					   R("exclude_pid", 3, CT_I32),
					   R("exclude_cmdline", 4, CT_STRING),
					   F("additional_cmdline_count", 5, CT_U32),
					   F("process_shard_count", 6, CT_U32),
					   END};
static const struct cfg_msg scope = {"PerfEventConfig.Scope", scope_f};

static const struct cfg_field callstack_f[] = {M("scope", 1, scope), F("kernel_frames", 2, CT_BOOL),
					       F("user_frames", 3, CT_ENUM), /* UnwindMode */
					       END};
static const struct cfg_msg callstack_sampling = {"PerfEventConfig.CallstackSampling", callstack_f};

static const struct cfg_field perf_event_f[] = {M("timebase", 15, timebase),
						M("callstack_sampling", 16, callstack_sampling),
						F("ring_buffer_read_period_ms", 8, CT_U32),
						F("ring_buffer_pages", 3, CT_U32),
						F("max_enqueued_footprint_kb", 17, CT_U64),
						F("max_daemon_memory_kb", 13, CT_U32),
						F("remote_descriptor_timeout_ms", 9, CT_U32),
						F("unwind_state_clear_period_ms", 10, CT_U32),
						F("all_cpus", 1, CT_BOOL),
						F("sampling_frequency", 2, CT_U32),
						F("kernel_frames", 12, CT_BOOL),
						R("target_pid", 4, CT_I32),
						R("target_cmdline", 5, CT_STRING),
						R("exclude_pid", 6, CT_I32),
						R("exclude_cmdline", 7, CT_STRING),
						F("additional_cmdline_count", 11, CT_U32),
						R("target_cpu", 20, CT_U32),
						F("ignore_open_failure", 21, CT_BOOL),
						END};
static const struct cfg_msg perf_event_config = {"PerfEventConfig", perf_event_f};

static const struct cfg_field chrome_f[] = {F("trace_config", 1, CT_STRING),
					    F("privacy_filtering_enabled", 2, CT_BOOL),
					    F("convert_to_legacy_json", 3, CT_BOOL),
					    E("client_priority", 4, client_priority),
					    F("json_agent_label_filter", 5, CT_STRING),
					    END};
static const struct cfg_msg chrome_config = {"ChromeConfig", chrome_f};

static const struct cfg_field dummy_f[] = {F("field_uint32", 1, CT_U32),
					   F("field_int32", 2, CT_I32),
					   F("field_uint64", 3, CT_U64),
					   F("field_int64", 4, CT_I64),
					   F("field_fixed64", 5, CT_FX64),
					   F("field_sfixed64", 6, CT_SFX64),
					   F("field_fixed32", 7, CT_FX32),
					   F("field_sfixed32", 8, CT_SFX32),
					   F("field_double", 9, CT_DOUBLE),
					   F("field_float", 10, CT_FLOAT),
					   F("field_sint64", 11, CT_S64),
					   F("field_sint32", 12, CT_S32),
					   F("field_string", 13, CT_STRING),
					   F("field_bytes", 14, CT_BYTES),
					   END};
static const struct cfg_msg dummy_fields = {"TestConfig.DummyFields", dummy_f};

static const struct cfg_field test_f[] = {F("message_count", 1, CT_U32),
					  F("max_messages_per_second", 2, CT_U32),
					  F("seed", 3, CT_U32),
					  F("message_size", 4, CT_U32),
					  F("send_batch_on_register", 5, CT_BOOL),
					  M("dummy_fields", 6, dummy_fields),
					  END};
static const struct cfg_msg test_config = {"TestConfig", test_f};

static const struct cfg_field ds_config_f[] = {F("name", 1, CT_STRING),
					       F("target_buffer", 2, CT_U32),
					       F("trace_duration_ms", 3, CT_U32),
					       F("tracing_session_id", 4, CT_U64),
					       F("enable_extra_guardrails", 6, CT_BOOL),
					       F("stop_timeout_ms", 7, CT_U32),
					       F("target_buffer_name", 11, CT_STRING), /* HEAD */
					       M("ftrace_config", 100, ftrace_config),
					       M("chrome_config", 101, chrome_config),
					       M("process_stats_config", 103, process_stats_config),
					       M("sys_stats_config", 104, sys_stats_config),
					       M("perf_event_config", 111, perf_event_config),
					       M("track_event_config", 113, track_event_config),
					       F("legacy_config", 1000, CT_STRING),
					       M("for_testing", 1001, test_config),
					       END};
static const struct cfg_msg data_source_config = {"DataSourceConfig", ds_config_f};

/* --- TraceConfig --- */

static const struct cfg_field buffer_f[] = {F("size_kb", 1, CT_U32),
					    E("fill_policy", 4, fill_policy),
					    F("transfer_on_clone", 5, CT_BOOL),
					    F("clear_before_clone", 6, CT_BOOL),
					    F("name", 7, CT_STRING),
					    END};
static const struct cfg_msg buffer_config = {"BufferConfig", buffer_f};

static const struct cfg_field data_source_f[] = {
	M("config", 1, data_source_config), R("producer_name_filter", 2, CT_STRING),
	R("producer_name_regex_filter", 3, CT_STRING), END};
static const struct cfg_msg data_source = {"DataSource", data_source_f};

static const struct cfg_field builtin_f[] = {F("disable_clock_snapshotting", 1, CT_BOOL),
					     F("disable_trace_config", 2, CT_BOOL),
					     F("disable_system_info", 3, CT_BOOL),
					     F("disable_service_events", 4, CT_BOOL),
					     E("primary_trace_clock", 5, builtin_clock),
					     F("snapshot_interval_ms", 6, CT_U32),
					     F("prefer_suspend_clock_for_snapshot", 7, CT_BOOL),
					     F("disable_chunk_usage_histograms", 8, CT_BOOL),
					     END};
static const struct cfg_msg builtin_data_source = {"BuiltinDataSource", builtin_f};

static const struct cfg_field producer_f[] = {F("producer_name", 1, CT_STRING),
					      F("shm_size_kb", 2, CT_U32),
					      F("page_size_kb", 3, CT_U32), END};
static const struct cfg_msg producer_config = {"ProducerConfig", producer_f};

static const struct cfg_field statsd_f[] = {
	F("triggering_alert_id", 1, CT_I64), F("triggering_config_uid", 2, CT_I32),
	F("triggering_config_id", 3, CT_I64), F("triggering_subscription_id", 4, CT_I64), END};
static const struct cfg_msg statsd_metadata = {"StatsdMetadata", statsd_f};

static const struct cfg_field guardrail_f[] = {F("max_upload_per_day_bytes", 1, CT_U64), END};
static const struct cfg_msg guardrail_overrides = {"GuardrailOverrides", guardrail_f};

static const struct cfg_field trigger_f[] = {F("name", 1, CT_STRING),
					     F("producer_name_regex", 2, CT_STRING),
					     F("stop_delay_ms", 3, CT_U32),
					     F("max_per_24_h", 4, CT_U32),
					     F("skip_probability", 5, CT_DOUBLE),
					     END};
static const struct cfg_msg trigger = {"Trigger", trigger_f};

static const struct cfg_field trigger_config_f[] = {E("trigger_mode", 1, trigger_mode),
						    RM("triggers", 2, trigger),
						    F("trigger_timeout_ms", 3, CT_U32), END};
static const struct cfg_msg trigger_config = {"TriggerConfig", trigger_config_f};

static const struct cfg_field incremental_f[] = {F("clear_period_ms", 1, CT_U32), END};
static const struct cfg_msg incremental_state_config = {"IncrementalStateConfig", incremental_f};

static const struct cfg_field incident_f[] = {
	F("destination_package", 1, CT_STRING), F("destination_class", 2, CT_STRING),
	F("privacy_level", 3, CT_I32),		F("skip_dropbox", 4, CT_BOOL),
	F("skip_incidentd", 5, CT_BOOL),	END};
static const struct cfg_msg incident_report_config = {"IncidentReportConfig", incident_f};

static const struct cfg_field trace_config_f[] = {
	RM("buffers", 1, buffer_config),
	RM("data_sources", 2, data_source),
	F("duration_ms", 3, CT_U32),
	F("enable_extra_guardrails", 4, CT_BOOL),
	E("lockdown_mode", 5, lockdown),
	RM("producers", 6, producer_config),
	M("statsd_metadata", 7, statsd_metadata),
	F("write_into_file", 8, CT_BOOL),
	F("file_write_period_ms", 9, CT_U32),
	F("max_file_size_bytes", 10, CT_U64),
	M("guardrail_overrides", 11, guardrail_overrides),
	F("deferred_start", 12, CT_BOOL),
	F("flush_period_ms", 13, CT_U32),
	F("flush_timeout_ms", 14, CT_U32),
	F("notify_traceur", 16, CT_BOOL),
	M("trigger_config", 17, trigger_config),
	R("activate_triggers", 18, CT_STRING),
	F("allow_user_build_tracing", 19, CT_BOOL),
	M("builtin_data_sources", 20, builtin_data_source),
	M("incremental_state_config", 21, incremental_state_config),
	F("unique_session_name", 22, CT_STRING),
	F("data_source_stop_timeout_ms", 23, CT_U32),
	E("compression_type", 24, compression),
	M("incident_report_config", 25, incident_report_config),
	F("trace_uuid_msb", 27, CT_I64),
	F("trace_uuid_lsb", 28, CT_I64),
	F("output_path", 29, CT_STRING),
	F("bugreport_score", 30, CT_I32),
	E("statsd_logging", 31, statsd_logging),
	END};
const struct cfg_msg sonde__cfg_trace_config = {"TraceConfig", trace_config_f};

const struct cfg_field *sonde__cfg_find_field(const struct cfg_msg *m, const char *name, size_t len)
{
	for (const struct cfg_field *f = m->fields; f->name; f++)
		if (strlen(f->name) == len && memcmp(f->name, name, len) == 0)
			return f;
	return NULL;
}
