// The Node.js floor: one start-up warning naming the running and the supported versions when the
// process runs below `engines.node`, and nothing at all on a supported line.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { nodeVersionSupported } from '../../lib/common/node-version';

const root = join(__dirname, '..', '..', '..');
const engines = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { engines: { node: string } }).engines.node;

/** Makes a registry (as every application's start does) twice in a child process whose `process.version` is `version`. */
function startUpLogs(version: string): string {
  const registry = join(root, '.build', 'lib', 'core', 'queuebox.registry.js');
  const script = `Object.defineProperty(process, 'version', { value: ${JSON.stringify(version)} });
const { QueueBoxRegistry } = require(${JSON.stringify(registry)});
new QueueBoxRegistry(); new QueueBoxRegistry();`;
  return execFileSync(process.execPath, ['-e', script], { encoding: 'utf8', env: { ...process.env, NO_COLOR: '1' } });
}

describe('Node.js floor', () => {
  it('reads the engines forms package.json uses', () => {
    assert.equal(engines, '^22.12.0 || >=24.0.0');
    for (const supported of ['v22.12.0', 'v22.20.1', 'v24.0.0', 'v26.12.1', 'v30.1.0'])
      assert.equal(nodeVersionSupported(supported, engines), true, supported);
    for (const below of ['v20.11.1', 'v18.20.0', 'v22.11.0', 'v23.4.0']) assert.equal(nodeVersionSupported(below, engines), false, below);
    assert.equal(nodeVersionSupported('v20.0.0', '20.0.0'), true);
    assert.equal(nodeVersionSupported('v20.0.0', '~21.1'), true, 'a form it does not read never warns');
  });

  it('warns once at start-up below the floor, naming both versions, and runs on', () => {
    const logs = startUpLogs('v20.11.1');
    const warnings = logs.split('\n').filter((line) => line.includes('outside the versions it supports'));
    assert.equal(warnings.length, 1, logs);
    assert.match(warnings[0], /WARN/);
    assert.ok(warnings[0].includes('v20.11.1') && warnings[0].includes(engines), warnings[0]);
  });

  it('says nothing on a supported line', () => {
    assert.equal(startUpLogs('v22.12.0').trim(), '');
    assert.equal(startUpLogs(process.version).trim(), '');
  });
});
