import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { DataSource } from 'typeorm';
import { poolSizeOf } from '../../lib/module/queuebox.pool-check';

// The start-up pool check must read the pool size the driver really builds: TypeORM passes some
// options on to node-postgres / mssql and spreads `extra` over them.
const sizeOf = (options: object) => poolSizeOf({ options } as DataSource);

describe('poolSizeOf: the pool size as each driver reads it', () => {
  it('PostgreSQL: extra.max over poolSize (TypeORM spreads extra over max: poolSize), else poolSize, else 10', () => {
    assert.equal(sizeOf({ type: 'postgres', poolSize: 5, extra: { max: 20 } }), 20);
    assert.equal(sizeOf({ type: 'postgres', poolSize: 5 }), 5);
    assert.equal(sizeOf({ type: 'postgres', extra: { max: 3 } }), 3);
    assert.equal(sizeOf({ type: 'postgres' }), 10);
  });

  it('SQL Server: poolSize is not read; extra.pool replaces pool whole; mssql default 10', () => {
    assert.equal(sizeOf({ type: 'mssql', poolSize: 30 }), 10);
    assert.equal(sizeOf({ type: 'mssql', pool: { max: 4 } }), 4);
    assert.equal(sizeOf({ type: 'mssql', pool: { max: 4 }, extra: { pool: { max: 6 } } }), 6);
    assert.equal(sizeOf({ type: 'mssql', pool: { max: 4 }, extra: { pool: { min: 1 } } }), 10);
  });

  it('refuses a database QueueBox does not support, as the module does', () => {
    assert.throws(() => sizeOf({ type: 'mysql' }), /QueueBox supports TypeORM DataSources of type/);
  });
});
