import { SCHEMA_MIGRATIONS, type SchemaMigration, schemaStatements } from '../dialects/dialects';
import { resolveTables } from '../options/options.resolver';
import type { QueueBoxModuleOptions } from '../options/options.types';

/**
 * The schema as one SQL script, for people who run their own migration tool.
 *
 * @example
 * writeFileSync('V7__queuebox.sql', renderSchemaSql('postgres', { tables: { outbox: 'messaging.outbox', inbox: 'messaging.inbox' } }));
 */
export function renderSchemaSql(
  dialect: 'postgres' | 'mssql',
  options: { tables?: QueueBoxModuleOptions['tables']; direction?: 'up' | 'down'; migration?: SchemaMigration } = {},
): string {
  const direction = options.direction ?? 'up';
  const migration = options.migration ?? 'schema';
  // sqlcmd and SSMS send a script batch by batch: `GO` ends each of SQL Server's.
  const end = dialect === 'mssql' ? ';\nGO\n' : ';\n';
  const title = {
    schema: 'schema',
    operations: 'operations indexes',
    claims: 'claims (indexes and functions)',
    keyCollation: 'key collation',
  }[migration];
  const statements = schemaStatements(dialect, resolveTables(options.tables), direction, migration);
  return [
    `-- QueueBox ${title} (${dialect}, ${direction}), rendered from the TypeORM migration's statements.`,
    '',
    ...(statements.length === 0 ? [NO_STATEMENTS[migration] ?? '-- No statements for this dialect.', ''] : []),
    ...statements.map((statement) => `${statement}${end}`),
  ].join('\n');
}

/** Why a migration has no statements on a dialect, in place of its script's body. */
const NO_STATEMENTS: Partial<Record<SchemaMigration, string>> = {
  keyCollation:
    "-- Nothing to do on PostgreSQL: text columns under the database's default (deterministic) collation\n-- compare equal only when their bytes are equal. The file keeps the migrations numbered alike in both dialects.",
};

/** The files shipped in `sql/` (default table names); `npm run sql` writes them, a test checks them. */
export function renderSchemaFiles(): { dir: string; name: string; content: string }[] {
  const dirs = { postgres: 'postgres', mssql: 'sqlserver' } as const;
  const files = {
    schema: '001_queuebox',
    operations: '002_queuebox_operations',
    claims: '003_queuebox_claims',
    keyCollation: '004_queuebox_key_collation',
  } as const;
  return (['postgres', 'mssql'] as const).flatMap((dialect) =>
    SCHEMA_MIGRATIONS.flatMap((migration) =>
      (['up', 'down'] as const).map((direction) => ({
        dir: `sql/${dirs[dialect]}`,
        name: `${files[migration]}.${direction}.sql`,
        content: renderSchemaSql(dialect, { direction, migration }),
      })),
    ),
  );
}
