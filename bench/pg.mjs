// The parent's own connections: one admin connection to the server's maintenance database (for
// CREATE/DROP DATABASE and pg_stat_database), and short-lived clients to a workload's database.
//
// Why the counters are read only when a database has no connection left: a PostgreSQL backend
// keeps its transaction counters in local memory and flushes them to pg_stat_database at most
// once a second when it goes idle, and surely only when it exits (checked on PG 15: 200 SELECTs
// on an open connection still showed 1 transaction after 1.2 s idle, and 201 once it closed).
// pg_stat_force_next_flush() only flushes the calling backend, so it cannot reach the worker's.
// So every phase that is measured ends with all its clients closed, and the parent waits until
// pg_stat_activity shows no client backend on that database before it reads the counters.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { beforeDeadline, now, sleep } from './clock.mjs';

const require = createRequire(import.meta.url);
const pg = require('pg');

// bigint columns (count(*), counters) as numbers: every value here is far below 2^53.
pg.types.setTypeParser(20, (value) => Number(value));

export const POLL_MARKER = '/* bench:done-poll */';

export function databaseUrl(serverUrl, database) {
  const url = new URL(serverUrl);
  url.pathname = `/${database}`;
  return url.toString();
}

export function redact(url) {
  return url.replace(/\/\/([^:@/]*):[^@/]*@/, '//$1:***@');
}

export async function connect(url) {
  const client = new pg.Client({ connectionString: url, application_name: 'queuebox-bench' });
  await client.connect();
  return client;
}

