import { HOUSEKEEPING, housekeepingTarget } from './claims.sql';
import { KEY_COLLATION } from './schema';
import { asUtc, NOW } from './time';

// The instances table (migration 006; see postgres/instances.sql.ts). Parameters are positional (`@0`...).

/**
 * @0 = id, @1 = host, @2 = pid, @3 = DataSource name, @4 = QueueBox version, @5 = dead after (ms).
 * Inserts the row, or nothing when the id is registered already: `registered` 0 then, with the
 * columns of the row that holds the id. Never takes it over (see postgres/instances.sql.ts).
 */
export const instanceRegisterSql = (instances: string) => `SET NOCOUNT ON;
DECLARE @registered INT;
INSERT INTO ${instances} ([id], [host], [pid], [data_source], [version], [dead_after_ms])
  SELECT @0, @1, @2, @3, @4, @5
  WHERE NOT EXISTS (SELECT 1 FROM ${instances} WITH (UPDLOCK, HOLDLOCK) WHERE [id] = @0);
SET @registered = @@ROWCOUNT;
SELECT @registered AS [registered], n.[host], n.[pid], ${asUtc('n.[started_at]')} AS [started_at],
       DATEDIFF_BIG(MILLISECOND, n.[heartbeat_at], ${NOW}) AS [heartbeat_age_ms]
FROM (SELECT 1 AS [one]) AS one LEFT JOIN ${instances} AS n ON n.[id] = @0 AND @registered = 0;`;

/** The tables an instance's state is read from: its row, and the rows whose leases it holds. */
export interface InstanceTables {
  instances: string;
  outbox: string;
  inbox: string;
}

/** The instance `n` missed its heartbeats for longer than its own `dead_after_ms`. */
const heartbeatPastDeadline = (n: string) => `${n}.[heartbeat_at] < DATEADD(MILLISECOND, -${n}.[dead_after_ms], ${NOW})`;

/**
 * @0 = id, @1 and @2 = the lowest and highest heartbeat count the row may hold if only this
 * process beats it. The new count, or none with `registered` (see postgres/instances.sql.ts); the
 * row is read with locks (READCOMMITTEDLOCK, also under READ_COMMITTED_SNAPSHOT), so a delete in
 * flight is waited for and seen as a delete.
 */
export const instanceHeartbeatSql = (instances: string) => `SET NOCOUNT ON;
DECLARE @beat TABLE ([beats] BIGINT);
UPDATE ${instances} SET [heartbeat_at] = ${NOW}, [beats] = [beats] + 1
  OUTPUT inserted.[beats] INTO @beat
  WHERE [id] = @0 AND [beats] BETWEEN @1 AND @2;
SELECT (SELECT CAST([beats] AS NVARCHAR(20)) FROM @beat) AS [beats],
       CASE WHEN EXISTS (SELECT 1 FROM ${instances} WITH (READCOMMITTEDLOCK) WHERE [id] = @0) THEN 1 ELSE 0 END AS [registered];`;

/** When the lease of row `t` was last set: by its claim, or by its last renewal (migration 009). */
const leaseSetAt = (t: string) => `CASE WHEN ${t}.[renewed_at] > ${t}.[claimed_at] THEN ${t}.[renewed_at] ELSE ${t}.[claimed_at] END`;

/** The lease of row `t` was not set within `ms` (an SQL integer): see postgres/instances.sql.ts. */
const notRenewedWithin = (t: string, ms: string) => `${leaseSetAt(t)} < DATEADD(MILLISECOND, -CAST(${ms} AS INT), ${NOW})`;

/** The instance `n` holds a row of `table` whose lease it set within its `dead_after_ms`: it lives. */
const renewsIn = (table: string, n: string) => `EXISTS (SELECT 1 FROM ${table} AS t
      WHERE t.[state] = N'processing' AND t.[claimed_by] = ${n}.[id] AND t.[lease_expires_at] > ${NOW}
        AND NOT (${notRenewedWithin('t', `${n}.[dead_after_ms]`)}))`;

