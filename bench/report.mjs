// The markdown report: a header (machine, versions, settings), one table (workload x system and
// configuration), QueueBox's verdict against each target of issue 29, the peers' guarantees, and
// the definitions.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fmt } from './stats.mjs';

const require = createRequire(import.meta.url);

export function gitDescription() {
  try {
    const cwd = new URL('..', import.meta.url);
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'lib'], { cwd, encoding: 'utf8' }).trim() !== '';
    return dirty ? `${commit} + uncommitted changes in lib/` : commit;
  } catch {
    return 'unknown';
  }
}

/** A package's version, also for packages whose `exports` hide their package.json (typeorm). */
export function packageVersion(name) {
  let dir = dirname(require.resolve(name));
  while (dir !== dirname(dir)) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8'));
      if (pkg.name === name) return pkg.version;
    }
    dir = dirname(dir);
  }
  return 'unknown';
}

export function environment({ systems, postgres, postgresSettings, git, nodeLabel }) {
  const cpus = os.cpus();
  const versions = {};
  for (const system of systems) Object.assign(versions, system.versions());
  for (const name of ['pg', 'typeorm', '@nestjs/core']) versions[name] = packageVersion(name);
  return {
    cores: cpus.length,
    cpuModel: cpus[0]?.model?.trim() ?? 'unknown',
    memoryGiB: os.totalmem() / 1024 ** 3,
    os: `${os.type()} ${os.release()}`,
    node: process.version,
    nodeLabel,
    postgres,
    postgresSettings,
    versions,
    git,
  };
}

const cell = (text) => String(text ?? '').replaceAll('|', '\\|');

/** A system and its configuration, as the table and the verdicts name it. */
export function systemLabel(r) {
  return r.variant?.label ? `${r.system} (${r.variant.label})` : r.system;
}

function resultText(r, results) {
  if (r.status === 'not measured yet') return '**not measured yet**';
  if (r.status === 'n/a') return 'n/a';
  if (r.status === 'failed') return `**FAILED**: ${r.error}`;
  if (r.latency) {
    const l = r.latency;
    const spread = r.spread?.runs > 1 ? ` (p99 ${fmt.ms(r.spread.min)} to ${fmt.ms(r.spread.max)} over ${r.spread.runs} runs)` : '';
    return `p50 ${fmt.ms(l.p50)} / p95 ${fmt.ms(l.p95)} / p99 ${fmt.ms(l.p99)} / max ${fmt.ms(l.max)} ms${spread}`;
  }
  if (r.allocBytesPerMsg !== null) return `**${fmt.int(r.allocBytesPerMsg)} B/msg** allocated`;
  let text = `${fmt.int(r.rate)} msg/s`;
  const baseline = r.workload === 'w4' && results.find((b) => b.workload === 'w1' && b.system === r.system && b.status === 'ok');
  if (baseline) text += ` = **${fmt.ratio(r.rate / baseline.rate)} its W1**`;
  return text;
}

/** Each row against the best peer of its workload in this run (the peer the verdicts use), named in the cell. */
function ratioText(r, results) {
  if (r.status !== 'ok') return '';
  if (r.workload === 'w4') return 'n/a (W4 is a ratio to W1)';
  if (r.allocBytesPerMsg !== null) return `n/a (target ${fmt.int(TARGETS.allocBytesPerMsg)} B/msg)`;
  const peer = bestPeer(results, r.workload, Boolean(r.latency));
  if (!peer)
    return r.system === 'queuebox' && r.workload.startsWith('w5')
      ? `n/a (target ${fmt.int(TARGETS.inboxMsgPerSecond)} msg/s)`
      : 'n/a (no peer finished it)';
  if (peer === r) return r.workload === 'w1' ? 'best order-keeping peer' : 'best peer';
  if (r.latency) return `p99 ${fmt.ratio(r.latency.p99 / peer.latency.p99)} ${systemLabel(peer)} (lower is better)`;
  return `${fmt.ratio(r.rate / peer.rate)} ${systemLabel(peer)}`;
}

/** go -> first handler start, with the start call in it (drains); W3: the start call. */
function startupText(r) {
  if (r.status !== 'ok') return '';
  if (r.startupMs !== null) return `${fmt.ms(r.startupMs)} (start call ${fmt.ms(r.startCallMs)})`;
  if (r.startCallMs !== null) return `start call ${fmt.ms(r.startCallMs)}`;
  return '';
}

function orderText(r) {
  if (r.status !== 'ok') return '';
  if (!r.ordered) return 'n/a (no keys)';
  return r.orderViolations === 0 ? `ok (${r.orderLabel})` : `**${fmt.int(r.orderViolations)} out of order** (${r.orderLabel})`;
}

