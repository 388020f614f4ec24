import type { FollowerRow, OutboxClaim, QueueTable } from '../types/claims';
import type { InboxMessage, OutboundMessage } from '../types/messages';
import { MESSAGE_ID_HEADER } from '../wire-headers';
import type { InboxClaimedRow } from './dialect';
import type {
  AttemptRow,
  BacklogRow,
  BlockedKeyRow,
  ClaimRow,
  DeadLetterGroupRow,
  DeadLetterRow,
  InstanceState,
  ReclaimResult,
  RowOwner,
  Throughput,
  ThroughputRow,
} from './dialect-rows';

/** The state a completed row takes, and the column that records when. */
export const FINISHED = {
  outbox: { state: 'sent', column: 'sent_at' },
  inbox: { state: 'processed', column: 'processed_at' },
} as const satisfies Record<QueueTable, { state: string; column: string }>;

/**
 * Orders claimed rows by id (ids are non-negative bigints, carried as strings without leading
 * zeros: the shorter is the smaller, and of two as long the first in text order), without making
 * a BigInt per comparison.
 */
export const byId = (a: { id: string }, b: { id: string }): number =>
  a.id.length !== b.id.length ? a.id.length - b.id.length : a.id < b.id ? -1 : a.id > b.id ? 1 : 0;

/** A row a reclaim statement returned: its new state and its destination (outbox) or source (inbox). */
export interface ReclaimedRecord {
  state: string;
  name: string;
}

/** Counts what a reclaim statement returned, in total and per destination or source. */
export function countReclaimed({ rows }: { rows: ReclaimedRecord[] }): ReclaimResult {
  const byName = new Map<string, { name: string; pending: number; dead: number }>();
  for (const row of rows) {
    const counts = byName.get(row.name) ?? { name: row.name, pending: 0, dead: 0 };
    byName.set(row.name, counts);
    if (row.state === 'dead') counts.dead++;
    else counts.pending++;
  }
  const dead = rows.filter((r) => r.state === 'dead').length;
  return { pending: rows.length - dead, dead, byName: [...byName.values()] };
}

/**
 * A time column as a claim statement returns it: a `Date`, or milliseconds since the epoch (the
 * PostgreSQL claims send them so: see `claimColumns`).
 */
export type Instant = Date | number;

/** A claimed outbox row as a driver returns it; `J` is how JSON columns arrive (parsed, or as text). */
export interface OutboxClaimedRecord<J> {
  id: string;
  message_id: string;
  destination: string;
  key: string | null;
  payload: J;
  headers: J | null;
  attempts: number;
  claim_token: string;
  lease_expires_at: Instant;
  created_at: Instant;
}

/** A claimed inbox row as a driver returns it. */
export interface InboxClaimedRecord<J> {
  id: string;
  source: string;
  idempotency_key: string;
  aggregate_id: string | null;
  payload: J;
  headers: J | null;
  attempts: number;
  claim_token: string;
  lease_expires_at: Instant;
  received_at: Instant;
}

/** How a dialect's driver hands back JSON columns and UUIDs. */
export interface RecordDecoding<J> {
  json(value: J): unknown;
  uuid(value: string): string;
}

/** A claim's time column as a `Date`. */
export function dateOf(value: Instant): Date {
  return typeof value === 'number' ? new Date(value) : value;
}

/**
 * The stored headers of a row (null when none), as a new object the caller may change: a JSON
 * column decodes to a fresh object every time.
 */
function headersOf<J>(value: J | null, decode: RecordDecoding<J>): Record<string, string> {
  return value === null ? {} : (decode.json(value) as Record<string, string>);
}

/**
 * A claimed outbox row as the poller's claim (`leaseMs` its lease): its fence, and its message as
 * publishers see it (`X-Message-Id` among the headers). Made in one piece: the claim is the object
 * the poller works with, not a copy of it.
 */
export function toOutboxClaim<J>(r: OutboxClaimedRecord<J>, decode: RecordDecoding<J>, leaseMs: number): OutboxClaim {
  const message = outboundMessageOf(r, r.attempts, decode);
  return {
    component: 'outbox',
    table: 'outbox',
    id: message.id,
    token: decode.uuid(r.claim_token),
    leaseMs,
    leaseExpiresAt: dateOf(r.lease_expires_at),
    attempt: r.attempts,
    message,
  };
}

/** The message of an outbox row statement (claims and followers), decoded, at `attempt`. */
function outboundMessageOf<J>(
  r: Pick<OutboxClaimedRecord<J>, 'id' | 'message_id' | 'destination' | 'key' | 'payload' | 'headers' | 'created_at'>,
  attempt: number,
  decode: RecordDecoding<J>,
): OutboundMessage {
  const messageId = decode.uuid(r.message_id);
  // The decoded headers are this row's own object: X-Message-Id is set on it (last, or where the
  // stored headers had it), as a spread into a copy would place it, without the copy.
  const headers = headersOf(r.headers, decode);
  headers[MESSAGE_ID_HEADER] = messageId;
  return {
    id: String(r.id),
    messageId,
    destination: r.destination,
    key: r.key,
    payload: decode.json(r.payload),
    headers,
    attempt,
    createdAt: dateOf(r.created_at),
  };
}

