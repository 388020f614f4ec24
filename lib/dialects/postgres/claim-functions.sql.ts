import { tableBeside } from '../../common/identifiers';
import type { QueueBoxTables } from '../dialect';
import {
  claimLockNames,
  inboxKeyedUnfinishedSql,
  inboxPullClaimSql,
  inboxPullKeyedClaimSql,
  inboxPullKeyedSearchSql,
  inboxPullUnkeyedClaimSql,
  inboxRelayClaimSql,
  inboxRelayKeyedClaimSql,
  inboxRelayKeyedSearchSql,
  inboxRelayUnkeyedClaimSql,
  outboxClaimSql,
  outboxKeyedClaimSql,
  outboxKeyedSearchSql,
  outboxKeyedUnfinishedSql,
  outboxUnkeyedClaimSql,
} from './claims.sql';
import { pgLiteral, pgTable, substituteParams } from './quoting';

// Migration 003's PL/pgSQL claim functions, and how the dialect calls them.

/** The PL/pgSQL claim functions of migration 003, one per claim of a table set (names quoted). */
export interface ClaimFunctions {
  outbox: string;
  relay: string;
  pull: string;
}

/** The claim functions of migration 003, quoted, in the schema of their table. */
export function claimFunctionNames(tables: QueueBoxTables): ClaimFunctions {
  const fn = (table: QueueBoxTables['outbox'], suffix: string) => pgTable(tableBeside(table, `${table.name}_${suffix}`));
  return { outbox: fn(tables.outbox, 'claim'), relay: fn(tables.inbox, 'relay_claim'), pull: fn(tables.inbox, 'pull_claim') };
}

/**
 * Each claim function's parameters, in the order of the claim statement's `$1`, `$2`, `$3`: the
 * one place their names and types are written (declaration, body, lookup, DROP).
 */
const CLAIM_FUNCTION_PARAMS: Record<keyof ClaimFunctions, readonly (readonly [name: string, type: string])[]> = {
  outbox: [
    ['p_limit', 'integer'],
    ['p_lease_ms', 'bigint'],
    ['p_instance', 'uuid'],
  ],
  relay: [
    ['p_limit', 'integer'],
    ['p_lease_ms', 'bigint'],
    ['p_sources', 'text[]'],
    ['p_instance', 'uuid'],
  ],
  pull: [
    ['p_limit', 'integer'],
    ['p_lease_ms', 'bigint'],
    ['p_source', 'text'],
    ['p_instance', 'uuid'],
  ],
};

/**
 * The signatures migration 003 of earlier versions created, before claims recorded their instance
 * (`p_instance`): migration 006 drops them.
 */
export const legacyClaimFunctionSignature = (kind: keyof ClaimFunctions, fn: string) =>
  `${fn}(${CLAIM_FUNCTION_PARAMS[kind]
    .filter(([name]) => name !== 'p_instance')
    .map(([, type]) => type)
    .join(', ')})`;

/** A claim function's signature as `to_regprocedure` and `DROP FUNCTION` take it: `name(integer, bigint, uuid)`. */
export const claimFunctionSignature = (kind: keyof ClaimFunctions, fn: string) =>
  `${fn}(${CLAIM_FUNCTION_PARAMS[kind].map(([, type]) => type).join(', ')})`;