/** The instance `n` is dead: what the sweep deletes and the views call `dead` (see postgres/instances.sql.ts). */
const dead = (n: string, t: InstanceTables) =>
  `${heartbeatPastDeadline(n)} AND NOT ${renewsIn(t.outbox, n)} AND NOT ${renewsIn(t.inbox, n)}`;

/**
 * Ends the leases of the rows the instances in `@dead` hold, and of rows left behind by an
 * instance no longer registered, never the caller's (@1), and of those only leases not set within
 * the owner's `dead_after_ms` (an unregistered owner's: @0), counting them per owner into
 * `@released` (see postgres/instances.sql.ts).
 */
const endLeases = (table: string, kind: 'outbox' | 'inbox', instances: string) => `UPDATE t SET [lease_expires_at] = ${NOW}
  OUTPUT inserted.[claimed_by], N'${kind}' INTO @released ([id], [kind])
  FROM ${table} AS t ${housekeepingTarget(table)}
  WHERE t.[state] = N'processing' AND t.[lease_expires_at] > ${NOW} AND t.[claimed_by] <> @1
    AND (t.[claimed_by] IN (SELECT [id] FROM @dead)
      OR NOT EXISTS (SELECT 1 FROM ${instances} AS n WHERE n.[id] = t.[claimed_by]))
    -- Migration 009: a lease renewed within deadAfterMs is kept, whatever its owner's heartbeat says.
    AND ${notRenewedWithin('t', `COALESCE((SELECT d.[dead_after_ms] FROM @dead AS d WHERE d.[id] = t.[claimed_by]), @0)`)};`;

/**
 * @0 = after how many ms a claim of an unregistered instance counts as left behind, @1 = the
 * caller's own id (never declared dead by itself: see postgres/instances.sql.ts). In one batch
 * and transaction: deletes every instance whose last heartbeat is older than its
 * `dead_after_ms` and that set none of its leases within that time, ends the leases of the rows
 * they hold and of rows left behind by instances no longer registered (only those not renewed
 * within that time), and returns each owner with how many outbox and inbox claims it lost (an
 * unregistered one with no host, pid, DataSource or heartbeat).
 */
export const instanceEndDeadSql = (instances: string, outbox: string, inbox: string) => `${HOUSEKEEPING}SET XACT_ABORT ON;
SET NOCOUNT ON;
BEGIN TRANSACTION;
DECLARE @dead TABLE ([id] UNIQUEIDENTIFIER PRIMARY KEY, [host] NVARCHAR(255) COLLATE ${KEY_COLLATION}, [pid] INT, [data_source] NVARCHAR(255) COLLATE ${KEY_COLLATION}, [heartbeat_at] DATETIME2, [dead_after_ms] INT);
DECLARE @released TABLE ([id] UNIQUEIDENTIFIER, [kind] NVARCHAR(8) COLLATE ${KEY_COLLATION});
DELETE n
  OUTPUT deleted.[id], deleted.[host], deleted.[pid], deleted.[data_source], deleted.[heartbeat_at], deleted.[dead_after_ms] INTO @dead
  FROM ${instances} AS n WITH (READPAST)
  WHERE ${dead('n', { instances, outbox, inbox })} AND n.[id] <> @1;
${endLeases(outbox, 'outbox', instances)}
${endLeases(inbox, 'inbox', instances)}
COMMIT TRANSACTION;
SELECT w.[id], d.[host], d.[pid], d.[data_source], ${asUtc('d.[heartbeat_at]')} AS [heartbeat_at],
       (SELECT COUNT(*) FROM @released AS r WHERE r.[id] = w.[id] AND r.[kind] = N'outbox') AS [outbox],
       (SELECT COUNT(*) FROM @released AS r WHERE r.[id] = w.[id] AND r.[kind] = N'inbox') AS [inbox]
FROM (SELECT [id] FROM @dead UNION SELECT [id] FROM @released) AS w
LEFT JOIN @dead AS d ON d.[id] = w.[id];`;

