import assert from 'node:assert/strict';
import { it } from 'node:test';
import type { MigrationInterface } from 'typeorm';

import { conformanceSuite } from './suite';

class FailingMigration1000000000000 implements MigrationInterface {
  name = 'FailingMigration1000000000000';
  async up(): Promise<void> {
    throw new Error('this migration fails on purpose');
  }
  async down(): Promise<void> {}
}

conformanceSuite('test databases', (c) => {
  it('a migration that fails while a test database is opened leaves no database behind', async () => {
    let created: string | undefined;
    await assert.rejects(
      c.harness.open({
        migrations: [FailingMigration1000000000000],
        created: (name) => {
          created = name;
        },
      }),
      /this migration fails on purpose/,
    );
    assert.ok(created, 'the database was created before the migration ran');
    assert.equal(await c.db.databaseExists(c.db.name), true, 'the check sees a database that exists');
    assert.equal(await c.db.databaseExists(created), false, `${created} was dropped`);
  });
});