/**
 * A claim as a PL/pgSQL function: the claim lock, then `claim` (its `$n` become the parameters),
 * as the one-query-string claim does (serializedClaimSql), with the same snapshots: in a VOLATILE
 * function each statement takes a snapshot of its own when it starts, so the claim sees every
 * claim committed before the lock was granted. What it adds: PL/pgSQL keeps the claim's plan for
 * the session, where a query string is planned on every call (the claim takes 0.45 ms to plan,
 * 0.14 ms to run, on one row). `lockName` is an SQL expression of the lock's name; the function
 * returns the claimed rows whole. `body` is the text PostgreSQL keeps as the function's source
 * (`pg_proc.prosrc`): the dialect compares it to tell a function of an older version.
 *
 * With `unkeyed` (migration 012, issue 36), the function first asks whether any row with a key
 * (an aggregate) is unfinished; while none is, the claim can only take rows without one, whose
 * order nothing asks for, and it runs `unkeyed.claim` without the lock: claims of several
 * connections and replicas then run side by side instead of one at a time. The question and the
 * claim need not agree: a keyed row committed between them is not the unkeyed claim's to take.
 *
 * With `locked.search` (migration 013, issue 36), a keyed claim no longer takes the claim lock
 * alone: it takes it shared, so keyed claims run side by side, and `locked.search` tries the key
 * lock of each head as it finds it (tryKeyLockSql), without waiting: a key another claim holds is
 * passed over. `locked.claim` then claims the rows found, in a snapshot taken after their key
 * locks were granted, so it sees every claim of those keys that committed before. A claim of more
 * than KEY_LOCKS_PER_CLAIM rows takes the claim lock alone and searches without key locks. A
 * claim that takes the lock exclusively (that one, the query-string claim, or a process of an
 * earlier version) waits for every keyed claim and makes them wait: all can run during an upgrade.
 */
export interface ClaimFunction {
  /** `name(integer, bigint)`, as `to_regprocedure` and `DROP FUNCTION` take it. */
  signature: string;
  body: string;
  /** The CREATE OR REPLACE FUNCTION statement. */
  create: string;
}

/** The lock-free branch of a claim function: whether a keyed row is unfinished, and the claim of unkeyed rows. */
interface UnkeyedBranch {
  keyedUnfinished: string;
  claim: string;
}

/**
 * A claim function's claim of keyed rows: behind the claim lock taken alone (`claim` only), or
 * with key locks: the search that locks the keys of the heads it finds (`search.keyLocks`, ids),
 * the same search without key locks for a claim above KEY_LOCKS_PER_CLAIM, behind the claim lock
 * taken alone (`search.alone`), and the claim of `KEYED_CANDIDATES` (`claim`).
 */
interface LockedClaim {
  claim: string;
  search?: { keyLocks: string; alone: string };
}

/**
 * The most key locks a claim takes. Each is an entry of PostgreSQL's shared lock table
 * (`max_locks_per_transaction` × `max_connections`, 6,400 entries by default, shared with every
 * lock of every session), held until the claim commits: two claims of 10,000 keys filled it, and
 * every session of the database then failed to take a lock ("out of shared memory"). A claim of a
 * bigger limit takes the claim lock alone, as before migration 013, and no key locks; claims that
 * big are few and long, so running them one at a time costs little (bench/claims.mjs, 5,000 keys,
 * batch 500: key locks drained at 0.95x to 1.11x the rate of the lock alone).
 */
export const KEY_LOCKS_PER_CLAIM = 100;

/**
 * A keyed claim's function keeps one plan per statement (`force_generic_plan`, for its calls only).
 * PostgreSQL otherwise plans its search anew on every call, since no generic plan can know the
 * size of its window (GREATEST(500, 4 × limit)): 0.45 ms a claim, a quarter of a claim of 50 rows
 * (measured: 2.5 against 2.0 ms; the same claim with one plan, 2.0).
 */
const GENERIC_PLANS = 'SET plan_cache_mode = force_generic_plan';

/**
 * What migration 014 sets on the three claim functions: no plan of theirs reads the table whole.
 * PL/pgSQL keeps each statement's plan for the session, made with the statistics of its first
 * call, and only an ANALYZE or a VACUUM of the table makes it plan again. A session that first
 * claimed from an empty or never-analyzed table (a new installation; a server with autovacuum off,
 * or before its first analyze) kept sequential scans for every later claim, however the table
 * grew: with 70,000 rows, 35 ms a claim of rows without a key and 198 ms a keyed one, against 0.3
 * and 1.9 ms with this setting; in a W3 run (autovacuum off) a claim's run time grew from 0.24 to
 * 0.78 ms over 6,000 messages. Each statement of a claim has an index that serves it (the claim
 * indexes, the key index, the primary key), so the setting only takes away the plans that read
 * every row. A function's settings apply to its own calls only.
 */
