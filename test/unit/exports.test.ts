import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import * as queuebox from '../../lib';

describe('public barrel', () => {
  it('exports the module, services, publisher, migration helpers and errors', () => {
    for (const name of [
      'QueueBoxModule',
      'OutboxService',
      'OutboxPoller',
      'LeaseService',
      'LeaseKeeper',
      'QueueBoxMetrics',
      'HttpPublisher',
      'ClientProxyPublisher',
      'parseDuration',
      'QueueBoxSchema1764460800000',
      'createQueueBoxMigration',
      'QueueBoxOperations1764633600000',
      'createQueueBoxOperationsMigration',
      'QueueBoxClaims1795996800000',
      'createQueueBoxClaimsMigration',
      'QueueBoxKeyCollation1796083200000',
      'createQueueBoxKeyCollationMigration',
      'QueueBoxClaimFunctions1796169600000',
      'createQueueBoxClaimFunctionsMigration',
      'QueueBoxInstances1796256000000',
      'createQueueBoxInstancesMigration',
      'QueueBoxClaimProbes1796342400000',
      'createQueueBoxClaimProbesMigration',
      'QueueBoxRateLimits1796428800000',
      'createQueueBoxRateLimitsMigration',
      'QueueBoxRenewals1796515200000',
      'createQueueBoxRenewalsMigration',
      'QueueBoxPauses1796601600000',
      'createQueueBoxPausesMigration',
      'QueueBoxAttempts1796688000000',
      'createQueueBoxAttemptsMigration',
      'QueueBoxUnkeyedClaims1796774400000',
      'createQueueBoxUnkeyedClaimsMigration',
      'QueueBoxKeyedClaims1796860800000',
      'createQueueBoxKeyedClaimsMigration',
      'QueueBoxClaimPlans1796947200000',
      'createQueueBoxClaimPlansMigration',
      'createQueueBoxMigrations',
      'QueueBoxAdmin',
      'createQueueBoxAdmin',
      'RetentionService',
      'QueueBoxAdminError',
      'renderSchemaSql',
      'QueueBoxError',
      'QueueBoxConfigError',
      'QueueBoxValidationError',
      'ClaimLostError',
      'PermanentPublishError',
      'PublishError',
      'QueueBoxStateError',
      'DuplicateMessageIdError',
      'HandlerTimeoutError',
      'TransactionLostError',
      'TransactionRequiredError',
      'SentRowsNotKeptError',
    ]) {
      assert.equal(typeof (queuebox as Record<string, unknown>)[name], 'function', `${name} is exported`);
    }
    assert.deepEqual(
      queuebox.QueueBoxMigrations.map((migration) => new migration().name),
      [
        'QueueBoxSchema1764460800000',
        'QueueBoxOperations1764633600000',
        'QueueBoxClaims1795996800000',
        'QueueBoxKeyCollation1796083200000',
        'QueueBoxClaimFunctions1796169600000',
        'QueueBoxInstances1796256000000',
        'QueueBoxClaimProbes1796342400000',
        'QueueBoxRateLimits1796428800000',
        'QueueBoxRenewals1796515200000',
        'QueueBoxPauses1796601600000',
        'QueueBoxAttempts1796688000000',
        'QueueBoxUnkeyedClaims1796774400000',
        'QueueBoxKeyedClaims1796860800000',
        'QueueBoxClaimPlans1796947200000',
      ],
      'QueueBoxMigrations lists every migration, in order',
    );
  });

  it('errors carry their type, code and a name', () => {
    const error = new queuebox.QueueBoxConfigError('outbox.batchSize', 'bad');
    assert.ok(error instanceof queuebox.QueueBoxError);
    assert.equal(error.name, 'QueueBoxConfigError');
    assert.equal(error.code, 'QUEUEBOX_CONFIG');
  });
});

describe('queuebox/testing entry point', () => {
  const root = join(__dirname, '..', '..', '..');
  const loaded = () => Object.keys(require.cache).filter((file) => /[\\/]lib[\\/]testing[\\/]/.test(file));

  it('is a separate export of the package, mapped to the built testing barrel', () => {
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
    assert.deepEqual(pkg.exports['./testing'], { types: './dist/testing/index.d.ts', default: './dist/testing/index.js' });
    // dist/ mirrors lib/: the export names the build of lib/testing/index.ts.
    assert.ok(existsSync(join(root, 'lib', 'testing', 'index.ts')));
  });

  it('is not loaded by the main entry point', () => {
    assert.ok(typeof queuebox.QueueBoxModule === 'function');
    assert.deepEqual(loaded(), []);
    for (const name of ['QueueBoxTesting', 'RecordingPublisher'])
      assert.equal(name in queuebox, false, `${name} is not in the main barrel`);
  });

  it('exports QueueBoxTesting and RecordingPublisher', () => {
    const testing = require('../../lib/testing') as Record<string, unknown>;
    assert.equal(typeof testing.QueueBoxTesting, 'function');
    assert.equal(typeof testing.RecordingPublisher, 'function');
    assert.ok(loaded().length > 0);
  });
});

describe('queuebox CLI entry point', () => {
  it('is the package bin, built from lib/cli/main.ts with a node shebang', () => {
    const root = join(__dirname, '..', '..', '..');
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
    assert.deepEqual(pkg.bin, { queuebox: 'dist/cli/main.js' });
    assert.match(readFileSync(join(root, 'lib', 'cli', 'main.ts'), 'utf8'), /^#!\/usr\/bin\/env node\n/);
    assert.match(
      readFileSync(join(__dirname, '..', '..', 'lib', 'cli', 'main.js'), 'utf8'),
      /^#!\/usr\/bin\/env node\n/,
      'tsc keeps the shebang',
    );
  });
});

describe('optional peers', () => {
  const root = join(__dirname, '..', '..', '..');
  /** The optional packages a fresh process loads when it requires `entry`. */
  const optionalPeersLoadedBy = (entry: string): string[] => {
    const script = `require(${JSON.stringify(entry)});
const peers = ['@nestjs/terminus', '@willsoto/nestjs-prometheus', 'prom-client', '@opentelemetry/api', '@nestjs/microservices', '@nestjs-cls/transactional', 'nestjs-cls'];
console.log(JSON.stringify(peers.filter((peer) => Object.keys(require.cache).some((file) => file.includes('/node_modules/' + peer + '/')))));`;
    return JSON.parse(execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' }));
  };

  it('the main entry point loads none of them (Terminus, Prometheus, OpenTelemetry, microservices)', () => {
    assert.deepEqual(optionalPeersLoadedBy(join(__dirname, '..', '..', 'lib', 'index.js')), []);
  });

  it('queuebox/terminus and queuebox/prometheus are separate exports that load their own peer', () => {
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
    assert.deepEqual(pkg.exports['./terminus'], { types: './dist/terminus/index.d.ts', default: './dist/terminus/index.js' });
    assert.deepEqual(pkg.exports['./prometheus'], { types: './dist/prometheus/index.d.ts', default: './dist/prometheus/index.js' });
    assert.ok(optionalPeersLoadedBy(join(__dirname, '..', '..', 'lib', 'terminus', 'index.js')).includes('@nestjs/terminus'));
    assert.ok(optionalPeersLoadedBy(join(__dirname, '..', '..', 'lib', 'prometheus', 'index.js')).includes('prom-client'));
  });
});