/** RSS growth of a drain: peak minus idle (at \`go\`), in KiB; null where not measured. */
const rssGrowthKb = (r) => (r.rssKb === null || r.idleRssKb === null ? null : r.rssKb - r.idleRssKb);

/** Peak RSS with its growth over the worker's own idle (not judged in the allocation run: the profiler holds memory). */
function rssText(r) {
  if (r.rssKb === null) return '';
  if (r.allocBytesPerMsg !== null) return `${fmt.mb(r.rssKb)} (profiler on)`;
  const growth = rssGrowthKb(r);
  return growth === null ? fmt.mb(r.rssKb) : `${fmt.mb(r.rssKb)} (+${fmt.mb(Math.max(0, growth))})`;
}

/** `worker + database` CPU µs per message (drains), `n/a` where not measured. */
export function cpuText(r) {
  if (r.status !== 'ok') return '';
  if (r.workerCpuUsPerMsg === null) return 'n/a';
  const us = (v) => (v === null ? 'n/a' : v.toFixed(0));
  return `${us(r.workerCpuUsPerMsg)} + ${us(r.databaseCpuUsPerMsg)}`;
}

function dupText(r) {
  if (r.status !== 'ok') return '';
  const missing = r.missing > 0 ? `, **${fmt.int(r.missing)} missing**` : '';
  return `${fmt.int(r.duplicates)}${missing}`;
}

export function table(results) {
  const lines = [
    '| Workload | System | Result | vs best peer | Per-key order | Dups | Peak RSS MB (+ over idle) | CPU µs/msg worker + database | Start-up ms | xacts/msg | stmts/msg | Notes |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const r of results) {
    const stmts = r.status !== 'ok' ? '' : r.stmtsPerMsg === null ? 'n/a' : fmt.perMsg(r.stmtsPerMsg);
    const xacts = r.status !== 'ok' ? '' : fmt.perMsg(r.xactsPerMsg);
    const notes = [r.settings, ...r.notes].filter(Boolean).join('; ');
    lines.push(
      `| ${[
        r.title,
        systemLabel(r),
        resultText(r, results),
        ratioText(r, results),
        orderText(r),
        dupText(r),
        rssText(r),
        cpuText(r),
        startupText(r),
        xacts,
        stmts,
        notes,
      ]
        .map(cell)
        .join(' | ')} |`,
    );
  }
  return lines.join('\n');
}

/** The targets of issue 29 item 3; each verdict is computed from one run against the best peer. */
export const TARGETS = {
  /** W1: QueueBox's msg/s against the best peer configuration that keeps each key's order. */
  orderedVsBestPeer: 3,
  unorderedVsBestPeer: 1.2,
  /** W3: QueueBox's p99 at most this times the best peer's. */
  latencyP99VsBestPeer: 1.0,
  scaleVsW1: 0.9,
  inboxMsgPerSecond: 25000,
  /** W2: bytes allocated per message (sampling heap profile of the allocation run). */
  allocBytesPerMsg: 2048,
  /** W2: QueueBox's RSS growth over its own idle at most this times graphile-worker's (issue 36: the +15 MB over a floor is retired). */
  rssGrowthVsGraphileWorker: 1.0,
};

const isPeer = (r) => r.system !== 'queuebox';
const met = (ok) => (ok ? 'MET' : 'NOT MET');

/**
 * The best peer result of a workload: highest msg/s, or, with `byP99`, lowest p99. In W1 only
 * the configurations that keep each key's order, and only if they did in this run (W1's ratio is
 * taken against order-keeping peers: a peer that reorders is not doing W1's work).
 */
function bestPeer(results, workload, byP99 = false) {
  const peers = results.filter(
    (r) =>
      r.workload === workload &&
      isPeer(r) &&
      r.status === 'ok' &&
      (workload !== 'w1' || (r.keepsOrder !== false && r.orderViolations === 0)),
  );
  if (byP99) return peers.reduce((best, r) => (!best || r.latency.p99 < best.latency.p99 ? r : best), null);
  return peers.reduce((best, r) => (!best || r.rate > best.rate ? r : best), null);
}

/** Peers of a workload that lost, duplicated or reordered a message: said next to a ratio against them. */
function peerCaveat(peer) {
  const issues = [];
  if (peer.orderViolations > 0) issues.push(`${fmt.int(peer.orderViolations)} out of order`);
  if (peer.duplicates > 0) issues.push(`${fmt.int(peer.duplicates)} dups`);
  if (peer.missing > 0) issues.push(`${fmt.int(peer.missing)} missing`);
  return issues.length ? `; ${systemLabel(peer)} had ${issues.join(', ')}` : '';
}