const CLAIM_PLAN_SETTING = 'enable_seqscan';

/**
 * Migration 014's statements: `ALTER FUNCTION ... SET enable_seqscan = off` on each claim function
 * (`down`: RESET). ALTER FUNCTION rewrites the function's catalog row only; sessions compile the
 * function again at their next call, so running workers take the setting without a restart.
 */
export function claimFunctionPlanSettingsSql(tables: QueueBoxTables, direction: 'up' | 'down'): string[] {
  const fn = claimFunctionNames(tables);
  const change = direction === 'up' ? `SET ${CLAIM_PLAN_SETTING} = off` : `RESET ${CLAIM_PLAN_SETTING}`;
  return (Object.keys(CLAIM_FUNCTION_PARAMS) as (keyof ClaimFunctions)[]).map(
    (kind) => `ALTER FUNCTION ${claimFunctionSignature(kind, fn[kind])} ${change}`,
  );
}

/** The variable of a keyed claim's function that carries its search's ids to its claim. */
const KEYED_CANDIDATES = 'candidate_ids';

/**
 * Which version of the claim functions: `serialized` (every claim behind the claim lock, as
 * migrations 003 to 007 wrote them), `unkeyedWithoutLock` (migration 012) or `keyLocks` (013, this
 * version's: migrations 006, 007, 012 and 013 write it).
 */
export type ClaimFunctionsVersion = 'serialized' | 'unkeyedWithoutLock' | 'keyLocks';

interface ClaimFunctionParts {
  lockName: string;
  locked: LockedClaim;
  unkeyed?: UnkeyedBranch;
}

function claimFunction(kind: keyof ClaimFunctions, fn: string, table: string, parts: ClaimFunctionParts): ClaimFunction {
  const params = CLAIM_FUNCTION_PARAMS[kind];
  const withParams = (statement: string) => substituteParams(statement, params, ([name]) => name, 'parameter');
  const { lockName, locked, unkeyed } = parts;
  const { search } = locked;
  const lockFree = unkeyed
    ? `
  IF NOT ${withParams(unkeyed.keyedUnfinished)} THEN
    RETURN QUERY ${withParams(unkeyed.claim)};
    RETURN;
  END IF;`
    : '';
  const body =
    search !== undefined
      ? `
DECLARE
  ${KEYED_CANDIDATES} bigint[];
BEGIN${lockFree}
  IF ${withParams('$1')} > ${KEY_LOCKS_PER_CLAIM} THEN
    PERFORM pg_advisory_xact_lock(hashtextextended(${lockName}, 0));
    ${KEYED_CANDIDATES} := ARRAY(${withParams(search.alone)});
  ELSE
    PERFORM pg_advisory_xact_lock_shared(hashtextextended(${lockName}, 0));
    ${KEYED_CANDIDATES} := ARRAY(${withParams(search.keyLocks)});
  END IF;
  RETURN QUERY ${withParams(locked.claim)};
END
`
      : `
BEGIN${lockFree}
  PERFORM pg_advisory_xact_lock(hashtextextended(${lockName}, 0));
  RETURN QUERY ${withParams(locked.claim)};
END
`;
  return {
    signature: claimFunctionSignature(kind, fn),
    body,
    create: `CREATE OR REPLACE FUNCTION ${fn}(${params.map(([name, type]) => `${name} ${type}`).join(', ')}) RETURNS SETOF ${table}
LANGUAGE plpgsql VOLATILE${search !== undefined ? ` ${GENERIC_PLANS}` : ''} AS $queuebox$${body}$queuebox$`,
  };
}

/**
 * The three claim functions of `tables` in `version` (this version's, `keyLocks`, unless told): the
 * claim statements of claims.sql.ts behind their locks. Migration 012's down writes back
 * `serialized`, 013's down `unkeyedWithoutLock`.
 */
