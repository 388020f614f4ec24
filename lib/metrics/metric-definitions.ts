import { INSTANCE_STATES, type InstanceState } from '../dialects/dialect-rows';
import type { QueueBoxEventMap, QueueBoxEventName } from '../events/queuebox.events';
import type { QueueTable } from '../types/claims';

/** The counters QueueBoxMetrics keeps. Names follow Prometheus conventions (`queuebox_` prefix, `_total`). */
export type QueueBoxCounter =
  | 'queuebox_claims_lost_total'
  | 'queuebox_outbox_messages_reclaimed_total'
  | 'queuebox_outbox_messages_published_total'
  | 'queuebox_outbox_messages_retried_total'
  | 'queuebox_outbox_messages_dead_lettered_total'
  | 'queuebox_outbox_rate_limited_total'
  | 'queuebox_outbox_rate_limited_seconds_total'
  | 'queuebox_inbox_messages_received_total'
  | 'queuebox_inbox_messages_duplicates_total'
  | 'queuebox_inbox_messages_processed_total'
  | 'queuebox_inbox_messages_retried_total'
  | 'queuebox_inbox_messages_dead_lettered_total'
  | 'queuebox_inbox_messages_reclaimed_total'
  | 'queuebox_instances_dead_total'
  | 'queuebox_claims_released_total';

export type QueueBoxHistogram = 'queuebox_outbox_publish_duration_seconds' | 'queuebox_inbox_handle_duration_seconds';

export interface MetricDefinition<N extends string = string> {
  name: N;
  help: string;
  labelNames: string[];
}

/** Every counter, with its help text and labels (the metrics reference in docs/operations.md lists the same). */
export const COUNTERS: MetricDefinition<QueueBoxCounter>[] = [
  { name: 'queuebox_claims_lost_total', help: 'Claims found lost by a fenced write or a failed renewal.', labelNames: ['component'] },
  {
    name: 'queuebox_outbox_messages_reclaimed_total',
    help: 'Outbox rows whose lease expired, returned to pending (or dead on their last attempt) by the reclaim step.',
    labelNames: ['destination'],
  },
  { name: 'queuebox_outbox_messages_published_total', help: 'Outbox messages published and marked sent.', labelNames: ['destination'] },
  { name: 'queuebox_outbox_messages_retried_total', help: 'Failed publishes scheduled for a retry.', labelNames: ['destination'] },
  { name: 'queuebox_outbox_messages_dead_lettered_total', help: 'Outbox messages marked dead.', labelNames: ['destination', 'cause'] },
  {
    name: 'queuebox_outbox_rate_limited_total',
    help: 'Claimed outbox messages put off because their destination had no rate limit token (no attempt charged).',
    labelNames: ['destination'],
  },
  {
    name: 'queuebox_outbox_rate_limited_seconds_total',
    help: 'Time outbox messages were put off waiting for their destination rate limit, in seconds.',
    labelNames: ['destination'],
  },
  { name: 'queuebox_inbox_messages_received_total', help: 'New inbox messages stored by receive().', labelNames: ['source'] },
  {
    name: 'queuebox_inbox_messages_duplicates_total',
    help: 'Inbox receives that found the message already stored.',
    labelNames: ['source'],
  },
  {
    name: 'queuebox_inbox_messages_processed_total',
    help: 'Inbox messages forwarded by the relay or handled by a pull worker.',
    labelNames: ['component', 'source'],
  },
  {
    name: 'queuebox_inbox_messages_retried_total',
    help: 'Failed inbox attempts scheduled for a retry.',
    labelNames: ['component', 'source'],
  },
  {
    name: 'queuebox_inbox_messages_dead_lettered_total',
    help: 'Inbox messages marked dead.',
    labelNames: ['component', 'source', 'cause'],
  },
  {
    name: 'queuebox_inbox_messages_reclaimed_total',
    help: 'Relay rows whose lease expired, returned to pending (or dead) by the reclaim step; pull rows dead after their last claim expired.',
    labelNames: ['component', 'source'],
  },
  {
    name: 'queuebox_instances_dead_total',
    help: 'Instances this replica found silent past their instances.deadAfterMs and whose leases it ended.',
    labelNames: [],
  },
  {
    name: 'queuebox_claims_released_total',
    help: 'Claims whose lease was ended early: held by an instance declared dead, or left by one that shut down.',
    labelNames: ['table', 'cause'],
  },
];