export function toInboxClaimedRow<J>(r: InboxClaimedRecord<J>, decode: RecordDecoding<J>): InboxClaimedRow {
  const message = inboxMessageOf(r, r.attempts, decode);
  return { id: message.id, token: decode.uuid(r.claim_token), leaseExpiresAt: dateOf(r.lease_expires_at), attempt: r.attempts, message };
}

/** The message of an inbox row statement (claims and followers), decoded, at `attempt`. */
function inboxMessageOf<J>(
  r: Pick<InboxClaimedRecord<J>, 'id' | 'source' | 'idempotency_key' | 'aggregate_id' | 'payload' | 'headers' | 'received_at'>,
  attempt: number,
  decode: RecordDecoding<J>,
): InboxMessage {
  return {
    id: String(r.id),
    source: r.source,
    idempotencyKey: r.idempotency_key,
    aggregateId: r.aggregate_id,
    payload: decode.json(r.payload),
    headers: headersOf(r.headers, decode),
    attempt,
    receivedAt: dateOf(r.received_at),
  };
}

/** A follower row as a driver returns it (`due`: a boolean, or 1/0 from SQL Server). */
export interface InboxFollowerRecord<J> {
  id: string;
  head_id: string;
  source: string;
  idempotency_key: string;
  aggregate_id: string;
  payload: J;
  headers: J | null;
  attempts: number;
  received_at: Date;
  due: boolean | number;
}

/** A follower: its message at the attempt that completing it counts. */
export function toInboxFollowerRow<J>(r: InboxFollowerRecord<J>, decode: RecordDecoding<J>): FollowerRow<InboxMessage> {
  return { headId: String(r.head_id), due: r.due === true || r.due === 1, message: inboxMessageOf(r, r.attempts + 1, decode) };
}

/** An outbox follower row as a driver returns it (`due`: a boolean, or 1/0 from SQL Server). */
export interface OutboxFollowerRecord<J> extends Omit<OutboxClaimedRecord<J>, 'claim_token' | 'lease_expires_at'> {
  head_id: string;
  due: boolean | number;
}

/** An outbox follower: its message at the attempt that completing it counts. */
export function toOutboxFollowerRow<J>(r: OutboxFollowerRecord<J>, decode: RecordDecoding<J>): FollowerRow<OutboundMessage> {
  return { headId: String(r.head_id), due: r.due === true || r.due === 1, message: outboundMessageOf(r, r.attempts + 1, decode) };
}

/** One count of the backlog statement: a (component, name, state) group. */
export interface BacklogRecord {
  component: QueueTable;
  name: string;
  state: 'pending' | 'processing' | 'dead';
  n: string | number;
  oldest: string | number | null;
}

/** Folds the per-state counts into one row per (component, name), sorted. */
export function toBacklogRows(records: BacklogRecord[]): BacklogRow[] {
  const rows = new Map<string, BacklogRow>();
  for (const r of records) {
    const id = `${r.component}\u0000${r.name}`;
    let row = rows.get(id);
    if (!row) {
      row = { component: r.component, name: r.name, pending: 0, processing: 0, dead: 0, oldestPendingAgeSeconds: null };
      rows.set(id, row);
    }
    row[r.state] = Number(r.n);
    if (r.state === 'pending' && r.oldest !== null) row.oldestPendingAgeSeconds = Math.max(0, Number(r.oldest));
  }
  return [...rows.values()].sort(byComponentAndName);
}

/** A dead row as a driver returns it; `J` is how JSON columns arrive. */
export interface DeadLetterRecord<J> {
  id: string | number;
  message_id: string | null;
  idempotency_key: string | null;
  name: string;
  key: string | null;
  attempts: number;
  last_error: string | null;
  fingerprint: string | null;
  created_at: Date;
  claimed_at: Date | null;
  headers: J | null;
  payload?: J;
}

export function toDeadLetterRow<J>(
  component: QueueTable,
  r: DeadLetterRecord<J>,
  decode: { json(value: J): unknown; uuid(value: string): string },
): DeadLetterRow {
  const row: DeadLetterRow = {
    component,
    id: String(r.id),
    messageId: r.message_id === null ? null : decode.uuid(r.message_id),
    idempotencyKey: r.idempotency_key,
    name: r.name,
    key: r.key,
    attempts: r.attempts,
    lastError: r.last_error,
    fingerprint: r.fingerprint ?? null,
    createdAt: r.created_at,
    lastAttemptAt: r.claimed_at,
    headers: r.headers === null ? {} : (decode.json(r.headers) as Record<string, string>),
  };
  if ('payload' in r) row.payload = decode.json(r.payload as J);
  return row;
}

