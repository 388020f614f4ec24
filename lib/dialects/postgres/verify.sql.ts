import type { DataSourceOptions } from 'typeorm';
import type { VerifyQueries } from '../dialect-driver';
import { pgTable } from './quoting';
import { msAgo } from './time';

// What `queuebox verify` asks of PostgreSQL: the settings it reports, the sessions of its worker
// processes (by application_name) and pg_terminate_backend (a role may always end the sessions
// of its own role, so there is no permission to look up: the workers log in as the verify does),
// and the claims made during an admin pause.

/** The settings that bear on claims, fences and the pool, read from pg_settings (readable by any role). */
const SETTINGS = [
  'server_version',
  'default_transaction_isolation',
  'max_connections',
  'statement_timeout',
  'lock_timeout',
  'idle_in_transaction_session_timeout',
  'synchronous_commit',
];

export const postgresVerifyQueries: VerifyQueries = {
  // node-postgres lets the URL's parameters override the pool's options, so the name goes in the
  // URL itself (replacing any application_name the user gave): otherwise its sessions could not be found.
  withApplicationName: (connection, name) => {
    const options = connection as DataSourceOptions & { url?: string; applicationName?: string };
    if (options.url === undefined) return { ...options, applicationName: name } as DataSourceOptions;
    const url = new URL(options.url);
    url.searchParams.set('application_name', name);
    return { ...options, url: url.toString(), applicationName: name } as DataSourceOptions;
  },
  settings: () => ({
    sql: `SELECT name, setting AS value FROM pg_settings WHERE name = ANY($1::text[])
UNION ALL
SELECT 'version', version()`,
    params: [SETTINGS],
  }),
  sessionPermissionNames: { see: 'none (any role sees its own sessions)', end: 'none (a role may end the sessions of its own role)' },
  sessionsNamed: (name) => ({
    sql: 'SELECT pid AS session FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid()',
    params: [name],
  }),
  sessionEnd: (session) => ({ sql: 'SELECT pg_terminate_backend($1) AS ended', params: [session] }),
  claimedWithin: (table, component, name, ms) => {
    const [key, named] = component === 'outbox' ? ['"key"', 'destination'] : ['aggregate_id', 'source'];
    return {
      sql: `SELECT ${key} AS key FROM ${pgTable(table)} WHERE ${named} = $1 AND claimed_at >= ${msAgo('$2')}`,
      params: [name, ms],
    };
  },
};