/**
 * The backlog gauges: per outbox destination or inbox source, a field of `QueueBoxAdmin.backlog()`
 * (one query for all of them). Prometheus and OpenTelemetry read them at each scrape or collection.
 */
export const BACKLOG_GAUGES = [
  { name: 'queuebox_outbox_pending_messages', help: 'Outbox rows pending (due or scheduled).', field: 'pending', component: 'outbox' },
  { name: 'queuebox_outbox_processing_messages', help: 'Outbox rows claimed by a worker now.', field: 'processing', component: 'outbox' },
  { name: 'queuebox_outbox_dead_messages', help: 'Outbox rows dead (waiting for replay or discard).', field: 'dead', component: 'outbox' },
  {
    name: 'queuebox_outbox_oldest_pending_age_seconds',
    help: 'Age of the oldest due pending outbox row (0 when none is due).',
    field: 'oldestPendingAgeSeconds',
    component: 'outbox',
  },
  { name: 'queuebox_inbox_pending_messages', help: 'Inbox rows pending (due or scheduled).', field: 'pending', component: 'inbox' },
  {
    name: 'queuebox_inbox_processing_messages',
    help: 'Inbox rows claimed by the relay or a pull worker now.',
    field: 'processing',
    component: 'inbox',
  },
  { name: 'queuebox_inbox_dead_messages', help: 'Inbox rows dead (waiting for replay or discard).', field: 'dead', component: 'inbox' },
  {
    name: 'queuebox_inbox_oldest_pending_age_seconds',
    help: 'Age of the oldest due pending inbox row (0 when none is due).',
    field: 'oldestPendingAgeSeconds',
    component: 'inbox',
  },
] as const;

/** The label (attribute) that names a backlog gauge's destination or source. */
export function backlogLabel(component: 'outbox' | 'inbox'): 'destination' | 'source' {
  return component === 'outbox' ? 'destination' : 'source';
}

/**
 * The database warnings of each QueueBox's doctor (docs/doctor.md) by code: how many are present
 * in its last examination, every code present (0 when none), so `max(queuebox_database_warnings) > 0`
 * can alert and `absent()` stays quiet. Cardinality: the codes (`DATABASE_WARNING_CODES`) times
 * the QueueBoxes. Read from the last examination: no query at scrape time.
 */
export const DATABASE_WARNINGS_GAUGE = {
  name: 'queuebox_database_warnings',
  help: 'Database warnings of the last doctor examination by code (docs/doctor.md): dead rows, bloat, autovacuum off, a held xmin horizon, lock waits, clock skew, LISTEN unavailable, a missing or invalid index, migrations behind or ahead.',
  labelNames: ['code'],
} as const;

/**
 * The instances of a QueueBox's instances table by state (`alive`, `silent`, `dead`, by the
 * database clock; see `InstanceState`): a gauge read from the database at each scrape, every state
 * present (0 when none), so `queuebox_instances{state="silent"} > 0` can alert.
 */
export const INSTANCES_GAUGE = {
  name: 'queuebox_instances',
  help: 'QueueBox instances in the instances table by state, by the database clock: alive; silent (missed two heartbeats, still holding its rows); dead (silent past its instances.deadAfterMs, its leases not ended yet).',
  labelNames: ['state'],
  states: INSTANCE_STATES,
} as const;

/** How many of `rows` (an instances table) are in each state: every state, 0 when none. */
export function instanceCounts(rows: readonly { state: InstanceState }[]): Record<InstanceState, number> {
  const counts = Object.fromEntries(INSTANCE_STATES.map((state) => [state, 0])) as Record<InstanceState, number>;
  for (const row of rows) counts[row.state]++;
  return counts;
}

/**
 * The paused destinations (`component="outbox"`) and sources (`"inbox"`) of a QueueBox (issue 40):
 * 1 while paused, 0 once resumed (for the names this process has seen paused), read from the
 * pauses table at each scrape. Its series are the names an operator paused, at most `maxSeries`
 * per QueueBox (the first by component and name): bounded by what people pause, never by traffic.
 */
