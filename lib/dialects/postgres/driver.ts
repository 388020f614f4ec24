import type { DialectDriver } from '../dialect-driver';
import { CLAIM_FUNCTIONS_MIGRATION_NOTE } from '../schema-migrations';
import { finishedCountQuery, rowStatesQuery } from './inspection.sql';
import { postgresPartitionedLayoutDown, postgresPartitionedLayoutUp } from './layout.sql';
import { postgresMigrations } from './migrations';
import { PostgresDialect } from './postgres.dialect';
import { postgresVerifyQueries } from './verify.sql';

/** PostgreSQL (TypeORM driver `postgres`, node-postgres). */
export const postgresDriver = {
  type: 'postgres',
  displayName: 'PostgreSQL',
  logContext: 'QueueBox:Postgres',
  create: ({ dataSource, tables, settings, log }) => new PostgresDialect(dataSource, tables, settings, log),
  migrations: postgresMigrations,
  partitionedLayout: { up: postgresPartitionedLayoutUp, down: postgresPartitionedLayoutDown },
  noOpMigrations: {
    claimFunctions: CLAIM_FUNCTIONS_MIGRATION_NOTE,
    claimProbes:
      "-- Nothing to undo: the claim functions stay as this version wrote them (the earlier head probes could read\n-- every finished row on each claim); migration 006's down drops them.",
    keyCollation:
      "-- Nothing to do on PostgreSQL: text columns under the database's default (deterministic) collation\n-- compare equal only when their bytes are equal. The file keeps the migrations numbered alike in both dialects.",
  },
  script: { terminator: ';\n', folder: 'postgres' },
  migrationNotes: {
    keyCollation: {
      applied: 'nothing to change on PostgreSQL (text compares byte-wise).',
      notApplied: 'not applied (changes nothing on PostgreSQL; `queuebox migrate` records it)',
    },
  },
  urlSchemes: ['postgres', 'postgresql'],
  connectionFromUrl: ({ url, raw, user, database, connectTimeoutMs, poolMax }) => ({
    connection: { type: 'postgres', url: raw, extra: { max: poolMax, connectionTimeoutMillis: connectTimeoutMs } },
    where: `${url.hostname || 'localhost'}:${url.port || '5432'}`,
    user: user || 'the default user',
    database: database || user,
  }),
  // TypeORM gives node-postgres `max: poolSize` and then spreads `extra` over it, so `extra.max`
  // wins; node-postgres' own default is 10.
  poolSize: (options) => {
    const { poolSize, extra } = options as { poolSize?: number; extra?: { max?: number } };
    return extra?.max ?? poolSize ?? 10;
  },
  // node-postgres has no client-side statement timeout here.
  withRequestTimeout: (connection) => connection,
  // SQLSTATEs: 3D000 no such database, 28P01 bad password, 28000 no such role or not allowed.
  connectionFailures: { databaseMissing: { codes: ['3D000'] }, authenticationFailed: { codes: ['28P01', '28000'] } },
  verify: postgresVerifyQueries,
  inspection: { finishedCount: finishedCountQuery, rowStates: rowStatesQuery },
} as const satisfies DialectDriver<'postgres'>;