/** Runs `fn(client)` on a fresh connection to `url` and closes it. */
export async function withClient(url, fn) {
  const client = await connect(url);
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** Fields of /proc/<pid>/stat after the command name (index 0 = state, 1 = ppid, 13 = cutime, 14 = cstime). */
function statFields(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

export class Admin {
  constructor(serverUrl) {
    this.serverUrl = serverUrl;
  }

  async open() {
    this.client = await connect(this.serverUrl);
    const { rows } = await this.client.query(`SELECT current_setting('server_version_num')::int AS num, version() AS full_version`);
    this.versionNum = rows[0].num;
    this.backendPid = (await this.client.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    this.version = rows[0].full_version;
    // Durability settings decide what a commit costs (a WAL flush each, unless fsync or
    // synchronous_commit is off), so the report names them beside the numbers.
    const settings = await this.client.query(
      `SELECT name, current_setting(name) AS value FROM unnest(array['fsync', 'synchronous_commit', 'shared_buffers']) AS name`,
    );
    this.settings = settings.rows.map((r) => `${r.name}=${r.value}`).join(', ');
    if (this.versionNum < 130000)
      throw new Error(`PostgreSQL 13 or newer is needed (DROP DATABASE ... WITH (FORCE)), found ${this.version}`);
  }

  async close() {
    await this.client?.end().catch(() => undefined);
  }

  /**
   * CPU time, in ms, of every backend of the server that has exited so far: the user and system
   * time of the postmaster's reaped children (`cutime` + `cstime` in /proc/<postmaster>/stat).
   * A workload's backends all exit before its closing snapshot, so the delta over a workload is
   * what the database spent on it (plus autovacuum workers and anything else that exited on the
   * server meanwhile). Null when the server is not a process of this Linux machine.
   */
  backendCpuMs() {
    if (this.postmaster === undefined) this.postmaster = this.findPostmaster();
    if (this.postmaster === null) return null;
    try {
      const fields = statFields(this.postmaster.pid);
      return ((Number(fields[13]) + Number(fields[14])) / this.postmaster.ticksPerSecond) * 1000;
    } catch {
      return null;
    }
  }

  findPostmaster() {
    try {
      // This connection's backend is a child of the postmaster; its PID means something here only
      // if the server runs on this machine: the parent must be a postgres process.
      const backendPid = this.backendPid;
      const ppid = Number(statFields(backendPid)[1]);
      const command = readFileSync(`/proc/${ppid}/cmdline`, 'latin1').split('\0')[0];
      if (!/postgres/.test(command)) return null;
      let ticksPerSecond = 100;
      try {
        ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
      } catch {}
      return { pid: ppid, ticksPerSecond };
    } catch {
      return null;
    }
  }

  async createDatabase(name) {
    await this.client.query(`CREATE DATABASE "${name}"`);
    return databaseUrl(this.serverUrl, name);
  }

  async dropDatabase(name) {
    await this.client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  }

  /** Databases left by this run (e.g. after a crash of the parent), to drop them at the end. */
  async databasesLike(prefix) {
    const { rows } = await this.client.query('SELECT datname FROM pg_database WHERE starts_with(datname, $1)', [prefix]);
    return rows.map((r) => r.datname);
  }

  /** Waits until no client backend is connected to `database` (so its counters are flushed). */
  async waitForNoClients(database, timeoutMs = 15_000) {
    const deadline = now() + timeoutMs;
    for (;;) {
      const { rows } = await this.client.query(
        `SELECT count(*) AS n FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'`,
        [database],
      );
      if (rows[0].n === 0) return true;
      if (now() > deadline) return false;
      await sleep(20);
    }
  }

  /** Committed plus rolled-back transactions of `database` so far. */
  async transactions(database) {
    await this.client.query('SELECT pg_stat_clear_snapshot()');
    const { rows } = await this.client.query('SELECT xact_commit + xact_rollback AS xacts FROM pg_stat_database WHERE datname = $1', [
      database,
    ]);
    return rows[0]?.xacts ?? Number.NaN;
  }
}

/**
 * pg_stat_statements, when the server loads it (shared_preload_libraries). Creating the extension
 * works without it, reading the view then fails: that is the test. Returns null when unavailable.
 */
export async function enableStatementStats(url) {
  try {
    return await withClient(url, async (client) => {
      await client.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
      await client.query('SELECT 1 FROM pg_stat_statements LIMIT 1');
      return true;
    });
  } catch {
    return null;
  }
}

/**
 * Statements executed in the current database so far, from pg_stat_statements (updated when each
 * statement ends, no flush delay). The parent's own reads of the view and its done-polls are left
 * out by their text. Call it only when nothing else is measured: it opens a connection.
 */
export async function statementCount(url) {
  return withClient(url, async (client) => {
    const { rows } = await client.query(
      `SELECT coalesce(sum(calls), 0) AS calls FROM pg_stat_statements
       WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
         AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%bench:done-poll%'`,
    );
    return rows[0].calls;
  });
}

/**
 * Polls `sql` (which returns one row with `n`, the unfinished messages) until it says 0. Fails when
 * the deadline passes, or when the count stays the same for `stallMs`. Returns the clock time of
 * the poll that saw 0 and how many polls ran.
 */
export async function pollUntilFinished(url, sql, params, { intervalMs, deadline, stallMs }) {
  const client = await connect(url);
  let polls = 0;
  try {
    const poll = async () => {
      let last = -1;
      let lastChange = now();
      for (;;) {
        polls++;
        const { rows } = await client.query(`${POLL_MARKER} ${sql}`, params);
        const seenAt = now();
        const unfinished = rows[0].n;
        if (unfinished === 0) return seenAt;
        if (unfinished !== last) {
          last = unfinished;
          lastChange = seenAt;
        } else if (seenAt - lastChange > stallMs) {
          throw new Error(
            `${unfinished} message(s) still unfinished in the database ${Math.round(stallMs / 1000)} s after the worker had seen every message`,
          );
        }
        await sleep(intervalMs);
      }
    };
    const doneAt = await beforeDeadline(poll(), deadline, 'waiting for the database to show every message finished');
    return { doneAt, polls };
  } finally {
    // A poll cut short by the deadline leaves its query running; end() still closes the socket.
    await client.end().catch(() => undefined);
  }
}

export { pg };