/** W1: the peer configurations left out of the comparison, and why (they reordered, by design or in this run). */
function reorderingPeers(results) {
  const left = results.filter(
    (r) => r.workload === 'w1' && isPeer(r) && r.status === 'ok' && (r.keepsOrder === false || r.orderViolations > 0),
  );
  if (left.length === 0) return '';
  const faster = left
    .filter((r) => r.rate !== null)
    .map((r) => `${systemLabel(r)} ${fmt.int(r.rate)} msg/s, ${fmt.int(r.orderViolations)} out of order`);
  return `; not compared, they reorder: ${faster.join('; ')}`;
}

/**
 * One line per target of issue 29 item 3, from this run: `W1 ordered: MET (3.4x best order-keeping
 * peer graphile-worker (no local queue), target 3x)`. A target with no result to judge it by says
 * NOT MEASURED and why; QueueBox losing, duplicating or reordering a message fails the target of
 * that workload whatever its rate.
 */
export function verdicts(results) {
  const qb = (w) => results.find((r) => r.workload === w && r.system === 'queuebox');
  const qbOk = (w) => (qb(w)?.status === 'ok' ? qb(w) : null);
  const misdelivered = (r) => r.missing > 0 || r.duplicates > 0 || r.orderViolations > 0;
  const notMeasured = (title, why) => `${title}: NOT MEASURED (${why})`;
  const whyNoQueueBox = (w) => (qb(w) ? `queuebox ${qb(w).status}${qb(w).error ? `: ${qb(w).error}` : ''}` : 'queuebox did not run it');
  const lines = [];

  for (const [w, title, target, which] of [
    ['w1', 'W1 ordered', TARGETS.orderedVsBestPeer, 'best order-keeping peer'],
    ['w2', 'W2 unordered', TARGETS.unorderedVsBestPeer, 'best peer'],
  ]) {
    const q = qbOk(w);
    const peer = bestPeer(results, w);
    const left = w === 'w1' ? reorderingPeers(results) : '';
    if (!q) lines.push(notMeasured(title, whyNoQueueBox(w)));
    else if (!peer) lines.push(notMeasured(title, `no ${w === 'w1' ? 'order-keeping ' : ''}peer finished it${left}`));
    else {
      const ratio = q.rate / peer.rate;
      const bad = misdelivered(q) ? '; queuebox misdelivered' : '';
      lines.push(
        `${title}: ${met(ratio >= target && !bad)} (${fmt.ratio(ratio)} ${which} ${systemLabel(peer)}: ${fmt.int(q.rate)} against ${fmt.int(peer.rate)} msg/s, target ${target}x${bad}${peerCaveat(peer)}${left})`,
      );
    }
  }

  const q3 = qbOk('w3');
  const p3 = bestPeer(results, 'w3', true);
  const spreadOf = (r) => (r.spread?.runs > 1 ? ` (${fmt.ms(r.spread.min)} to ${fmt.ms(r.spread.max)} over ${r.spread.runs} runs)` : '');
  if (!q3) lines.push(notMeasured('W3 latency', whyNoQueueBox('w3')));
  else if (!p3) lines.push(notMeasured('W3 latency', 'no peer finished it'));
  else {
    const ratio = q3.latency.p99 / p3.latency.p99;
    lines.push(
      `W3 latency: ${met(ratio <= TARGETS.latencyP99VsBestPeer && !misdelivered(q3))} (p99 ${fmt.ratio(ratio)} best peer: ${fmt.ms(q3.latency.p99)} ms${spreadOf(q3)} against ${systemLabel(p3)} ${fmt.ms(p3.latency.p99)} ms${spreadOf(p3)}; target <= ${TARGETS.latencyP99VsBestPeer}x)`,
    );
  }

  const q1 = qbOk('w1');
  const q4 = qbOk('w4');
  if (!q4) lines.push(notMeasured('W4 scale', whyNoQueueBox('w4')));
  else if (!q1) lines.push(notMeasured('W4 scale', 'no queuebox W1 in this run'));
  else {
    const ratio = q4.rate / q1.rate;
    lines.push(
      `W4 scale: ${met(ratio >= TARGETS.scaleVsW1 && !misdelivered(q4))} (${fmt.ratio(ratio)} queuebox's W1, target ${TARGETS.scaleVsW1}x)`,
    );
  }

  for (const [w, title] of [
    ['w5a', 'W5 inbox relay'],
    ['w5b', 'W5 pull worker'],
  ]) {
    const q = qbOk(w);
    if (!q) lines.push(notMeasured(title, whyNoQueueBox(w)));
    else
      lines.push(
        `${title}: ${met(q.rate >= TARGETS.inboxMsgPerSecond && !misdelivered(q))} (${fmt.int(q.rate)} msg/s, target ${fmt.int(TARGETS.inboxMsgPerSecond)})`,
      );
  }

  const qa = qbOk('w2m');
  if (!qa) lines.push(notMeasured('W2 allocation', whyNoQueueBox('w2m')));
  else if (qa.allocBytesPerMsg === null) lines.push(notMeasured('W2 allocation', 'the worker sent no heap profile'));
  else
    lines.push(
      `W2 allocation: ${met(qa.allocBytesPerMsg <= TARGETS.allocBytesPerMsg)} (${fmt.int(qa.allocBytesPerMsg)} bytes allocated per message, sampling heap profile over ${fmt.int(qa.messages)} messages; target ${fmt.int(TARGETS.allocBytesPerMsg)})`,
    );

  const q2 = qbOk('w2');
  const gw2 = results.find((r) => r.workload === 'w2' && r.system === 'graphile-worker' && r.status === 'ok');
  if (!q2 || rssGrowthKb(q2) === null)
    lines.push(notMeasured('W2 RSS growth over idle', q2 ? 'no idle RSS recorded' : whyNoQueueBox('w2')));
  else if (!gw2 || rssGrowthKb(gw2) === null) lines.push(notMeasured('W2 RSS growth over idle', 'graphile-worker did not finish W2'));
  else {
    const [mine, theirs] = [rssGrowthKb(q2), rssGrowthKb(gw2)];
    lines.push(
      `W2 RSS growth over idle: ${met(mine <= theirs * TARGETS.rssGrowthVsGraphileWorker)} (QueueBox +${fmt.mb(Math.max(0, mine))} MB, ${fmt.mb(q2.idleRssKb)} to ${fmt.mb(q2.rssKb)}; graphile-worker +${fmt.mb(Math.max(0, theirs))} MB, ${fmt.mb(gw2.idleRssKb)} to ${fmt.mb(gw2.rssKb)}; target at most graphile-worker's)`,
    );
  }
  return lines;
}