export const PAUSED_GAUGE = {
  name: 'queuebox_paused',
  help: 'Paused outbox destinations and inbox sources: 1 while paused (claims skip their rows), 0 once resumed.',
  labelNames: ['component', 'name'],
  maxSeries: 100,
} as const;

/**
 * Dead rows by destination (outbox) or source (inbox) and error class, read from the database at
 * each scrape. Its cardinality is bounded whatever the errors: per QueueBox and component, the
 * `top` largest (name, error class) pairs get a series each and the rest are summed into one
 * series `{name="other", error_class="other"}`, so at most `top + 1` series per component.
 */
export const DEAD_LETTERS_GAUGE = {
  name: 'queuebox_dead_letters',
  help: 'Dead rows by destination or source and error class (the class part of their fingerprint): the 20 largest pairs per component, the rest summed as name="other", error_class="other".',
  labelNames: ['component', 'name', 'error_class'],
  top: 20,
} as const;

/** One series of `queuebox_dead_letters`. */
export interface DeadLetterSeries {
  component: QueueTable;
  name: string;
  errorClass: string;
  count: number;
}

/** Dead rows of one component by (name, error class), as `QueueBoxAdmin.deadLetterClasses` counts them. */
export type DeadLetterClassCounts = (component: QueueTable) => Promise<{ name: string; errorClass: string; count: number }[]>;

/** Both components' dead rows by (name, error class), each bounded by `boundedSeries`: one query per table. */
export async function deadLetterSeries(read: DeadLetterClassCounts): Promise<DeadLetterSeries[]> {
  const series: DeadLetterSeries[] = [];
  for (const component of ['outbox', 'inbox'] as const) series.push(...boundedSeries(component, await read(component)));
  return series;
}

/** The `top` largest (name, error class) counts of one component, and the rest summed as `other` (see DEAD_LETTERS_GAUGE). */
export function boundedSeries(
  component: QueueTable,
  counts: { name: string; errorClass: string; count: number }[],
  top: number = DEAD_LETTERS_GAUGE.top,
): DeadLetterSeries[] {
  const sorted = [...counts].sort(
    (a, b) => b.count - a.count || (a.name < b.name ? -1 : a.name > b.name ? 1 : a.errorClass < b.errorClass ? -1 : 1),
  );
  const kept = sorted.slice(0, top).map((c) => ({ component, ...c }));
  const rest = sorted.slice(top).reduce((sum, c) => sum + c.count, 0);
  return rest > 0 ? [...kept, { component, name: 'other', errorClass: 'other', count: rest }] : kept;
}

/** Duration histograms, in seconds; `outcome` is `success` or `failure`. */
export const HISTOGRAMS: (MetricDefinition<QueueBoxHistogram> & { buckets: number[] })[] = [
  {
    name: 'queuebox_outbox_publish_duration_seconds',
    help: 'Time a publisher took to publish one message.',
    labelNames: ['destination', 'outcome'],
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  },
  {
    name: 'queuebox_inbox_handle_duration_seconds',
    help: 'Time the relay took to forward, or a pull handler to handle and commit, one message.',
    labelNames: ['component', 'source', 'outcome'],
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  },
];

export type Labels = Record<string, string>;

/**
 * The `component` label value of a worker's metrics. The relay's stays `inbox`: the value the
 * design names in `queuebox_claims_lost_total{component="inbox"}`, and that dashboards and alerts
 * built on 0.1 query; its events and logs say `relay`. The one place the two names meet.
 */
export function componentLabel(component: unknown): string {
  return component === 'relay' ? 'inbox' : String(component);
}

export interface MetricUpdate {
  counters: { name: QueueBoxCounter; labels: Labels; by: number }[];
  histogram?: { name: QueueBoxHistogram; labels: Labels; seconds: number };
}

