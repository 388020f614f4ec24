import { after, before, beforeEach, describe } from 'node:test';
import type { EntityManager } from 'typeorm';
import { createDialect } from '../../lib/core/create-dialect';
import type { Dialect, InboxInsertRow } from '../../lib/dialects/dialect';
import { QueueBoxEvents } from '../../lib/events/queuebox.events';
import type { LeaseService } from '../../lib/lease/lease.service';
import { QueueBoxMetrics } from '../../lib/metrics/queuebox.metrics';
import { resolveTables } from '../../lib/options/options.resolver';
import { toOutboxRows } from '../../lib/outbox/outbox-rows';
import type { OutboxClaim } from '../../lib/types/claims';
import type { OutboxMessageInput } from '../../lib/types/outbox';
import { claimsOver, type TestClaims } from '../support/claims';
import { CONFORMANCE_TABLES, type ConformanceDatabase, type DialectHarness, HARNESSES, SKIPS_PRINTED } from './harness';

// One suite for the dialect seam, run against every configured dialect (in the spirit of River's
// driver tests), one file per noun (claims, order, inbox, pull, followers, open transactions,
// payloads, admin): through the Dialect interface, the workers' claims and LeaseService only.
// PostgreSQL always runs; SQL Server when QUEUEBOX_MSSQL_URL names a server. Each file opens a
// database of its own per dialect, so the files run in parallel.

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
export const LONG = 60_000;

/** What a reclaim did, without its per-name breakdown. */
export const counts = ({ pending, dead }: { pending: number; dead: number }) => ({ pending, dead });

/** What a conformance case works with: the database, its dialect, fresh claims and fencing per case, and helpers. */
export interface Conformance {
  readonly harness: DialectHarness;
  readonly db: ConformanceDatabase;
  readonly dialect: Dialect;
  readonly lease: LeaseService;
  readonly take: TestClaims;
  readonly metrics: QueueBoxMetrics;
  enqueue(...messages: Partial<OutboxMessageInput>[]): Promise<{ id: string; messageId: string }[]>;
  receive(row: Partial<InboxInsertRow> & { idempotencyKey: string }): Promise<{ id: string; duplicate: boolean }>;
  claimOutbox(limit: number, leaseMs?: number): Promise<OutboxClaim[]>;
  keysOf(claims: OutboxClaim[]): string[];
  /**
   * Runs `work` while another transaction stays open, and rolls that one back afterwards; `work`
   * gets its manager to write rows that stay uncommitted (and, with READ_COMMITTED_SNAPSHOT OFF
   * on SQL Server, X-locked) while it runs.
   */
  whileOpen(work: (open: EntityManager) => Promise<void>): Promise<void>;
  /** How long `work` took, in ms, with its result. */
  timed<T>(work: () => Promise<T>): Promise<[T, number]>;
}

/** Declares the cases of one noun for every dialect: `body` gets the context its cases read. */
export function conformanceSuite(noun: string, body: (c: Conformance) => void): void {
  for (const harness of HARNESSES) {
    // Under scripts/test.mjs, which printed why once for the whole run, a skipped dialect is left
    // out instead of reported skipped again in every file (issue 40). Run alone (`node --test
    // file`), each file still says it skipped the dialect and why.
    if (harness.skip && process.env[SKIPS_PRINTED] === '1') continue;
    describe(`dialect conformance: ${harness.name}: ${noun}`, harness.skip ? { skip: harness.skip } : {}, () => suite(harness, body));
  }
}

function suite(harness: DialectHarness, body: (c: Conformance) => void): void {
  let db: ConformanceDatabase;
  let dialect: Dialect;
  let lease: LeaseService;
  let take: TestClaims;
  let metrics: QueueBoxMetrics;

  before(async () => {
    db = await harness.open();
    dialect = createDialect(db.dataSource, resolveTables(CONFORMANCE_TABLES));
    await dialect.schemaCheck();
  });
  after(async () => {
    await db?.close();
  });
  beforeEach(async () => {
    await db.reset();
    const events = new QueueBoxEvents();
    metrics = new QueueBoxMetrics(events);
    take = claimsOver(dialect, events);
    lease = take.lease;
  });

  const enqueue = (...messages: Partial<OutboxMessageInput>[]) =>
    db.dataSource.transaction((manager) =>
      dialect.outboxInsert({
        manager,
        rows: toOutboxRows(
          messages.map((m) => ({ destination: 'd', payload: {}, ...m })),
          1_000_000,
        ),
      }),
    );
  const receive = (row: Partial<InboxInsertRow> & { idempotencyKey: string }) =>
    dialect.inboxInsertIfAbsent({ row: { source: 'orders', aggregateId: null, payloadJson: '{}', headersJson: '{}', ...row } });
  const claimOutbox = (limit: number, leaseMs = LONG) => take.outbox.claim({ limit, leaseMs });
  const keysOf = (claims: OutboxClaim[]) => claims.map((c) => `${c.message.key}:${(c.message.payload as { n: number }).n}`);
  /* Runs `work` while another transaction stays open, and rolls that one back afterwards; `work`
   * gets its manager to write rows that stay uncommitted (and, with READ_COMMITTED_SNAPSHOT OFF
   * on SQL Server, X-locked) while it runs. */
  const whileOpen = async (work: (open: EntityManager) => Promise<void>) => {
    const open = db.dataSource.createQueryRunner();
    await open.connect();
    await open.startTransaction();
    try {
      await work(open.manager);
    } finally {
      if (open.isTransactionActive) await open.rollbackTransaction();
      await open.release();
    }
  };
  const timed = async <T>(work: () => Promise<T>): Promise<[T, number]> => {
    const started = Date.now();
    const result = await work();
    return [result, Date.now() - started];
  };

  body({
    harness,
    get db() {
      return db;
    },
    get dialect() {
      return dialect;
    },
    get lease() {
      return lease;
    },
    get take() {
      return take;
    },
    get metrics() {
      return metrics;
    },
    enqueue,
    receive,
    claimOutbox,
    keysOf,
    whileOpen,
    timed,
  });
}
