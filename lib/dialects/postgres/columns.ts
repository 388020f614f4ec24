// The columns that differ between the outbox and the inbox, for the admin's and retention's statements.

/** The columns that differ between the outbox and the inbox. */
export interface AdminColumns {
  /** Destination or source. */
  name: 'destination' | 'source';
  /** Ordering key or aggregate. */
  key: '"key"' | 'aggregate_id';
  /** Enqueue or receive time. */
  created: 'created_at' | 'received_at';
}

export const ADMIN_COLUMNS = {
  outbox: { name: 'destination', key: '"key"', created: 'created_at' },
  inbox: { name: 'source', key: 'aggregate_id', created: 'received_at' },
} as const satisfies Record<'outbox' | 'inbox', AdminColumns>;

/** When a dead row died: its last claim, or its arrival for a row never claimed. */
export const deadAt = (c: AdminColumns) => `coalesce(claimed_at, ${c.created})`;
