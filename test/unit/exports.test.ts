import assert from 'node:assert/strict';
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
      'renderSchemaSql',
      'QueueBoxError',
      'QueueBoxConfigError',
      'QueueBoxValidationError',
      'ClaimLostError',
      'PermanentPublishError',
      'PublishError',
      'QueueBoxStateError',
    ]) {
      assert.equal(typeof (queuebox as Record<string, unknown>)[name], 'function', `${name} is exported`);
    }
  });

  it('errors carry their type, code and a name', () => {
    const error = new queuebox.QueueBoxConfigError('outbox.batchSize', 'bad');
    assert.ok(error instanceof queuebox.QueueBoxError);
    assert.equal(error.name, 'QueueBoxConfigError');
    assert.equal(error.code, 'QUEUEBOX_CONFIG');
  });
});
