import { type DialectType, dialectDriver, dialectDrivers } from '../dialects/drivers';
import { MIGRATION_FILES, SCHEMA_MIGRATIONS, type SchemaMigration } from '../dialects/schema-migrations';
import { resolveTables } from '../options/options.resolver';
import { type QueueBoxModuleOptions } from '../types/options';

/**
 * The schema as one SQL script, for people who run their own migration tool.
 *
 * @example
 * writeFileSync('V7__queuebox.sql', renderSchemaSql('postgres', { tables: { outbox: 'messaging.outbox', inbox: 'messaging.inbox' } }));
 */
export function renderSchemaSql(
  dialect: DialectType,
  options: { tables?: QueueBoxModuleOptions['tables']; direction?: 'up' | 'down'; migration?: SchemaMigration } = {},
): string {
  const direction = options.direction ?? 'up';
  const migration = options.migration ?? 'schema';
  const driver = dialectDriver(dialect);
  const end = driver.script.terminator;
  const title = driver.scriptTitles?.[migration] ?? MIGRATION_FILES[migration].title;
  const statements = driver.migrations[migration][direction](resolveTables(options.tables));
  return [
    `-- QueueBox ${title} (${dialect}, ${direction}), rendered from the TypeORM migration's statements.`,
    '',
    ...(statements.length === 0 ? [driver.noOpMigrations[migration] ?? '-- No statements for this dialect.', ''] : []),
    ...statements.map((statement) => `${statement}${end}`),
  ].join('\n');
}

/** The files shipped in `sql/` (default table names); `npm run sql` writes them, a test checks them. */
export function renderSchemaFiles(): { dir: string; name: string; content: string }[] {
  return dialectDrivers().flatMap((driver) =>
    SCHEMA_MIGRATIONS.flatMap((migration) =>
      (['up', 'down'] as const).map((direction) => ({
        dir: `sql/${driver.script.folder}`,
        name: `${MIGRATION_FILES[migration].file}.${direction}.sql`,
        content: renderSchemaSql(driver.type, { direction, migration }),
      })),
    ),
  );
}
