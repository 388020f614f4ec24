import type { MigrationInterface, QueryRunner } from 'typeorm';
import { schemaStatements } from '../dialects/dialects';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { messages } from '../queuebox.messages';
import { type QueueBoxModuleOptions, resolveTables } from '../queuebox.options';

const DEFAULT_NAME = 'QueueBoxSchema1764460800000';

/**
 * A TypeORM migration class that creates the outbox and inbox tables (and indexes) for the
 * DataSource's dialect. Pass the same `tables` as to `QueueBoxModule.forRoot()`; give each
 * QueueBox schema in one database its own `name` (it must end in a 13-digit timestamp).
 *
 * @example
 * TypeOrmModule.forRoot({ ..., migrations: [createQueueBoxMigration({ tables: { outbox: 'messaging.outbox', inbox: 'messaging.inbox' } })], migrationsRun: true })
 */
export function createQueueBoxMigration(
  options: { tables?: QueueBoxModuleOptions['tables']; name?: string } = {},
): new () => MigrationInterface {
  const tables = resolveTables(options.tables);
  const name = options.name ?? DEFAULT_NAME;
  if (!/^[A-Za-z_][A-Za-z0-9_]*\d{13}$/.test(name)) throw new QueueBoxConfigError('name', messages.migrationNameInvalid(name));
  const run = async (queryRunner: QueryRunner, direction: 'up' | 'down') => {
    for (const statement of schemaStatements(queryRunner.connection.options.type, tables, direction)) {
      await queryRunner.query(statement);
    }
  };
  return class QueueBoxSchemaMigration implements MigrationInterface {
    readonly name = name;
    async up(queryRunner: QueryRunner): Promise<void> {
      await run(queryRunner, 'up');
    }
    async down(queryRunner: QueryRunner): Promise<void> {
      await run(queryRunner, 'down');
    }
  };
}

/** The migration for the default table names (`queuebox_outbox`, `queuebox_inbox`). */
export const QueueBoxSchema1764460800000 = createQueueBoxMigration();