/** The rows instance @0 holds (live lease) back to `pending`, the attempt not counted (see `leaseReleaseSql`), counted into `@released`. */
const releaseHeld = (
  table: string,
  kind: 'outbox' | 'inbox',
) => `UPDATE t SET [state] = N'pending', [attempts] = t.[attempts] - 1, [claim_token] = NULL, [lease_expires_at] = NULL
  OUTPUT inserted.[claimed_by], N'${kind}' INTO @released ([id], [kind])
  FROM ${table} AS t ${housekeepingTarget(table)}
  WHERE t.[state] = N'processing' AND t.[lease_expires_at] > ${NOW} AND t.[claimed_by] = @0;`;

/**
 * @0 = id. A clean shutdown: the instance's row goes, and what it still holds is released,
 * `pending` again with the attempt not counted (see postgres/instances.sql.ts).
 */
export const instanceDeregisterSql = (instances: string, outbox: string, inbox: string) => `${HOUSEKEEPING}SET XACT_ABORT ON;
SET NOCOUNT ON;
BEGIN TRANSACTION;
DECLARE @released TABLE ([id] UNIQUEIDENTIFIER, [kind] NVARCHAR(8) COLLATE ${KEY_COLLATION});
DELETE FROM ${instances} WHERE [id] = @0;
${releaseHeld(outbox, 'outbox')}
${releaseHeld(inbox, 'inbox')}
COMMIT TRANSACTION;
SELECT (SELECT COUNT(*) FROM @released WHERE [kind] = N'outbox') AS [outbox], (SELECT COUNT(*) FROM @released WHERE [kind] = N'inbox') AS [inbox];`;

/**
 * The state of the instance `n` by the database clock: `dead` exactly when the sweep would delete
 * it (`dead` above; an instance past its deadline that still renews is `silent`), `silent` once its last heartbeat is older than two thirds of its
 * `dead_after_ms` (see postgres/instances.sql.ts; INT arithmetic, `dead_after_ms` is at most a day).
 */
export const instanceState = (n: string, t: InstanceTables) => `CASE WHEN ${dead(n, t)} THEN N'dead'
            WHEN ${n}.[heartbeat_at] < DATEADD(MILLISECOND, -(${n}.[dead_after_ms] * 2 / 3), ${NOW}) THEN N'silent'
            ELSE N'alive' END`;

/** Every registered instance, oldest first, with its heartbeat's age, its state, and the claims it holds. */
export const instanceListSql = (
  instances: string,
  outbox: string,
  inbox: string,
) => `SELECT n.[id], n.[host], n.[pid], n.[data_source], n.[version], n.[dead_after_ms],
       ${asUtc('n.[started_at]')} AS [started_at], ${asUtc('n.[heartbeat_at]')} AS [heartbeat_at],
       DATEDIFF_BIG(MILLISECOND, n.[heartbeat_at], ${NOW}) / 1000.0 AS [heartbeat_age],
       ${instanceState('n', { instances, outbox, inbox })} AS [state],
       (SELECT COUNT(*) FROM ${outbox} AS o WHERE o.[state] = N'processing' AND o.[claimed_by] = n.[id]) AS [outbox_claims],
       (SELECT COUNT(*) FROM ${inbox} AS i WHERE i.[state] = N'processing' AND i.[claimed_by] = n.[id]) AS [inbox_claims]
FROM ${instances} AS n
ORDER BY n.[started_at], n.[id]`;

/** The row `alias` is held: claimed, with a lease not yet expired by the database clock. */
export const held = (alias: string) => `(${alias}.[state] = N'processing' AND ${alias}.[lease_expires_at] > ${NOW})`;

/**
 * Who holds the row `alias`: `owner` while it is held, `owner_state` (`dead` once it left the
 * table), and `last_claimed_by`, held or not. See postgres/instances.sql.ts.
 */
export const ownerColumns = (alias: string, t: InstanceTables) => `CASE WHEN ${held(alias)} THEN ${alias}.[claimed_by] END AS [owner],
       CASE WHEN ${held(alias)} AND ${alias}.[claimed_by] IS NOT NULL
            THEN COALESCE((SELECT ${instanceState('n', t)} FROM ${t.instances} AS n WHERE n.[id] = ${alias}.[claimed_by]), N'dead') END AS [owner_state],
       ${alias}.[claimed_by] AS [last_claimed_by]`;
