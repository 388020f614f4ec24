import { NOW } from './time';

// The instances table (migration 006): each QueueBox process registers itself and heartbeats by the
// database clock; a live replica ends the leases of one whose heartbeats stopped. Parameters are
// positional (`$1`...).

/**
 * $1 = id, $2 = host, $3 = pid, $4 = DataSource name, $5 = QueueBox version, $6 = dead after (ms):
 * how long this instance may miss its heartbeats before a replica ends its leases. Inserts the
 * row, or nothing when the id is registered already: `registered` 0 then, and the columns of the
 * row that holds the id (the main query sees the table as it was before the insert). Never takes
 * the row over: two processes with one id would beat one row, and the clean shutdown of one would
 * end the other's leases.
 */
export const instanceRegisterSql = (instances: string) => `WITH inserted AS (
  INSERT INTO ${instances} (id, host, pid, data_source, version, dead_after_ms)
  VALUES ($1, $2, $3, $4, $5, $6)
  ON CONFLICT (id) DO NOTHING
  RETURNING id
)
SELECT (SELECT count(*) FROM inserted)::int AS registered, n.host, n.pid, n.started_at,
       (extract(epoch FROM ${NOW} - n.heartbeat_at) * 1000)::bigint::text AS heartbeat_age_ms
FROM (SELECT 1) one LEFT JOIN ${instances} n ON n.id = $1`;

/** The tables an instance's state is read from: its row, and the rows whose leases it holds. */
export interface InstanceTables {
  instances: string;
  outbox: string;
  inbox: string;
}

/** The instance `n` missed its heartbeats for longer than its own `dead_after_ms`. */
const heartbeatPastDeadline = (n: string) => `${n}.heartbeat_at < ${NOW} - make_interval(secs => ${n}.dead_after_ms / 1000.0)`;

/**
 * $1 = id, $2 and $3 = the lowest and highest heartbeat count the row may hold if only this
 * process beats it (more than one when a heartbeat failed with no answer: it may have committed).
 * Returns the new count, or none with `registered`: true when the row counts beats this process
 * did not make (another live process beats with this id), false when it is gone (another replica
 * declared this instance dead). The row is read locking (`FOR SHARE`): a delete that commits
 * while the update waited for it is seen as a delete, not as the row of another process.
 */
export const instanceHeartbeatSql = (instances: string) => `WITH beat AS (
  UPDATE ${instances} SET heartbeat_at = ${NOW}, beats = beats + 1
  WHERE id = $1 AND beats BETWEEN $2::bigint AND $3::bigint
  RETURNING beats
)
SELECT (SELECT beats::text FROM beat) AS beats, EXISTS (SELECT 1 FROM ${instances} WHERE id = $1 FOR SHARE) AS registered`;

/** When the lease of row `t` was last set: by its claim, or by its last renewal (migration 009). */
const leaseSetAt = (t: string) => `GREATEST(${t}.claimed_at, ${t}.renewed_at)`;

/**
 * The lease of row `t` was not set (claimed or renewed) within `ms` (an SQL number): its owner did
 * not keep it, whatever its heartbeat looked like (a forward step of the database clock, a write
 * that made a live instance's heartbeat look old).
 */
const notRenewedWithin = (t: string, ms: string) => `${leaseSetAt(t)} < ${NOW} - make_interval(secs => ${ms} / 1000.0)`;

/** The instance `n` holds a row of `table` whose lease it set within its `dead_after_ms`: it lives (I13), whatever its heartbeat says. */
const renewsIn = (table: string, n: string) => `EXISTS (SELECT 1 FROM ${table} t
      WHERE t.state = 'processing' AND t.claimed_by = ${n}.id AND t.lease_expires_at > ${NOW}
        AND NOT (${notRenewedWithin('t', `${n}.dead_after_ms`)}))`;

/**
 * The instance `n` is dead: its heartbeat is older than its own `dead_after_ms`, and it set none
 * of its leases within that time either (an instance that renews lives). What the sweep deletes,
 * and what the admin views call `dead`: one rule.
 */
const dead = (n: string, t: InstanceTables) =>
  `${heartbeatPastDeadline(n)} AND NOT ${renewsIn(t.outbox, n)} AND NOT ${renewsIn(t.inbox, n)}`;

/**
 * The leases this sweep ends: rows held by an instance of `dead`, or by one no longer registered
 * (its claimer was declared dead, claimed in the moment before its next heartbeat registered it
 * again, and then died for good: a live one registers again within a heartbeat), never by the
 * caller ($2); and of those only leases not set within the owner's `dead_after_ms` (an
 * unregistered owner's: $1). The instances table is seen as the statement found it, so the dead
 * ones deleted beside it count as registered here. A renewal that commits while the statement
 * runs is seen when the row is updated: that lease is kept.
 */
