import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { describe, it } from 'node:test';
import { runCli } from '../../lib/cli/cli';
import { forMigrations, MIGRATION_REQUEST_TIMEOUT_MS, maskSecrets, parseDatabaseUrl } from '../../lib/cli/database-url';
import { sqlServerRequestTimeout } from '../../lib/dialects/sqlserver/sqlserver.options';

describe('CLI database URLs', () => {
  it('masks passwords given as URL parameters (password=, sslpassword=), as well as in the user info', () => {
    const target = parseDatabaseUrl('postgres://app@db.internal:5432/orders?sslmode=require&sslpassword=k3y%2Bpass&password=s3cr%40t');
    assert.equal(target.masked, 'postgres://app@db.internal:5432/orders?sslmode=require&sslpassword=***&password=***');
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

  it('masks a password in a URL only: the same word elsewhere in a line (a JSON type) is left as it is', () => {
    // The embedded test server's URL: its password is the name of the database, and of the `type` of every report.
    const { secrets } = parseDatabaseUrl('postgres://postgres:postgres@127.0.0.1:5432/test');
    assert.equal(
      maskSecrets('{"type":"postgres","url":"postgres://postgres:postgres@127.0.0.1:5432/test","user":"postgres"}', secrets),
      '{"type":"postgres","url":"postgres://postgres:***@127.0.0.1:5432/test","user":"postgres"}',
    );
    const parameters = parseDatabaseUrl('postgres://app@db/orders?password=orders');
    assert.equal(
      maskSecrets('orders: postgres://app@db/orders?password=orders', parameters.secrets),
      'orders: postgres://app@db/orders?password=***',
    );
    // A password with an `@` left unencoded (the URL parser takes the last one): masked whole, not up to its `@`.
    const unencoded = parseDatabaseUrl('postgres://app:p@ss@db/orders');
    assert.equal(unencoded.masked, 'postgres://app:***@db/orders');
    assert.equal(
      maskSecrets('connect postgres://app:p@ss@db/orders: refused', unencoded.secrets),
      'connect postgres://app:***@db/orders: refused',
    );
  });

  it('masks the password of every URL in a line, whatever the scheme and user, and nothing that is not a password', () => {
    assert.equal(
      maskSecrets('connect postgres://app:s3cret@db:5432/o failed; retry sqlserver://sa:P%40ss@sql/app, then mssql://:pw@h/d'),
      'connect postgres://app:***@db:5432/o failed; retry sqlserver://sa:***@sql/app, then mssql://:***@h/d',
    );
    assert.equal(maskSecrets('POSTGRESQL://U:Pw@H/D'), 'POSTGRESQL://U:***@H/D', 'any case');
    assert.equal(maskSecrets('db+ssl.v2-x://u:p:w@h/d'), 'db+ssl.v2-x://u:***@h/d', 'scheme characters + . -, a colon in the password');
    assert.equal(maskSecrets('postgres://u:p@h/d?password=x&sslpassword=y'), 'postgres://u:***@h/d?password=***&sslpassword=***');
    for (const untouched of ['postgres://u@h/d', 'http://h:8080/p@q', 'ratio 3:1 at noon', 'a user:pass@host without a scheme']) {
      assert.equal(maskSecrets(untouched), untouched);
    }
  });

  // Issue 34: `queuebox status --url <100 kB>` took 62 s. The masking ran a pattern that retried
  // from every letter of a long run (quadratic), on every argument and every printed line.
  describe('takes time linear in the text: hostile 100 kB and 1 MB arguments', () => {
    const hostile: Record<string, (n: number) => string> = {
      'a run of letters': (n) => 'a'.repeat(n),
      'a scheme and a long user': (n) => `postgres://${'u'.repeat(n)}`,
      'a long password never closed by @': (n) => `postgres://u:${'p'.repeat(n)}`,
      'a long password with colons': (n) => `postgres://u:${'p:'.repeat(n / 2)}`,
      'schemes over and over': (n) => 'a://b:'.repeat(n / 6),
      'password parameters over and over': (n) => '?password=&sslpassword='.repeat(n / 24),
      'letters, then a URL with a password': (n) => `${'x'.repeat(n)} postgres://u:secret@h/d`,
    };
    const elapsedMs = (work: () => void) => {
      const start = performance.now();
      work();
      return performance.now() - start;
    };
    it('masks and parses each hostile form of 100 kB, then of 1 MB, in well under a second', () => {
      // 100 kB first: quadratic code fails there in seconds instead of running for minutes on 1 MB.
      for (const size of [100_000, 1_000_000]) {
        for (const [name, make] of Object.entries(hostile)) {
          const text = make(size);
          const ms = elapsedMs(() => {
            maskSecrets(text, ['secret']);
            try {
              parseDatabaseUrl(text);
            } catch {
              // Most of them are no database URL: the time to say so is what counts.
            }
          });
          assert.ok(ms < 1000, `${name} (${text.length} characters): ${ms.toFixed(0)} ms`);
        }
        assert.equal(maskSecrets(hostile['letters, then a URL with a password'](size)).slice(-21), ' postgres://u:***@h/d');
      }
    });

    it('a tenfold longer text takes about ten times as long, not a hundred (the fastest of a few runs of each)', () => {
      // A run of letters that no `://` follows: the earlier pattern tried a scheme from each of them.
      const text = (n: number) => `${'a'.repeat(n)} postgres://u:secret@h/d`;
      const fastest = (n: number, runs: number) => {
        const once = () => elapsedMs(() => maskSecrets(text(n)));
        let best = once();
        // Quadratic code takes seconds on 100 kB: once is enough to tell.
        for (let run = 1; run < runs && best < 1000; run++) best = Math.min(best, once());
        return best;
      };
      const small = fastest(10_000, 5);
      const large = fastest(100_000, 3);
      assert.ok(large / Math.max(small, 0.05) < 40, `10 kB: ${small.toFixed(2)} ms, 100 kB: ${large.toFixed(2)} ms`);
      assert.equal(maskSecrets(text(100_000)).slice(-21), ' postgres://u:***@h/d');
    });

    it('queuebox with a 1 MB --url answers at once, its password masked', async () => {
      const run = async (url: string) => {
        const printed: string[] = [];
        const io = { env: {}, out: (text: string) => printed.push(text), err: (text: string) => printed.push(text) };
        const start = performance.now();
        const code = await runCli(['status', '--url', url], io);
        return { ms: performance.now() - start, code, printed: printed.join('\n') };
      };
      // A SQL Server URL without a database: a usage error (exit 2) before any connection, whose message shows the URL masked.
      for (const size of [100_000, 1_000_000]) {
        const answer = await run(`mssql://sa:Pa55w0rd@${'d'.repeat(size)}`);
        assert.equal(answer.code, 2, answer.printed.slice(0, 300));
        assert.match(answer.printed, /mssql:\/\/sa:\*\*\*@ddd/);
        assert.doesNotMatch(answer.printed, /Pa55w0rd/);
        assert.ok(answer.ms < 1000, `${size / 1000} kB: ${answer.ms.toFixed(0)} ms`);
      }
    });
  });
});

describe('queuebox migrate: the request timeout on SQL Server', () => {
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
