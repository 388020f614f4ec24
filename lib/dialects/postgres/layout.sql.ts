import { partitionsTableOf, type TableName, tableBeside } from '../../common/identifiers';
import { messages } from '../../texts/queuebox.messages';
import type { QueueBoxTables } from '../dialect';
import { SCHEMA_MIGRATIONS } from '../schema-migrations';
import { claimFunctionPlanSettingsSql, claimFunctionSignature, createClaimFunctionsSql } from './claim-functions.sql';
import { expectedIndexes } from './doctor.sql';
import {
  createPartitionSql,
  createPartitionsTableSql,
  createSideTableSql,
  dropSideTableTriggersSql,
  type PartitionedKind,
  partitionName,
  sideTableOf,
  sideTableTriggersSql,
} from './partitions.sql';
import { pgLiteral, pgTable } from './quoting';
import { dropClaimFunctionsSql } from './schema';

// The partitioned layout (issue 37, docs/partitioning.md), chosen after the numbered migrations:
// the outbox and inbox made again as tables partitioned by id range, with what the plain layout's
// unique constraints kept moved to side tables. PostgreSQL only.

/** The ids each of the first two partitions holds; the upkeep sizes the next ones by the rate. */
export const FIRST_PARTITION_SPAN = 1_000_000;

/**
 * The unique indexes of the plain layout that do not contain `id`: a partitioned table cannot hold
 * them. Each partition holds its own (`createPartitionSql`); across partitions I4 rests on the
 * keyed claim's key locks (docs/partitioning.md, decision 4).
 */
const PER_PARTITION_INDEXES = ['key_in_flight_idx', 'aggregate_in_flight_idx'];

/** A table's layout: `partitioned` (relkind `p`) or `plain`; no row when it does not exist. $1 = the table, quoted. */
export const tableLayoutSql = () =>
  "SELECT CASE c.relkind WHEN 'p' THEN 'partitioned' ELSE 'plain' END AS layout FROM pg_class c WHERE c.oid = to_regclass($1)";

/**
 * The outbox and inbox, empty, made again in the partitioned layout, in one transaction. Each table
 * is made anew from the plain one (`LIKE`: every column, default and check the numbered migrations
 * gave it), partitioned by id range, with its identity, primary key and indexes (all but the unique
 * ones without `id`, which each partition holds), its side table and the triggers that keep it in
 * step, its bookkeeping table and its first two partitions. The claim functions, which return the
 * tables' row types, go first and come back last. Refuses when either table holds a row: moving a
 * table with rows is step 5 of docs/partitioning.md.
 */
export function postgresPartitionedLayoutUp(tables: QueueBoxTables): string[] {
  return [
    refuseRowsSql(tables),
    ...dropClaimFunctionsSql(tables, claimFunctionSignature),
    ...(['outbox', 'inbox'] as const).flatMap((kind) => {
      const table = tables[kind];
      const indexes = expectedIndexes(tables, SCHEMA_MIGRATIONS).filter(
        (index) => index.table === table.qualified && !PER_PARTITION_INDEXES.some((name) => index.name === `${table.name}_${name}`),
      );
      return [
        ...remakeTableSql(table, 'PARTITION BY RANGE (id)'),
        ...indexes.map((index) => index.create),
        createSideTableSql(table, kind),
        ...sideTableTriggersSql(table, kind),
        createPartitionsTableSql(table),
        ...firstPartitionsSql(table, kind),
      ];
    }),
    ...claimFunctionsAgainSql(tables),
  ];
}

/**
 * Back to the plain layout, the tables empty: each made again unpartitioned with every index of
 * the numbered migrations and the unique constraints the side tables kept; the side tables and the
 * bookkeeping dropped.
 */
export function postgresPartitionedLayoutDown(tables: QueueBoxTables): string[] {
  const unique = {
    outbox: `ALTER TABLE ${pgTable(tables.outbox)} ADD CONSTRAINT "${tables.outbox.name}_message_id_key" UNIQUE (message_id)`,
    inbox: `ALTER TABLE ${pgTable(tables.inbox)} ADD CONSTRAINT "${tables.inbox.name}_source_idempotency_key_key" UNIQUE (source, idempotency_key)`,
  };
  return [
    refuseRowsSql(tables),
    ...dropClaimFunctionsSql(tables, claimFunctionSignature),
    ...(['outbox', 'inbox'] as const).flatMap((kind) => {
      const table = tables[kind];
      return [
        ...dropSideTableTriggersSql(table),
        `DROP TABLE ${pgTable(sideTableOf(table, kind))}`,
        `DROP TABLE ${pgTable(partitionsTableOf(table))}`,
        ...remakeTableSql(table, ''),
        unique[kind],
        ...expectedIndexes(tables, SCHEMA_MIGRATIONS)
          .filter((index) => index.table === table.qualified)
          .map((index) => index.create),
      ];
    }),
    ...claimFunctionsAgainSql(tables),
  ];
}

/**
 * The claim functions return the tables' row types, so they go before a table is made again and
 * come back after it, as migrations 013 and 014 left them.
 */
function claimFunctionsAgainSql(tables: QueueBoxTables): string[] {
  return [...createClaimFunctionsSql(tables), ...claimFunctionPlanSettingsSql(tables, 'up')];
}

function refuseRowsSql(tables: QueueBoxTables): string {
  const refusal = messages.partitionedLayoutNeedsEmptyTables(tables.outbox.qualified, tables.inbox.qualified);
  return `DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM ${pgTable(tables.outbox)}) OR EXISTS (SELECT 1 FROM ${pgTable(tables.inbox)}) THEN
    RAISE EXCEPTION '%', ${pgLiteral(refusal)};
  END IF;
END $$`;
}

/**
 * `table` made again from itself with `partitioning` (or none): every column with its defaults,
 * checks and comments, then the old one dropped (with its partitions and its identity sequence),
 * the new one renamed, given the identity sequence under the old name and its primary key.
 */
function remakeTableSql(table: TableName, partitioning: string): string[] {
  const remade = tableBeside(table, `${table.name}_remade`);
  return [
    `CREATE TABLE ${pgTable(remade)} (LIKE ${pgTable(table)} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMMENTS) ${partitioning}`,
    `DROP TABLE ${pgTable(table)}`,
    `ALTER TABLE ${pgTable(remade)} RENAME TO "${table.name}"`,
    `ALTER TABLE ${pgTable(table)} ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME ${pgTable(tableBeside(table, `${table.name}_id_seq`))})`,
    `ALTER TABLE ${pgTable(table)} ADD CONSTRAINT "${table.name}_pkey" PRIMARY KEY (id)`,
  ];
}

function firstPartitionsSql(table: TableName, kind: PartitionedKind): string[] {
  return [1, 2].flatMap((ordinal) =>
    createPartitionSql(table, kind, {
      name: partitionName(table, ordinal),
      ordinal,
      from: String(1 + (ordinal - 1) * FIRST_PARTITION_SPAN),
      to: String(1 + ordinal * FIRST_PARTITION_SPAN),
    }),
  );
}
