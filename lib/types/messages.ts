// The messages QueueBox hands to applications: one shape from the claim statement to the
// publisher, the relay route, the pull handler and the events (which name a subset of it).

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
