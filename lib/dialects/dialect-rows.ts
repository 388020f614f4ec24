import type { InboxClaimedRow, LeaseTable, OutboxClaimedRow } from './dialect';

/** The state a completed row takes, and the column that records when. */
export const FINISHED = {
  outbox: { state: 'sent', column: 'sent_at' },
  inbox: { state: 'processed', column: 'processed_at' },
} as const satisfies Record<LeaseTable, { state: string; column: string }>;

/** Orders claimed rows by id (ids are bigints, carried as strings). */
export const byId = (a: { id: string }, b: { id: string }): number => (BigInt(a.id) < BigInt(b.id) ? -1 : 1);

/** A row a reclaim statement returned: its new state and its destination (outbox) or source (inbox). */
export interface ReclaimedRecord {
  state: string;
  name: string;
}

/** What a reclaim step did, per destination or source. */
export interface ReclaimResult {
  /** Rows back to `pending`. */
  pending: number;
  /** Rows that died on their last attempt. */
  dead: number;
  byName: { name: string; pending: number; dead: number }[];
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
  lease_expires_at: Date;
  created_at: Date;
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
  lease_expires_at: Date;
  received_at: Date;
}

/** How a dialect's driver hands back JSON columns and UUIDs. */
export interface RecordDecoding<J> {
  json(value: J): unknown;
  uuid(value: string): string;
}

export function toOutboxClaimedRow<J>(r: OutboxClaimedRecord<J>, decode: RecordDecoding<J>): OutboxClaimedRow {
  return {
    id: String(r.id),
    messageId: decode.uuid(r.message_id),
    destination: r.destination,
    key: r.key,
    payload: decode.json(r.payload),
    headers: r.headers === null ? {} : (decode.json(r.headers) as Record<string, string>),
    attempts: r.attempts,
    token: decode.uuid(r.claim_token),
    leaseExpiresAt: r.lease_expires_at,
    createdAt: r.created_at,
  };
}

export function toInboxClaimedRow<J>(r: InboxClaimedRecord<J>, decode: RecordDecoding<J>): InboxClaimedRow {
  return {
    id: String(r.id),
    source: r.source,
    idempotencyKey: r.idempotency_key,
    aggregateId: r.aggregate_id,
    payload: decode.json(r.payload),
    headers: r.headers === null ? {} : (decode.json(r.headers) as Record<string, string>),
    attempts: r.attempts,
    token: decode.uuid(r.claim_token),
    leaseExpiresAt: r.lease_expires_at,
    receivedAt: r.received_at,
  };
}