const endLeases = (table: string, instances: string) => `UPDATE ${table} t SET lease_expires_at = ${NOW}
  WHERE t.state = 'processing' AND t.lease_expires_at > ${NOW} AND t.claimed_by <> $2::uuid
    AND (t.claimed_by IN (SELECT id FROM dead) OR NOT EXISTS (SELECT 1 FROM ${instances} n WHERE n.id = t.claimed_by))
    AND ${notRenewedWithin('t', `coalesce((SELECT d.dead_after_ms FROM dead d WHERE d.id = t.claimed_by), $1)`)}
  RETURNING t.claimed_by`;

/**
 * $1 = after how many ms a claim of an unregistered instance counts as left behind (the caller's
 * `deadAfterMs`), $2 = the caller's own id: an instance never declares itself dead (its heartbeat
 * runs apart from its sweep and may be late behind a lock, never absent). In one statement:
 * deletes every instance whose last heartbeat is older than its own `dead_after_ms` and that set
 * none of its leases within that time either (an instance that renews lives), and ends the leases
 * (`lease_expires_at` = now) of the rows they hold and of rows left behind by an instance that is
 * no longer registered, as if they had expired (see `endLeases`). Returns each owner with how many
 * outbox and inbox claims it lost; an unregistered one has no host, pid, DataSource or heartbeat.
 * Two replicas running it at once: the second waits for the first's delete and finds nothing.
 */
export const instanceEndDeadSql = (instances: string, outbox: string, inbox: string) => `WITH dead AS (
  DELETE FROM ${instances} n
  WHERE ${dead('n', { instances, outbox, inbox })} AND n.id <> $2::uuid
  RETURNING id, host, pid, data_source, heartbeat_at, dead_after_ms
), o AS (
  ${endLeases(outbox, instances)}
), i AS (
  ${endLeases(inbox, instances)}
)
SELECT w.id, d.host, d.pid, d.data_source, d.heartbeat_at,
       (SELECT count(*) FROM o WHERE o.claimed_by = w.id)::int AS outbox,
       (SELECT count(*) FROM i WHERE i.claimed_by = w.id)::int AS inbox
FROM (SELECT id FROM dead UNION SELECT claimed_by FROM o UNION SELECT claimed_by FROM i) w
LEFT JOIN dead d ON d.id = w.id`;

/** The rows instance $1 holds (live lease) back to `pending`, the attempt not counted (see `leaseReleaseSql`). */
const releaseHeld = (table: string) => `UPDATE ${table} t
  SET state = 'pending', attempts = t.attempts - 1, claim_token = NULL, lease_expires_at = NULL
  WHERE t.state = 'processing' AND t.lease_expires_at > ${NOW} AND t.claimed_by = $1::uuid
  RETURNING t.id`;

/**
 * $1 = id. A clean shutdown: the instance's row goes, and what it still holds (work abandoned
 * after `shutdownTimeoutMs`) is released: `pending` again at once, the attempt not counted (as a
 * claim given back unstarted), for another replica to claim at its next poll. A row whose lease
 * expired already is the reclaim step's (an expiry counts the attempt).
 */
export const instanceDeregisterSql = (instances: string, outbox: string, inbox: string) => `WITH gone AS (
  DELETE FROM ${instances} WHERE id = $1
), o AS (
  ${releaseHeld(outbox)}
), i AS (
  ${releaseHeld(inbox)}
)
SELECT (SELECT count(*) FROM o)::int AS outbox, (SELECT count(*) FROM i)::int AS inbox`;

/**
 * The state of the instance `n` by the database clock (InstanceState in dialect-rows.ts): `dead`
 * exactly when the sweep would delete it (`dead` above), `silent` once its last heartbeat is older
 * than two thirds of its `dead_after_ms` (two heartbeats at the longest interval allowed: the
 * options refuse a `deadAfterMs` shorter than three heartbeats, MIN_BEATS_BEFORE_DEAD; the row does
 * not record the instance's own interval), which includes an instance past its deadline that still
 * renews its leases. Read-only views only.
 */
export const instanceState = (n: string, t: InstanceTables) => `CASE WHEN ${dead(n, t)} THEN 'dead'
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
       ${instanceState('n', { instances, outbox, inbox })} AS state,
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
export const ownerColumns = (alias: string, t: InstanceTables) => `CASE WHEN ${held(alias)} THEN ${alias}.claimed_by END AS owner,
       CASE WHEN ${held(alias)} AND ${alias}.claimed_by IS NOT NULL
            THEN coalesce((SELECT ${instanceState('n', t)} FROM ${t.instances} n WHERE n.id = ${alias}.claimed_by), 'dead') END AS owner_state,
       ${alias}.claimed_by AS last_claimed_by`;
