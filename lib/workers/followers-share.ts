// Worker runtime: which of the followers a claim read it takes, within its room. Shared by the
// outbox poller's followers and the inbox's (the relay and batch pull handlers).

import { byId } from '../dialects/records';

/** A follower as the dialects read it: the head it follows, and its message (in id order per head). */
interface FollowerLike {
  headId: string;
  message: { id: string };
}

/**
 * The followers to take of `rows` (each head's rows in id order), at most `room`: per head, its
 * rows up to the first that `stops` (not due, or one the worker must not take), ranked by their
 * place behind the head; the room goes to the lowest ranks first, so every head gets its share.
 * Returned in id order.
 */
export function shareFollowers<R extends FollowerLike>(rows: readonly R[], room: number, stops: (row: R) => boolean): R[] {
  const ranked: { rank: number; row: R }[] = [];
  const stopped = new Set<string>();
  const taken = new Map<string, number>();
  for (const row of rows) {
    if (stopped.has(row.headId)) continue;
    if (stops(row)) {
      stopped.add(row.headId);
      continue;
    }
    const rank = taken.get(row.headId) ?? 0;
    taken.set(row.headId, rank + 1);
    ranked.push({ rank, row });
  }
  const byRowId = (a: { row: R }, b: { row: R }) => byId(a.row.message, b.row.message);
  ranked.sort((a, b) => a.rank - b.rank || byRowId(a, b));
  return ranked
    .slice(0, room)
    .sort(byRowId)
    .map(({ row }) => row);
}
