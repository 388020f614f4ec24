import type { DataSource, EntityManager } from 'typeorm';
import { runSql } from '../../common/sql-runner';
import { QueueBoxConfigError } from '../../errors/queuebox.errors';
import { messages } from '../../queuebox.messages';
import type { Dialect, FenceParams, LeaseTable, OutboxClaimedRow, OutboxInsertRow, QueueBoxTables } from '../dialect';
import { pgTable } from './postgres.schema';

// I7: `now()` is the start of the transaction. Every lease and fence reads `clock_timestamp()`,
// the current time, so a fence evaluated late in a long transaction sees an expired lease.
const NOW = 'clock_timestamp()';
const msFromNow = (param: string) => `${NOW} + make_interval(secs => ${param}::double precision / 1000)`;

interface ClaimedRecord {
  id: string;
  message_id: string;
  destination: string;
  key: string | null;
  payload: unknown;
  headers: Record<string, string> | null;
  attempts: number;
  claim_token: string;
  lease_expires_at: Date;
  created_at: Date;
}

/** The PostgreSQL dialect: `FOR UPDATE SKIP LOCKED` claims, advisory claim locks, `clock_timestamp()` fences. */
export class PostgresDialect implements Dialect {
  readonly type = 'postgres' as const;
  private readonly table: Record<LeaseTable, string>;
  private readonly finishedState: Record<LeaseTable, { state: string; column: string }> = {
    outbox: { state: 'sent', column: 'sent_at' },
    inbox: { state: 'processed', column: 'processed_at' },
  };
  private readonly outboxClaimLock: string;

  constructor(
    private readonly dataSource: DataSource,
    private readonly tables: QueueBoxTables,
  ) {
    this.table = { outbox: pgTable(tables.outbox), inbox: pgTable(tables.inbox) };
    this.outboxClaimLock = `queuebox_outbox_claim_${tables.outbox.qualified}`;
  }

  async schemaCheck(): Promise<void> {
    for (const kind of ['outbox', 'inbox'] as const) {
      const { rows } = await runSql<{ found: string | null }>(this.dataSource, 'SELECT to_regclass($1)::text AS found', [this.table[kind]]);
      if (!rows[0]?.found) throw new QueueBoxConfigError(`tables.${kind}`, messages.tableMissing(this.tables[kind].qualified));
    }
  }

  async outboxInsert(p: { manager: EntityManager; rows: OutboxInsertRow[] }): Promise<{ id: string; messageId: string }[]> {
    const { rows } = await runSql<{ id: string; message_id: string }>(
      this.dataSource,
      `INSERT INTO ${this.table.outbox} (message_id, destination, "key", payload, headers, available_at)
SELECT m.message_id, m.destination, m.key, m.payload, m.headers, coalesce(m.available_at, now())
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[], $6::timestamptz[])
  AS m(message_id, destination, key, payload, headers, available_at)
RETURNING id, message_id`,
      [
        p.rows.map((r) => r.messageId),
        p.rows.map((r) => r.destination),
        p.rows.map((r) => r.key),
        p.rows.map((r) => r.payloadJson),
        p.rows.map((r) => r.headersJson),
        p.rows.map((r) => r.availableAt),
      ],
      p.manager,
    );
    const ids = new Map(rows.map((r) => [r.message_id, String(r.id)]));
    return p.rows.map((r) => ({ id: ids.get(r.messageId) as string, messageId: r.messageId }));
  }