export function claimFunctions(
  tables: QueueBoxTables,
  { version = 'keyLocks' }: { version?: ClaimFunctionsVersion } = {},
): Record<keyof ClaimFunctions, ClaimFunction> {
  const fn = claimFunctionNames(tables);
  const lock = claimLockNames(tables);
  const outbox = pgTable(tables.outbox);
  const inbox = pgTable(tables.inbox);
  const unkeyed = (branch: UnkeyedBranch) => (version === 'serialized' ? undefined : branch);
  // Only the version's own statements are built: the claim behind the lock alone, or the keyed pair.
  const locked = (alone: () => string, keyed: () => Required<LockedClaim>): LockedClaim =>
    version === 'keyLocks' ? keyed() : { claim: alone() };
  const outboxLock = pgLiteral(lock.outbox);
  const relayLock = pgLiteral(lock.inbox);
  const pullLock = `${pgLiteral(lock.pullPrefix)} || p_source`;
  return {
    outbox: claimFunction('outbox', fn.outbox, outbox, {
      lockName: outboxLock,
      locked: locked(
        () => outboxClaimSql(outbox, 'RETURNING o.*'),
        () => ({
          search: { keyLocks: outboxKeyedSearchSql(outbox, outboxLock), alone: outboxKeyedSearchSql(outbox) },
          claim: outboxKeyedClaimSql(outbox, KEYED_CANDIDATES, 'RETURNING o.*'),
        }),
      ),
      unkeyed: unkeyed({ keyedUnfinished: outboxKeyedUnfinishedSql(outbox), claim: outboxUnkeyedClaimSql(outbox, 'RETURNING o.*') }),
    }),
    relay: claimFunction('relay', fn.relay, inbox, {
      lockName: relayLock,
      locked: locked(
        () => inboxRelayClaimSql(inbox, 'RETURNING i.*'),
        () => ({
          search: { keyLocks: inboxRelayKeyedSearchSql(inbox, relayLock), alone: inboxRelayKeyedSearchSql(inbox) },
          claim: inboxRelayKeyedClaimSql(inbox, KEYED_CANDIDATES, 'RETURNING i.*'),
        }),
      ),
      unkeyed: unkeyed({
        keyedUnfinished: inboxKeyedUnfinishedSql(inbox, '$3::text[]'),
        claim: inboxRelayUnkeyedClaimSql(inbox, 'RETURNING i.*'),
      }),
    }),
    pull: claimFunction('pull', fn.pull, inbox, {
      lockName: pullLock,
      locked: locked(
        () => inboxPullClaimSql(inbox, 'RETURNING i.*'),
        () => ({
          search: { keyLocks: inboxPullKeyedSearchSql(inbox, pullLock), alone: inboxPullKeyedSearchSql(inbox) },
          claim: inboxPullKeyedClaimSql(inbox, KEYED_CANDIDATES, 'RETURNING i.*'),
        }),
      ),
      unkeyed: unkeyed({
        keyedUnfinished: inboxKeyedUnfinishedSql(inbox, 'ARRAY[$3::text]'),
        claim: inboxPullUnkeyedClaimSql(inbox, 'RETURNING i.*'),
      }),
    }),
  };
}

/** The CREATE OR REPLACE FUNCTION statements of the three claim functions (`claimFunctions`), as a migration runs them. */
export function createClaimFunctionsSql(tables: QueueBoxTables, options?: { version?: ClaimFunctionsVersion }): string[] {
  const functions = claimFunctions(tables, options);
  return [functions.outbox.create, functions.relay.create, functions.pull.create];
}

/**
 * A call of a claim function ($1 = limit, $2 = lease in ms, then the sources or source, then the claiming instance): of the rows
 * it claimed, the `columns` the worker reads (OUTBOX_CLAIM_COLUMNS, INBOX_CLAIM_COLUMNS), as the
 * claim statement returns them; the whole row would cost the client three more timestamps to parse.
 */
export const claimFunctionCallSql = (kind: keyof ClaimFunctions, fn: string, columns: string) =>
  `SELECT ${columns} FROM ${fn}(${CLAIM_FUNCTION_PARAMS[kind].map((_param, i) => `$${i + 1}`).join(', ')})`;
