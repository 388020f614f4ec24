import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { forMigrations, MIGRATION_REQUEST_TIMEOUT_MS, maskSecrets, parseDatabaseUrl } from '../../lib/cli/database-url';
import { sqlServerRequestTimeout } from '../../lib/dialects/sqlserver/sqlserver.options';

describe('CLI database URLs', () => {
  it('masks passwords given as URL parameters (password=, sslpassword=), as well as in the user info', () => {
    const target = parseDatabaseUrl('postgres://app@db.internal:5432/orders?sslmode=require&sslpassword=k3y%2Bpass&password=s3cr%40t');
    assert.equal(target.masked, 'postgres://app@db.internal:5432/orders?sslmode=require&sslpassword=***&password=***');
    // A driver's message that echoes a password, encoded or decoded, is scrubbed as well.
    assert.equal(maskSecrets('failed for s3cr@t and k3y+pass', target.secrets), 'failed for *** and ***');
    assert.equal(
      maskSecrets('see postgres://u:p@h/d?PASSWORD=x;sslpassword=y#frag'),
      'see postgres://u:***@h/d?PASSWORD=***;sslpassword=***#frag',
    );
    assert.equal(parseDatabaseUrl('mssql://sa@sql.internal/app?password=hunter22').masked, 'mssql://sa@sql.internal/app?password=***');
    assert.equal(
      maskSecrets('postgres://u@h/d?application_name=password'),
      'postgres://u@h/d?application_name=password',
      'only parameters named password',
    );
  });
});

describe('queuebox migrate: the request timeout on SQL Server (issue 14, item 8 f)', () => {
  it('gives SQL Server migrations one hour per request (index builds), as mssql resolves it; PostgreSQL is unchanged', () => {
    const mssql = parseDatabaseUrl('mssql://sa:pw@sql.internal:1433/app');
    assert.deepEqual(sqlServerRequestTimeout(mssql.connection), { ms: 15_000, option: 'requestTimeout' }, "mssql's default elsewhere");
    assert.equal(MIGRATION_REQUEST_TIMEOUT_MS, 3_600_000);
    assert.deepEqual(sqlServerRequestTimeout(forMigrations(mssql).connection), { ms: 3_600_000, option: 'requestTimeout' });
    assert.equal(mssql.connection.type, 'mssql', 'the parsed target itself is not changed');
    assert.equal((mssql.connection as { requestTimeout?: number }).requestTimeout, undefined);
    const postgres = parseDatabaseUrl('postgres://app@db.internal:5432/orders');
    assert.equal(forMigrations(postgres), postgres);
  });
});
