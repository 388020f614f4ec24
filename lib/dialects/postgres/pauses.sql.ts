import { NOW } from './time';

// The pauses table (migration 010; issue 40): the outbox destinations and inbox sources an operator
// paused. Claims skip them (the workers read this table once per poll interval); rows stay as they
// are. Parameters are positional (`$1`...).

/** Every pause, `paused_at` as milliseconds since the epoch (float8). */
export const pauseListSql = (pauses: string) => `SELECT component, name, reason, paused_by,
       (extract(epoch FROM paused_at) * 1000)::float8 AS paused_at_ms
FROM ${pauses}
ORDER BY component, name`;

/**
 * $1 = component ('outbox' or 'inbox'), $2 = name, $3 = reason, $4 = who. Pauses unless paused
 * already (the first pause, its reason and actor, is kept); returns the row it inserted, or none.
 */
export const pauseInsertSql = (pauses: string) => `INSERT INTO ${pauses} (component, name, reason, paused_by, paused_at)
VALUES ($1, $2, $3, $4, ${NOW})
ON CONFLICT (component, name) DO NOTHING
RETURNING name`;

/** $1 = component, $2 = name. Resumes: deletes the pause, returning it (none when it was not paused). */
export const pauseDeleteSql = (pauses: string) => `DELETE FROM ${pauses}
WHERE component = $1 AND name = $2
RETURNING name`;