/** What one event moves: the single mapping from events to metrics, shared by every exporter. */
export function metricUpdate<K extends QueueBoxEventName>(name: K, event: QueueBoxEventMap[K]): MetricUpdate {
  const e = event as QueueBoxEventMap[QueueBoxEventName] & Record<string, unknown>;
  const count = (counter: QueueBoxCounter, labels: Labels, by = 1) => ({ name: counter, labels, by });
  const publish = (outcome: string) => ({
    name: 'queuebox_outbox_publish_duration_seconds' as const,
    labels: { destination: String(e.destination), outcome },
    seconds: Number(e.durationMs) / 1000,
  });
  const handle = (outcome: string) => ({
    name: 'queuebox_inbox_handle_duration_seconds' as const,
    labels: { component: componentLabel(e.component), source: String(e.source), outcome },
    seconds: Number(e.durationMs) / 1000,
  });
  const destination = { destination: String(e.destination) };
  const inbox = { component: componentLabel(e.component), source: String(e.source) };
  switch (name) {
    case 'queuebox:published':
      return { counters: [count('queuebox_outbox_messages_published_total', destination)], histogram: publish('success') };
    case 'queuebox:retry-scheduled':
      return { counters: [count('queuebox_outbox_messages_retried_total', destination)], histogram: publish('failure') };
    case 'queuebox:dead-lettered':
      return {
        counters: [count('queuebox_outbox_messages_dead_lettered_total', { ...destination, cause: 'failure' })],
        histogram: publish('failure'),
      };
    case 'queuebox:rate-limited':
      return {
        counters: [
          count('queuebox_outbox_rate_limited_total', destination),
          count('queuebox_outbox_rate_limited_seconds_total', destination, Number(e.delayMs) / 1000),
        ],
      };
    case 'queuebox:claim-lost':
      return { counters: [count('queuebox_claims_lost_total', { component: componentLabel(e.component) })] };
    case 'queuebox:reclaimed': {
      // Rows on their last attempt die here: counted as reclaimed and as dead-lettered (cause "reclaim").
      const reclaimed = Number(e.pending) + Number(e.dead);
      const dead = Number(e.dead);
      if (e.component === 'outbox') {
        const labels = { destination: String(e.name) };
        const counters = [count('queuebox_outbox_messages_reclaimed_total', labels, reclaimed)];
        if (dead > 0) counters.push(count('queuebox_outbox_messages_dead_lettered_total', { ...labels, cause: 'reclaim' }, dead));
        return { counters };
      }
      const labels = { component: componentLabel(e.component), source: String(e.name) };
      const counters = [count('queuebox_inbox_messages_reclaimed_total', labels, reclaimed)];
      if (dead > 0) counters.push(count('queuebox_inbox_messages_dead_lettered_total', { ...labels, cause: 'reclaim' }, dead));
      return { counters };
    }
    case 'queuebox:inbox:received':
      return { counters: [count('queuebox_inbox_messages_received_total', { source: String(e.source) })] };
    case 'queuebox:inbox:duplicate':
      return { counters: [count('queuebox_inbox_messages_duplicates_total', { source: String(e.source) })] };
    case 'queuebox:relay:processed':
    case 'queuebox:pull:processed':
      return { counters: [count('queuebox_inbox_messages_processed_total', inbox)], histogram: handle('success') };
    case 'queuebox:relay:retry-scheduled':
    case 'queuebox:pull:retry-scheduled':
      return { counters: [count('queuebox_inbox_messages_retried_total', inbox)], histogram: handle('failure') };
    case 'queuebox:relay:dead-lettered':
    case 'queuebox:pull:dead-lettered':
      return {
        counters: [count('queuebox_inbox_messages_dead_lettered_total', { ...inbox, cause: 'failure' })],
        histogram: handle('failure'),
      };
    case 'queuebox:instance-dead':
    case 'queuebox:instance-deregistered': {
      const { released, registered } = event as Partial<QueueBoxEventMap['queuebox:instance-dead']> &
        QueueBoxEventMap['queuebox:instance-deregistered'];
      const cause = name === 'queuebox:instance-dead' ? 'instance-dead' : 'shutdown';
      // An unregistered owner was counted when it was declared dead; only its claims count again.
      const counters = name === 'queuebox:instance-dead' && registered ? [count('queuebox_instances_dead_total', {})] : [];
      for (const table of ['outbox', 'inbox'] as const) {
        if (released[table] > 0) counters.push(count('queuebox_claims_released_total', { table, cause }, released[table]));
      }
      return { counters };
    }
    default:
      return { counters: [] };
  }
}