function guarantees(results) {
  const seen = new Set();
  const lines = [];
  for (const r of results) {
    // The keyed outbox workloads; W5's per-aggregate guarantee is in its row.
    const label = systemLabel(r);
    // A cell that did not run (W4 of a system that keeps no finished rows) has no configuration to describe.
    if (!['w1', 'w4'].includes(r.workload) || r.status === 'n/a' || !r.ordered || !r.guarantee || seen.has(label)) continue;
    seen.add(label);
    lines.push(`- **${label}**: ${r.guarantee}.`);
  }
  return lines.join('\n');
}

export function renderReport({ startedAt, runMs, env, serverLabel, statements, settings, results, floor }) {
  const v = Object.entries(env.versions)
    .map(([name, version]) => `${name} ${version}`)
    .join(', ');
  return `# QueueBox benchmark, ${new Date(startedAt).toISOString()}

- Machine: ${env.cores} cores, ${env.cpuModel}, ${env.memoryGiB.toFixed(1)} GiB RAM, ${env.os}
- Node.js ${env.node} (${env.nodeLabel ?? 'the running node'}; the parent and every worker process); PostgreSQL ${env.postgres} (${serverLabel}; ${env.postgresSettings})
- Versions: ${v}; QueueBox from dist/ of git ${env.git} (copied at the start of the run)
- Mode: ${settings.mode === 'quick' ? 'quick (BENCH_QUICK=1: small backlogs, start-up weighs on the rates; not for comparing systems)' : 'steady state'}
- Settings: ${fmt.int(settings.orderedMessages)} messages per keyed drain (W1, W4), ${fmt.int(settings.unorderedMessages)} per unkeyed drain (W2), ${fmt.int(settings.messages)} per inbox drain (W5), ${fmt.int(settings.allocMessages)} in the W2 allocation run, ${settings.keys} keys, ${settings.txSize} messages per enqueue transaction, ${settings.workers > 1 ? `${settings.workers} worker processes (BENCH_WORKERS; the W2 allocation run one), each with ` : ''}concurrency ${settings.concurrency}, worker pool ${settings.poolSize} connections; W3 ${settings.latencyRate} msg/s for ${settings.latencySeconds} s; W4 ${fmt.int(settings.finishedRows)} finished rows${settings.repeat > 1 ? `; each cell is the median of ${settings.repeat} runs` : ''}
- RSS floor: ${floor?.rssKb ? `${fmt.mb(floor.rssKb)} MB, the median peak RSS of ${floor.runsKb.length} processes that boot Nest + TypeORM + pg (one query) as the QueueBox worker boots, without QueueBox (${floor.runsKb.map((kb) => fmt.mb(kb)).join(', ')} MB)` : `not measured${floor?.error ? ` (${floor.error})` : ''}`}
- pg_stat_statements: ${statements ? 'loaded: stmts/msg measured' : 'not loaded on this server (it needs shared_preload_libraries), so stmts/msg is n/a'}
- The whole run took ${fmt.seconds(runMs)}.

Ratios are what count here: absolute numbers on a shared 2-core machine are noise.

${table(results)}

## Verdicts: QueueBox against the targets of issue 29 (this run, against the best peer; W1 against the best peer that keeps each key's order)

${verdicts(results)
  .map((line) => `- ${line}`)
  .join('\n')}

## Per-key order: what each system guarantees (W1, W4)

${guarantees(results)}

## How it is measured

- **Drain (W1, W2, W4; W5 the same from the inbox)**: the whole backlog is enqueued and committed first (transactions of ${settings.txSize}; W5: inserted into the inbox, ${settings.txSize} rows per INSERT); then one worker process (${settings.workers > 1 ? `here ${settings.workers}, BENCH_WORKERS` : 'BENCH_WORKERS sets more'}) boots and connects and is told to go. **Start-up** = from \`go\` (before the system's start call) to the first handler start, the start call's own time in parentheses. The **drain** is timed from that first handler start to the first poll (every ${settings.donePollMs} ms, once the worker has seen every message) that finds no unfinished message in the database. msg/s = messages / drain time.
- **Peers' configurations**: in W1 and W4 each peer runs its fastest configuration that keeps each key's order (graphile-worker without its local queue; pg-boss with time-ordered UUIDv7 job ids) and, beside it, the faster one that reorders (labelled so); W1's ratio is taken against the best order-keeping configuration that kept order in this run. W2 and W3 have no keys: each peer runs its fastest configuration.
- **W2 allocation**: W2 once more, QueueBox alone (${fmt.int(settings.allocMessages)} messages), with V8's sampling heap profiler (every ${fmt.int(settings.allocSamplingInterval)} bytes, objects the GC collected included) from the end of the start call until the parent saw the work finished; bytes per message = the profile's total (each sample scaled by V8) / messages handled in that span. Its rate is not a result.
- **Latency (W3)**: the worker runs first; the producer then commits one message per transaction at a fixed rate; latency = the handler's start (worker process) minus the moment the enqueue's COMMIT returned (producer), both on \`performance.timeOrigin + performance.now()\`.
- **Per-key order**: the worker records each handler start in order; for each key, each message's first start must come after those of the messages enqueued before it. **Dups**: handler starts beyond the first per message. W5 inbox relay: read from the outbox rows it wrote instead (id order; dups = outbox rows beyond one per inbox row).
- **Peak RSS**: \`process.resourceUsage().maxRSS\` of the worker process when the parent saw the work finished (before its graceful stop and before it builds the arrays it sends back); **+ over idle**: that peak less its resident set at \`go\` (booted, connected, idle). The W2 target compares that growth with graphile-worker's in the same run.
- **xacts/msg**: delta of \`xact_commit + xact_rollback\` in \`pg_stat_database\` for the workload's database, over the worker process's whole life (boot to exit), less the parent's own done-polls (and, in W3, the producer's one transaction per message), divided by the messages. Counters are read only when no client is connected to that database, since a backend flushes them when it exits. A LISTENing backend counts a transaction each time it reads a notification.
- **CPU µs/msg worker + database** (drains only): the worker process's user + system CPU (\`process.cpuUsage()\`) from its first handler start until the parent saw the work finished, and the CPU of the database backends that exited between the two counter snapshots (the postmaster's reaped children, \`cutime + cstime\` in /proc: the worker's connections, the parent's done-polls, autovacuum workers; \`n/a\` when the server is not a process of this machine), each per message. On a machine of C cores, no system can drain faster than C x 1,000,000 / (worker + database) msg/s.
- **stmts/msg**: delta of \`pg_stat_statements\` calls for that database over the same span, when the server loads it (in W3 less the producer's statements per message, measured alone beforehand); otherwise n/a.
- Each system runs each workload in a database of its own, created for it and dropped after.
`;
}
