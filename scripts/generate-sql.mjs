#!/usr/bin/env node
// Writes the plain-SQL schema (sql/<dialect>/NNN_name.up.sql / .down.sql) from the same
// statements the TypeORM migration runs, for people who use their own migration tool.
// A unit test fails when these files drift from the code: run `npm run sql` after a schema change.
import { mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { renderSchemaFiles } = require('../dist/migrations/schema-files.js');

for (const file of renderSchemaFiles()) {
  mkdirSync(file.dir, { recursive: true });
  writeFileSync(`${file.dir}/${file.name}`, file.content);
  console.log(`wrote ${file.dir}/${file.name}`);
}