export interface BlockedKeyRecord extends OwnerRecord {
  id: string | number;
  message_id: string | null;
  name: string;
  key: string;
  state: 'pending' | 'processing';
  attempts: number;
  last_error: string | null;
  reason: 'failing' | 'held';
  next_attempt_at: Date;
  waiting: string | number;
  held_for: string | number | null;
}

/** Who holds a row, as the admin statements return it (see `ownerColumns`). */
interface OwnerRecord {
  owner: string | null;
  owner_state: InstanceState | null;
  last_claimed_by: string | null;
}

function ownerOf(r: OwnerRecord, uuid: (value: string) => string): RowOwner {
  return {
    owner: r.owner === null ? null : uuid(r.owner),
    ownerState: r.owner_state,
    lastClaimedBy: r.last_claimed_by === null ? null : uuid(r.last_claimed_by),
  };
}

export function toBlockedKeyRow(component: QueueTable, r: BlockedKeyRecord, uuid: (value: string) => string): BlockedKeyRow {
  return {
    component,
    name: r.name,
    key: r.key,
    headId: String(r.id),
    messageId: r.message_id === null ? null : uuid(r.message_id),
    state: r.state,
    attempts: r.attempts,
    lastError: r.last_error,
    reason: r.reason,
    nextAttemptAt: r.next_attempt_at,
    waiting: Number(r.waiting),
    heldSeconds: r.held_for === null ? null : Math.max(0, Number(r.held_for)),
    ...ownerOf(r, uuid),
  };
}

/** One count of the throughput statement: a (component, name, outcome, minute) group. */
export interface ThroughputRecord {
  component: QueueTable;
  name: string;
  outcome: 'finished' | 'dead';
  /** Whole minutes from `since`. */
  minute: number | string;
  n: string | number;
}

/** Folds the counts into one series per (component, name), sorted like the backlog. */
export function toThroughput(since: Date, minutes: number, records: ThroughputRecord[]): Omit<Throughput, 'sentRowsKept'> {
  const rows = new Map<string, ThroughputRow>();
  for (const r of records) {
    const minute = Number(r.minute);
    // A row stamped later than the clock read before the statement (a worker finished it in between) lands in the current minute.
    const at = Math.min(Math.max(minute, 0), minutes - 1);
    const id = `${r.component}\u0000${r.name}`;
    let row = rows.get(id);
    if (!row) {
      row = { component: r.component, name: r.name, finished: new Array(minutes).fill(0), dead: new Array(minutes).fill(0) };
      rows.set(id, row);
    }
    row[r.outcome][at] += Number(r.n);
  }
  return { since, minutes, rows: [...rows.values()].sort(byComponentAndName) };
}

/** The outbox first, then by name: the order of every list of destinations and sources (backlog, throughput, overview, history). */
export function byComponentAndName(a: { component: QueueTable; name: string }, b: { component: QueueTable; name: string }): number {
  if (a.component !== b.component) return a.component === 'outbox' ? -1 : 1;
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

/** A row in flight as a driver returns it. */
export interface ClaimRecord extends OwnerRecord {
  id: string | number;
  message_id: string | null;
  idempotency_key: string | null;
  name: string;
  key: string | null;
  claim_token: string;
  attempts: number;
  claimed_at: Date;
  lease_expires_at: Date;
  age: string | number;
  lease_left: string | number;
}

export function toClaimRow(component: QueueTable, r: ClaimRecord, uuid: (value: string) => string): ClaimRow {
  return {
    component,
    id: String(r.id),
    messageId: r.message_id === null ? null : uuid(r.message_id),
    idempotencyKey: r.idempotency_key,
    name: r.name,
    key: r.key,
    token: uuid(r.claim_token),
    attempts: r.attempts,
    claimedAt: r.claimed_at,
    leaseExpiresAt: r.lease_expires_at,
    ageSeconds: Math.max(0, Number(r.age)),
    leaseRemainingSeconds: Number(r.lease_left),
    ...ownerOf(r, uuid),
  };
}

export interface DeadLetterGroupRecord {
  name: string;
  fingerprint: string | null;
  n: string | number;
  first_at: Date;
  last_at: Date;
}

export function toDeadLetterGroupRow(component: QueueTable, r: DeadLetterGroupRecord): DeadLetterGroupRow {
  return { component, name: r.name, fingerprint: r.fingerprint, count: Number(r.n), firstDeadAt: r.first_at, lastDeadAt: r.last_at };
}

export interface AttemptRecord {
  id: string | number;
  attempt: number;
  failed_at: Date;
  duration_ms: string | number | null;
  instance_id: string | null;
  error_class: string;
  error: string;
  outcome: 'retry' | 'dead';
}

export function toAttemptRow(r: AttemptRecord, uuid: (value: string) => string): AttemptRow {
  return {
    attempt: r.attempt,
    failedAt: r.failed_at,
    durationMs: r.duration_ms === null ? null : Number(r.duration_ms),
    instanceId: r.instance_id === null ? null : uuid(r.instance_id),
    errorClass: r.error_class,
    error: r.error,
    outcome: r.outcome,
  };
}
