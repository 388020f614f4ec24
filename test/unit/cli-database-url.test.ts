import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { maskSecrets, parseDatabaseUrl } from '../../lib/cli/database-url';

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
