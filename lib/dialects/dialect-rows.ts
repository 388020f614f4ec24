import type { LeaseTable } from './dialect';

/** The state a completed row takes, and the column that records when. */
export const FINISHED = {
  outbox: { state: 'sent', column: 'sent_at' },
  inbox: { state: 'processed', column: 'processed_at' },
} as const satisfies Record<LeaseTable, { state: string; column: string }>;

/** Orders claimed rows by id (ids are bigints, carried as strings). */
export const byId = (a: { id: string }, b: { id: string }): number => (BigInt(a.id) < BigInt(b.id) ? -1 : 1);

/** Counts what a reclaim statement returned: rows back to `pending`, and rows that died on their last attempt. */
export function countReclaimed({ rows }: { rows: { state: string }[] }): { pending: number; dead: number } {
  const dead = rows.filter((r) => r.state === 'dead').length;
  return { pending: rows.length - dead, dead };
}
