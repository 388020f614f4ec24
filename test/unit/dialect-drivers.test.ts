import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { DataSource } from 'typeorm';
import { createDialect } from '../../lib/core/create-dialect';
import { DIALECT_TYPES, dialectDriver, dialectDriverForScheme, dialectDrivers } from '../../lib/dialects/drivers';
import { SCHEMA_MIGRATIONS } from '../../lib/dialects/schema-migrations';
import { QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import { renderSchemaFiles } from '../../lib/migrations/schema-files';
import { resolveTables } from '../../lib/options/options.resolver';

// The compiled test runs from .build/test/unit; the sources and sql/ are at the repository root.
const ROOT = join(__dirname, '..', '..', '..');

describe('dialect registry', () => {
  it('ships, for every registered database, the plain-SQL files the registry renders, byte for byte, and nothing else', () => {
    const rendered = renderSchemaFiles();
    assert.deepEqual(
      readdirSync(join(ROOT, 'sql')).sort(),
      dialectDrivers()
        .map((driver) => driver.script.folder)
        .sort(),
    );
    for (const driver of dialectDrivers()) {
      const dir = `sql/${driver.script.folder}`;
      const files = rendered.filter((file) => file.dir === dir);
      assert.equal(files.length, SCHEMA_MIGRATIONS.length * 2, `${driver.type}: an up and a down file per migration`);
      assert.deepEqual(readdirSync(join(ROOT, dir)).sort(), files.map((file) => file.name).sort());
      for (const file of files) {
        assert.equal(readFileSync(join(ROOT, dir, file.name), 'utf8'), file.content, `${dir}/${file.name} is stale: run \`npm run sql\``);
      }
    }
  });

  it('creates each database’s dialect from its TypeORM type, and refuses another type naming every supported one', () => {
    const tables = resolveTables(undefined);
    for (const driver of dialectDrivers()) {
      const dataSource = { options: { type: driver.type }, isInitialized: false } as unknown as DataSource;
      assert.equal(createDialect(dataSource, tables).type, driver.type);
      assert.equal(dialectDriver(driver.type), driver);
      for (const scheme of driver.urlSchemes) assert.equal(dialectDriverForScheme(scheme), driver, scheme);
    }
    assert.throws(
      () => dialectDriver('mysql'),
      (error: unknown) => error instanceof QueueBoxConfigError && DIALECT_TYPES.every((type) => error.message.includes(`"${type}"`)),
    );
  });

  it('keeps URL schemes and sql/ folders unique across databases', () => {
    const schemes = dialectDrivers().flatMap((driver) => driver.urlSchemes);
    assert.equal(new Set(schemes).size, schemes.length);
    const folders = dialectDrivers().map((driver) => driver.script.folder);
    assert.equal(new Set(folders).size, folders.length);
  });
});

/** Every relative or package import of a TypeScript source file. */
