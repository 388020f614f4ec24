import type { AdminComponent, BacklogRow, BlockedKeyRow, DeadLetterRow } from './admin.types';

/** One count of the backlog statement: a (component, name, state) group. */
export interface BacklogRecord {
  component: AdminComponent;
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
  return [...rows.values()].sort((a, b) =>
    a.component === b.component ? (a.name < b.name ? -1 : a.name > b.name ? 1 : 0) : a.component === 'outbox' ? -1 : 1,
  );
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
  created_at: Date;
  claimed_at: Date | null;
  headers: J | null;
  payload?: J;
}

export function toDeadLetterRow<J>(
  component: AdminComponent,
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
    createdAt: r.created_at,
    lastAttemptAt: r.claimed_at,
    headers: r.headers === null ? {} : (decode.json(r.headers) as Record<string, string>),
  };
  if ('payload' in r) row.payload = decode.json(r.payload as J);
  return row;
}

export interface BlockedKeyRecord {
  id: string | number;
  message_id: string | null;
  name: string;
  key: string;
  state: 'pending' | 'processing';
  attempts: number;
  last_error: string;
  next_attempt_at: Date;
  waiting: string | number;
}

export function toBlockedKeyRow(component: AdminComponent, r: BlockedKeyRecord, uuid: (value: string) => string): BlockedKeyRow {
  return {
    component,
    name: r.name,
    key: r.key,
    headId: String(r.id),
    messageId: r.message_id === null ? null : uuid(r.message_id),
    state: r.state,
    attempts: r.attempts,
    lastError: r.last_error,
    nextAttemptAt: r.next_attempt_at,
    waiting: Number(r.waiting),
  };
}
