#!/usr/bin/env node
// Summarizes V8 CPU profiles (`BENCH_CPU_PROF=1` writes them to bench/results/profiles/): where a
// worker process's time went, as shares of its samples by kind (idle, GC, QueueBox, TypeORM, the
// pg driver, Nest, Node internals, other) and the functions with the most self time.
//
//   node bench/profile-summary.mjs bench/results/profiles/<name>.cpuprofile [...]   (top 15; TOP=30 for more)
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';

const TOP = Number(process.env.TOP ?? 15);

/** The kind of code a profile node's script is, from its URL. */
function kindOf(url, functionName) {
  if (functionName === '(idle)') return 'idle (waiting for I/O)';
  if (functionName === '(garbage collector)') return 'garbage collector';
  if (functionName === '(program)') return 'V8 / native (program)';
  if (url.includes('/bench-dist-') || url.includes('/dist/')) return 'QueueBox';
  if (url.includes('node_modules/typeorm/')) return 'TypeORM';
  if (/node_modules\/(pg|pg-protocol|pg-types|pg-pool|postgres-[a-z]+)\//.test(url)) return 'pg driver';
  if (url.includes('node_modules/@nestjs/')) return 'Nest';
  if (url.includes('node_modules/')) return 'other packages';
  if (url.startsWith('node:') || url === '') return 'Node.js internals';
  return 'bench harness';
}

for (const file of process.argv.slice(2)) {
  const profile = JSON.parse(readFileSync(file, 'utf8'));
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const selfUs = new Map();
  // timeDeltas[i] is the time before samples[i]: credit it to that sample's node.
  for (let i = 0; i < profile.samples.length; i++) {
    const id = profile.samples[i];
    selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
  }
  const total = [...selfUs.values()].reduce((a, b) => a + b, 0);
  const kinds = new Map();
  const functions = new Map();
  for (const [id, us] of selfUs) {
    const { callFrame } = byId.get(id);
    const kind = kindOf(callFrame.url, callFrame.functionName);
    kinds.set(kind, (kinds.get(kind) ?? 0) + us);
    const name =
      `${callFrame.functionName || '(anonymous)'} ${callFrame.url ? `${basename(callFrame.url)}:${callFrame.lineNumber + 1}` : ''}`.trim();
    const entry = functions.get(name) ?? { us: 0, kind };
    entry.us += us;
    functions.set(name, entry);
  }
  const pct = (us) => `${((100 * us) / total).toFixed(1).padStart(5)}%`;
  console.log(`\n${basename(file)}: ${(total / 1e6).toFixed(2)} s sampled`);
  console.log('  by kind:');
  for (const [kind, us] of [...kinds].sort((a, b) => b[1] - a[1])) console.log(`    ${pct(us)}  ${kind}`);
  console.log(`  top ${TOP} functions by self time:`);
  for (const [name, { us, kind }] of [...functions].sort((a, b) => b[1].us - a[1].us).slice(0, TOP))
    console.log(`    ${pct(us)}  ${name}  [${kind}]`);
}
