import { NOW } from './time';

// The pauses table (migration 010; see postgres/pauses.sql.ts). Parameters are positional (`@0`...).

/** Every pause, `paused_at` as milliseconds since the epoch (the column holds UTC). */
export const pauseListSql = (pauses: string) => `SELECT [component], [name], [reason], [paused_by],
       DATEDIFF_BIG(MILLISECOND, '19700101', [paused_at]) AS [paused_at_ms]
FROM ${pauses}
ORDER BY [component], [name]`;

/**
 * @0 = component, @1 = name, @2 = reason, @3 = who. Pauses unless paused already (the first pause
 * is kept: UPDLOCK and HOLDLOCK make two concurrent pauses of one name insert once); returns the
 * row it inserted, or none.
 */
export const pauseInsertSql = (pauses: string) => `INSERT INTO ${pauses} ([component], [name], [reason], [paused_by], [paused_at])
OUTPUT inserted.[name]
SELECT @0, @1, @2, @3, ${NOW}
WHERE NOT EXISTS (SELECT 1 FROM ${pauses} WITH (UPDLOCK, HOLDLOCK) WHERE [component] = @0 AND [name] = @1)`;

/** @0 = component, @1 = name. Resumes: deletes the pause, returning it (none when it was not paused). */
export const pauseDeleteSql = (pauses: string) => `DELETE FROM ${pauses}
OUTPUT deleted.[name]
WHERE [component] = @0 AND [name] = @1`;
