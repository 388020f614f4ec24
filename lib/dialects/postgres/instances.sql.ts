import { msAgo, NOW } from './time';

// The instances table (migration 006): each QueueBox process registers itself and heartbeats by the
// database clock; a live replica ends the leases of one whose heartbeats stopped. Parameters are
// positional (`$1`...).

/**
 * $1 = id, $2 = host, $3 = pid, $4 = DataSource name, $5 = QueueBox version, $6 = dead after (ms):
 * how long this instance may miss its heartbeats before a replica ends its leases. A second
 * registration of the id only heartbeats.
 */
export const instanceRegisterSql = (instances: string) => `INSERT INTO ${instances} (id, host, pid, data_source, version, dead_after_ms)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (id) DO UPDATE SET heartbeat_at = ${NOW}`;

/** The instance `n` missed its heartbeats for longer than its own `dead_after_ms`. */
export const silent = (n: string) => `${n}.heartbeat_at < ${NOW} - make_interval(secs => ${n}.dead_after_ms / 1000.0)`;

/** $1 = id. No row: the instance was declared dead meanwhile (it paused past `deadAfterMs`). */
export const instanceHeartbeatSql = (instances: string) => `UPDATE ${instances} SET heartbeat_at = ${NOW} WHERE id = $1`;

/** The leases of the rows `owners` (an SQL set of instance ids) hold end now: the reclaim and the claims take them at once. */
const endLeases = (table: string, owners: string, alsoWhere = '') => `UPDATE ${table} t SET lease_expires_at = ${NOW}
  WHERE t.state = 'processing' AND t.lease_expires_at > ${NOW} AND (t.claimed_by IN (${owners})${alsoWhere})
  RETURNING t.claimed_by`;

/**
 * A row claimed by an instance that is not registered, longer ago than $1 ms: its claimer was
 * declared dead, claimed in the moment before its next heartbeat registered it again, and then
 * died for good (a live one registers again within a heartbeat). Sees the instances table as the
 * statement found it, so the dead ones deleted beside it count as registered here.
 */
const unregisteredOwner = (instances: string) => `
    OR (t.claimed_by IS NOT NULL AND t.claimed_at < ${msAgo('$1')}
        AND NOT EXISTS (SELECT 1 FROM ${instances} n WHERE n.id = t.claimed_by))`;

/**
 * $1 = after how many ms a claim of an unregistered instance counts as left behind (the caller's
 * `deadAfterMs`). In one statement: deletes every instance whose last heartbeat is older than its
 * own `dead_after_ms`, and ends the leases (`lease_expires_at` = now) of the rows they hold and
 * of rows left behind by an instance that is no longer registered, as if they had expired.
 * Returns each owner with how many outbox and inbox claims it lost; an unregistered one has no
 * host, pid, DataSource or heartbeat. Two replicas running it at once: the second waits for the
 * first's delete and finds nothing.
 */
export const instanceEndDeadSql = (instances: string, outbox: string, inbox: string) => `WITH dead AS (
  DELETE FROM ${instances} n WHERE ${silent('n')}
  RETURNING id, host, pid, data_source, heartbeat_at
), o AS (
  ${endLeases(outbox, 'SELECT id FROM dead', unregisteredOwner(instances))}
), i AS (
  ${endLeases(inbox, 'SELECT id FROM dead', unregisteredOwner(instances))}
)
SELECT w.id, d.host, d.pid, d.data_source, d.heartbeat_at,
       (SELECT count(*) FROM o WHERE o.claimed_by = w.id)::int AS outbox,
       (SELECT count(*) FROM i WHERE i.claimed_by = w.id)::int AS inbox
FROM (SELECT id FROM dead UNION SELECT claimed_by FROM o UNION SELECT claimed_by FROM i) w
LEFT JOIN dead d ON d.id = w.id`;

/** $1 = id. A clean shutdown: the instance's row goes, and the leases of what it still holds end now. */
export const instanceDeregisterSql = (instances: string, outbox: string, inbox: string) => `WITH gone AS (
  DELETE FROM ${instances} WHERE id = $1
), o AS (
  ${endLeases(outbox, '$1::uuid')}
), i AS (
  ${endLeases(inbox, '$1::uuid')}
)
SELECT (SELECT count(*) FROM o)::int AS outbox, (SELECT count(*) FROM i)::int AS inbox`;

/**
 * The state of the instance `n` by the database clock (InstanceState in dialect-rows.ts): `dead`
 * exactly when the sweep would delete it (`silent` above), `silent` once its last heartbeat is
 * older than two thirds of its `dead_after_ms`: two heartbeats at the longest interval allowed
 * (the options refuse a `deadAfterMs` shorter than three heartbeats, MIN_BEATS_BEFORE_DEAD), as the
 * row does not record the instance's own interval. Read-only views only: the sweep keeps `silent`.
 */
export const instanceState = (n: string) => `CASE WHEN ${silent(n)} THEN 'dead'
            WHEN ${n}.heartbeat_at < ${NOW} - make_interval(secs => ${n}.dead_after_ms * 2 / 3000.0) THEN 'silent'
            ELSE 'alive' END`;

/** Every registered instance, oldest first, with its heartbeat's age, its state, and the claims it holds. */
export const instanceListSql = (
  instances: string,
  outbox: string,
  inbox: string,
) => `SELECT n.id, n.host, n.pid, n.data_source, n.version, n.dead_after_ms,
       n.started_at, n.heartbeat_at,
       extract(epoch FROM ${NOW} - n.heartbeat_at)::double precision AS heartbeat_age,
       ${instanceState('n')} AS state,
       (SELECT count(*) FROM ${outbox} o WHERE o.state = 'processing' AND o.claimed_by = n.id)::int AS outbox_claims,
       (SELECT count(*) FROM ${inbox} i WHERE i.state = 'processing' AND i.claimed_by = n.id)::int AS inbox_claims
FROM ${instances} n
ORDER BY n.started_at, n.id`;

/** The row `alias` is held: claimed, with a lease not yet expired by the database clock. */
export const held = (alias: string) => `(${alias}.state = 'processing' AND ${alias}.lease_expires_at > ${NOW})`;

/**
 * Who holds the row `alias` (RowOwner in dialect-rows.ts): `owner`, the claiming instance while
 * the row is held (null for a pending row, an expired lease, or a claim by a script or the CLI),
 * `owner_state`, that instance's state (`dead` once it left the table), and `last_claimed_by`,
 * whoever claimed it last, held or not: a failing head waiting for its retry names the instance
 * of its last attempt there, never as its owner.
 */
export const ownerColumns = (alias: string, instances: string) => `CASE WHEN ${held(alias)} THEN ${alias}.claimed_by END AS owner,
       CASE WHEN ${held(alias)} AND ${alias}.claimed_by IS NOT NULL
            THEN coalesce((SELECT ${instanceState('n')} FROM ${instances} n WHERE n.id = ${alias}.claimed_by), 'dead') END AS owner_state,
       ${alias}.claimed_by AS last_claimed_by`;
