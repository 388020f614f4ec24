import type { DialectDriver } from '../dialect-driver';
import { finishedCountQuery, rowStatesQuery } from './inspection.sql';
import { sqlServerMigrations } from './migrations';
import { KEY_COLLATION } from './schema';
import { SqlServerDialect } from './sqlserver.dialect';
import { sqlServerVerifyQueries } from './verify.sql';

// Migrations 007, 012, 013 and 014 rewrite PostgreSQL's claim functions; SQL Server's claims are
// statements QueueBox sends, so each runs nothing here and says so alike.
const NO_FUNCTIONS_TO_REWRITE =
  '-- Nothing to do on SQL Server: its claims are statements QueueBox sends, with no functions to rewrite. The file\n-- keeps the migrations numbered alike in both dialects.';
const NOTHING_TO_REWRITE = {
  applied: 'nothing to change on SQL Server (its claims are statements).',
  notApplied: 'not applied (changes nothing on SQL Server; `queuebox migrate` records it)',
};

/** SQL Server and Azure SQL (TypeORM driver `mssql`). */
export const sqlServerDriver = {
  type: 'mssql',
  displayName: 'SQL Server, Azure SQL',
  logContext: 'QueueBox:SqlServer',
  create: ({ dataSource, tables, settings, log }) => new SqlServerDialect(dataSource, tables, log, settings),
  migrations: sqlServerMigrations,
  noOpMigrations: {
    claimFunctions:
      '-- Nothing to do on SQL Server, which has no claim functions: on PostgreSQL the version that shipped this\n-- migration wrote them here (they now come with migration 006). The file keeps the migrations numbered alike.',
    claimProbes: NO_FUNCTIONS_TO_REWRITE,
    unkeyedClaims: NO_FUNCTIONS_TO_REWRITE,
    keyedClaims: NO_FUNCTIONS_TO_REWRITE,
    claimPlans: NO_FUNCTIONS_TO_REWRITE,
  },
  // sqlcmd and SSMS send a script batch by batch: `GO` ends each of SQL Server's.
  script: { terminator: ';\nGO\n', folder: 'sqlserver' },
  // SQL Server has no claim functions: its claims are statements QueueBox sends.
  scriptTitles: {
    claimFunctions: 'claim functions, PostgreSQL only',
    instances: 'instances and claim owners',
    claimProbes: 'claim probes, PostgreSQL only',
    unkeyedClaims: 'unkeyed claims without the claim lock, PostgreSQL only',
    keyedClaims: 'keyed claims without the claim lock, PostgreSQL only',
    claimPlans: 'claim function plans, PostgreSQL only',
  },
  migrationNotes: {
    claimFunctions: {
      applied: 'nothing to change on SQL Server (it has no claim functions).',
      notApplied: 'not applied (changes nothing on SQL Server; `queuebox migrate` records it)',
    },
    instances: {
      applied: 'created the instances table and the claim owner columns.',
      notApplied: 'not applied: this version of QueueBox does not start until you run `queuebox migrate`',
    },
    claimProbes: NOTHING_TO_REWRITE,
    unkeyedClaims: NOTHING_TO_REWRITE,
    keyedClaims: NOTHING_TO_REWRITE,
    claimPlans: NOTHING_TO_REWRITE,
    keyCollation: {
      applied: `key columns now compare by code point (${KEY_COLLATION}); their indexes were rebuilt.`,
      notApplied:
        'not applied: keys that differ only in case (or accents) count as one key (a receive is dropped as a duplicate, two keys are ordered as one), until you run `queuebox migrate`',
    },
  },
  urlSchemes: ['mssql', 'sqlserver'],
  connectionFromUrl: ({ url, user, password, database, connectTimeoutMs, poolMax, fail }) => {
    if (!url.hostname) fail.noHost();
    if (!database) fail.noDatabase();
    const flag = (name: string, fallback: boolean): boolean => {
      const value = url.searchParams.get(name);
      if (value === null) return fallback;
      if (value === 'true' || value === 'false') return value === 'true';
      return fail.badParameter(name, value);
    };
    const instanceName = url.searchParams.get('instanceName') ?? undefined;
    return {
      connection: {
        type: 'mssql',
        host: url.hostname,
        port: url.port ? Number(url.port) : 1433,
        username: user,
        password,
        database,
        connectionTimeout: connectTimeoutMs,
        pool: { max: poolMax },
        options: { encrypt: flag('encrypt', true), trustServerCertificate: flag('trustServerCertificate', false), instanceName },
      },
      where: `${url.hostname}:${url.port || (instanceName ? `(instance ${instanceName})` : '1433')}`,
      user,
      database,
    };
  },
  // TypeORM's SQL Server driver never reads `poolSize`: it passes `pool` on, and an `extra.pool`
  // replaces it whole; mssql's own default is 10.
  poolSize: (options) => {
    const { pool, extra } = options as { pool?: { max?: number }; extra?: { pool?: { max?: number } } };
    return (extra?.pool ?? pool)?.max ?? 10;
  },
  withRequestTimeout: (connection, timeoutMs) => ({ ...connection, requestTimeout: timeoutMs }) as typeof connection,
  // tedious reports ELOGIN for a bad login and for a database it cannot open (told apart by the text).
  connectionFailures: {
    databaseMissing: { codes: [], text: /Cannot open database/i },
    authenticationFailed: { codes: ['ELOGIN'] },
  },
  verify: sqlServerVerifyQueries,
  inspection: { finishedCount: finishedCountQuery, rowStates: rowStatesQuery },
} as const satisfies DialectDriver<'mssql'>;
