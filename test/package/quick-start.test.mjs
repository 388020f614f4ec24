// README "Five minutes with QueueBox", followed as a new user would: the snippets copied into a
// fresh ESM app (as `nest new` makes one), the packed library and the README's install line
// installed, built with tsc, started against a real PostgreSQL, and one order placed over HTTP
// until billing receives its message.
//   npm run test:package
// Offline where it can be: `npm install --prefer-offline` takes what `npm ci` cached.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

const repo = join(dirname(fileURLToPath(import.meta.url)), '../..');
const serverUrl = process.env.QUEUEBOX_PG_URL ?? process.env.DATABASE_URL;
const STEP_TIMEOUT_MS = 300_000;

/** The install command and the `// path` files of the README's quick start section. */
export function quickStart(readme) {
  const start = readme.indexOf('## Five minutes with QueueBox');
  const section = readme.slice(start, readme.indexOf('\n## ', start + 1));
  const blocks = [...section.matchAll(/```(\w+)\n([\s\S]*?)```/g)].map(([, lang, body]) => ({ lang, body }));
  const install = blocks.find((b) => b.lang === 'sh' && b.body.startsWith('npm install '))?.body.trim();
  const files = blocks
    .filter((b) => b.lang === 'ts')
    .map((b) => ({ path: /^\/\/ (\S+)\n/.exec(b.body)?.[1], content: b.body }))
    .filter((f) => f.path);
  return { install, files };
}

async function onServer(sql) {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

const run = (command, args, cwd) => execFileSync(command, args, { cwd, stdio: 'pipe', timeout: STEP_TIMEOUT_MS, encoding: 'utf8' });

let app;
let billing;
let dir;
const database = `qb_readme_${randomBytes(6).toString('hex')}`;

before(async () => {
  assert.ok(serverUrl, 'QUEUEBOX_PG_URL or DATABASE_URL must be set (scripts/with-postgres.mjs starts an embedded PostgreSQL)');
  assert.ok(existsSync(join(repo, 'dist/index.js')), 'dist/ is missing: run `npm run build` first');
  await onServer(`CREATE DATABASE ${database}`);
});

after(async () => {
  if (app && app.exitCode === null && app.signalCode === null) {
    app.kill('SIGKILL');
    await new Promise((resolve) => app.once('exit', resolve));
  }
  billing?.close();
  await onServer(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('README quick start: a fresh app publishes its first message', async () => {
  const { install, files } = quickStart(readFileSync(join(repo, 'README.md'), 'utf8'));
  assert.ok(install, 'the README quick start has an `npm install` line');
  assert.deepEqual(files.map((f) => f.path).sort(), [
    'src/app.module.ts',
    'src/main.ts',
    'src/orders/create-orders.migration.ts',
    'src/orders/order.entity.ts',
    'src/orders/orders.controller.ts',
    'src/orders/orders.service.ts',
  ]);

  // A fresh app folder with what `nest new` gives: an ESM package.json and a tsconfig with decorators.
  dir = mkdtempSync(join(tmpdir(), 'queuebox-readme-'));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'orders-app', private: true, type: 'module' }, null, 2));
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        module: 'nodenext',
        moduleResolution: 'nodenext',
        target: 'es2023',
        outDir: 'dist',
        rootDir: 'src',
        experimentalDecorators: true,
        emitDecoratorMetadata: true,
        strict: true,
        skipLibCheck: true,
        types: ['node'],
      },
      include: ['src'],
    }),
  );
  for (const file of files) {
    mkdirSync(dirname(join(dir, file.path)), { recursive: true });
    writeFileSync(join(dir, file.path), file.content);
  }

  // The README's install line, with the packed library in place of the registry's `queuebox`.
  const [packed] = JSON.parse(run('npm', ['pack', '--json', '--pack-destination', dir], repo));
  const packages = install
    .replace(/^npm install /, '')
    .split(/\s+/)
    .map((name) => (name === 'queuebox' ? join(dir, packed.filename) : name));
  run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts', ...packages, '@types/node@22'], dir);
  run(join(repo, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.json'], dir);

  // Billing: records what the app's HttpPublisher posts.
  const received = new Promise((resolve) => {
    billing = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk) => {
        body += chunk;
      });
      req.on('end', () => {
        res.writeHead(204).end();
        resolve({ url: req.url, headers: req.headers, body: JSON.parse(body) });
      });
    });
  });
  await new Promise((resolve) => billing.listen(0, '127.0.0.1', resolve));

  const url = new URL(serverUrl);
  url.pathname = `/${database}`;
  app = spawn(process.execPath, ['dist/main.js'], {
    cwd: dir,
    env: { ...process.env, DATABASE_URL: url.toString(), PORT: '0', BILLING_URL: `http://127.0.0.1:${billing.address().port}/events` },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const listening = new Promise((resolve, reject) => {
    const onData = (chunk) => {
      output += chunk;
      const match = /Listening on (\S+)/.exec(output);
      if (match) resolve(match[1].replace('[::1]', '127.0.0.1'));
    };
    app.stdout.on('data', onData);
    app.stderr.on('data', onData);
    app.once('exit', (code) => reject(new Error(`the app exited (${code}) before listening:\n${output}`)));
  });
  const appUrl = await listening;

  const response = await fetch(`${appUrl}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ customerId: 'ada', total: 42 }),
  });
  const order = await response.json();
  assert.equal(response.status, 201, `POST /orders answered ${response.status}: ${JSON.stringify(order)}\n${output}`);

  const message = await received;
  assert.equal(message.url, '/events');
  assert.deepEqual(message.body, { type: 'order.placed', orderId: order.id, total: 42 });
  assert.match(String(message.headers['x-message-id']), /^[0-9a-f-]{36}$/);

  app.kill('SIGTERM');
  // Nest's shutdown hooks close the app, then re-raise the signal: a clean stop ends by SIGTERM.
  const [code, signal] = await new Promise((resolve) => app.once('exit', (...end) => resolve(end)));
  assert.ok(code === 0 || signal === 'SIGTERM', `the app did not stop cleanly on SIGTERM (${code ?? signal}):\n${output}`);
  assert.match(output, /Outbox poller stopped/);
});

test('the installed package runs `queuebox verify` from the app: its own worker processes, on the database of the app', {
  timeout: STEP_TIMEOUT_MS,
}, () => {
  assert.ok(
    dir && existsSync(join(dir, 'node_modules/queuebox/dist/cli/verify/verify.worker.js')),
    'the quick start installed the package',
  );
  const url = new URL(serverUrl);
  url.pathname = `/${database}`;
  const output = run(
    'npx',
    ['--no-install', 'queuebox', 'verify', '--url', url.toString(), '--seconds', '6', '--workers', '2', '--scenarios', 'kill,poison'],
    dir,
  );
  assert.match(output, /^PASS {2}lost /m, output);
  assert.match(output, /^PASS {2}recovery /m, output);
  assert.match(output, /^Verdict: PASS \(\d+ checks\) in \d+ s\. Workers stopped, tables dropped\.$/m, output);
});
