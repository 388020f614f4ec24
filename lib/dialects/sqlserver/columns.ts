// The columns that differ between the outbox and the inbox, for the admin's and retention's statements.

/** Name (destination or source), key (key or aggregate) and arrival time (enqueue or receive) of each table. */
export const ADMIN_COLUMNS = {
  outbox: { name: '[destination]', key: '[key]', created: '[created_at]' },
  inbox: { name: '[source]', key: '[aggregate_id]', created: '[received_at]' },
} as const;

export type Component = keyof typeof ADMIN_COLUMNS;

/** When a dead row died: its last claim, or its arrival for a row never claimed. */
export const deadAt = (component: Component) => `COALESCE([claimed_at], ${ADMIN_COLUMNS[component].created})`;
