import type { InboxClaimedRow, OutboxClaimedRow } from '../dialects/dialect';
import { MESSAGE_ID_HEADER } from '../wire-headers';

// The messages a claim hands to its worker, and how a claimed row becomes one. They live beside
// the claim type, not in lib/outbox or lib/inbox: LeaseService's public claims (`claimOutboxBatch`,
// `claim`, `claimPullBatch`) return them, and fencing must not import the workers that use them.

/** A claimed outbox message, as a `Publisher` receives it. */
export interface OutboundMessage {
  id: string;
  messageId: string;
  destination: string;
  key: string | null;
  payload: unknown;
  /** The stored headers plus `X-Message-Id`. */
  headers: Record<string, string>;
  /** 1 for the first attempt. A claim counts as an attempt. */
  attempt: number;
  createdAt: Date;
}

/** A stored inbox message, as a relay route or a pull handler receives it. */
export interface InboxMessage {
  id: string;
  source: string;
  idempotencyKey: string;
  aggregateId: string | null;
  payload: unknown;
  headers: Record<string, string>;
  /** 1 for the first attempt. */
  attempt: number;
  receivedAt: Date;
}

export function outboundMessageOf(row: OutboxClaimedRow): OutboundMessage {
  return {
    id: row.id,
    messageId: row.messageId,
    destination: row.destination,
    key: row.key,
    payload: row.payload,
    headers: { ...row.headers, [MESSAGE_ID_HEADER]: row.messageId },
    attempt: row.attempts,
    createdAt: row.createdAt,
  };
}

export function inboxMessageOf(
  row: Pick<InboxClaimedRow, 'id' | 'source' | 'idempotencyKey' | 'aggregateId' | 'payload' | 'headers' | 'attempts' | 'receivedAt'>,
): InboxMessage {
  return {
    id: row.id,
    source: row.source,
    idempotencyKey: row.idempotencyKey,
    aggregateId: row.aggregateId,
    payload: row.payload,
    headers: row.headers,
    attempt: row.attempts,
    receivedAt: row.receivedAt,
  };
}