  async outboxClaimBatch(p: { limit: number; leaseMs: number }): Promise<OutboxClaimedRow[]> {
    const t = this.table.outbox;
    // The head-of-key check alone is not enough under READ COMMITTED: two claimers can each see a
    // different head when rows of one key commit out of id order. The advisory lock serializes
    // claims (each claim statement then sees the previous claim's commit), SKIP LOCKED keeps the
    // claim from waiting on rows that fenced writes hold, and the unique in-flight index is the
    // last word. The CTE is materialized so the LIMIT applies exactly once.
    const records = await this.dataSource.transaction(async (manager) => {
      await runSql(this.dataSource, 'SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [this.outboxClaimLock], manager);
      const { rows } = await runSql<ClaimedRecord>(
        this.dataSource,
        `WITH candidates AS MATERIALIZED (
  SELECT o.id FROM ${t} o
  WHERE o.state = 'pending' AND o.available_at <= ${NOW}
    AND (o."key" IS NULL OR NOT EXISTS (
      SELECT 1 FROM ${t} e
      WHERE e."key" = o."key" AND e.state IN ('pending', 'processing') AND e.id <> o.id
        AND (e.state = 'processing' OR e.id < o.id)))
  ORDER BY o.available_at, o.id
  LIMIT $1
  FOR UPDATE OF o SKIP LOCKED
)
UPDATE ${t} o
SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = ${NOW},
    lease_expires_at = ${msFromNow('$2')}, attempts = o.attempts + 1
FROM candidates c
WHERE o.id = c.id
RETURNING o.id, o.message_id, o.destination, o."key", o.payload, o.headers, o.attempts,
          o.claim_token, o.lease_expires_at, o.created_at`,
        [p.limit, p.leaseMs],
        manager,
      );
      return rows;
    });
    return records
      .map((r) => ({
        id: String(r.id),
        messageId: r.message_id,
        destination: r.destination,
        key: r.key,
        payload: r.payload,
        headers: r.headers ?? {},
        attempts: r.attempts,
        token: r.claim_token,
        leaseExpiresAt: r.lease_expires_at,
        createdAt: r.created_at,
      }))
      .sort((a, b) => Number(BigInt(a.id) - BigInt(b.id)));
  }

  async outboxReclaim(p: { maxAttempts: number }): Promise<{ pending: number; dead: number }> {
    const { rows } = await runSql<{ state: string }>(
      this.dataSource,
      `UPDATE ${this.table.outbox}
SET state = CASE WHEN attempts >= $1 THEN 'dead' ELSE 'pending' END,
    claim_token = NULL, lease_expires_at = NULL,
    last_error = 'lease expired on attempt ' || attempts || ' of ' || $1::integer
      || ': the worker crashed, was stopped or outlived its lease'
WHERE state = 'processing' AND lease_expires_at <= ${NOW}
RETURNING state`,
      [p.maxAttempts],
    );
    const dead = rows.filter((r) => r.state === 'dead').length;
    return { pending: rows.length - dead, dead };
  }

  async leaseRenew(p: FenceParams & { leaseMs: number }): Promise<Date | null> {
    const { rows } = await runSql<{ lease_expires_at: Date }>(
      this.dataSource,
      `UPDATE ${this.table[p.table]} SET lease_expires_at = ${msFromNow('$3')}
WHERE ${this.fence()} RETURNING lease_expires_at`,
      [p.id, p.token, p.leaseMs],
    );
    return rows.length === 1 ? rows[0].lease_expires_at : null;
  }

  async leaseComplete(p: FenceParams & { manager?: EntityManager }): Promise<boolean> {
    const finished = this.finishedState[p.table];
    const { affected } = await runSql(
      this.dataSource,
      `UPDATE ${this.table[p.table]} SET state = '${finished.state}', ${finished.column} = ${NOW}, lease_expires_at = NULL
WHERE ${this.fence()}`,
      [p.id, p.token],
      p.manager,
    );
    return affected === 1;
  }

  async leaseRetry(p: FenceParams & { delayMs: number; error: string | null }): Promise<boolean> {
    const { affected } = await runSql(
      this.dataSource,
      `UPDATE ${this.table[p.table]}
SET state = 'pending', available_at = ${msFromNow('$3')}, claim_token = NULL, lease_expires_at = NULL, last_error = $4
WHERE ${this.fence()}`,
      [p.id, p.token, p.delayMs, p.error],
    );
    return affected === 1;
  }

  async leaseDeadLetter(p: FenceParams & { reason: string }): Promise<boolean> {
    const { affected } = await runSql(
      this.dataSource,
      `UPDATE ${this.table[p.table]} SET state = 'dead', lease_expires_at = NULL, last_error = $3
WHERE ${this.fence()}`,
      [p.id, p.token, p.reason],
    );
    return affected === 1;
  }

  async clockNow(): Promise<Date> {
    const { rows } = await runSql<{ now: Date }>(this.dataSource, `SELECT ${NOW} AS now`, []);
    return rows[0].now;
  }

  /** The claim fence: parameters $1 = id, $2 = token. */
  private fence(): string {
    return `id = $1 AND state = 'processing' AND claim_token = $2 AND lease_expires_at > ${NOW}`;
  }
}
