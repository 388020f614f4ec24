import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import type { VerifyCheckName } from '../../lib/cli/verify/verify.checks';
import type { VerifyDefect, VerifyOptions } from '../../lib/cli/verify/verify.options';
import type { VerifyReport } from '../../lib/cli/verify/verify.report';
import { runVerify, VERIFY_DEFECT_ENV } from '../../lib/testing';
import { testDatabases } from '../support/database';

// `queuebox verify` catches what it is for: each run below puts one defect into its own worker
// processes (QUEUEBOX_VERIFY_DEFECT, its self-test hook: the Dialect instance's methods wrapped
// in the worker, nothing of lib/'s code paths changed) and must FAIL, with the check that the
// defect breaks. Through the API (`runVerify` of queuebox/testing), on PostgreSQL. The same runs
// without a defect pass (test/e2e/verify.test.ts runs every scenario).

const statusOf = (report: VerifyReport, name: VerifyCheckName) => report.checks.find((check) => check.name === name);

/** The report's lines, for the test's log and its assertion messages. */
const summary = (report: VerifyReport) =>
  report.checks.map((check) => `${check.status} ${check.name}: ${check.figure}\n  ${check.failures.slice(0, 3).join('\n  ')}`).join('\n');

describe('queuebox verify catches a defect put into its workers (self-test)', () => {
  const newDatabase = testDatabases();
  afterEach(() => {
    delete process.env[VERIFY_DEFECT_ENV];
  });

  async function runWith(defect: VerifyDefect, options: Omit<VerifyOptions, 'url'>): Promise<VerifyReport> {
    const db = await newDatabase({ migrate: false });
    process.env[VERIFY_DEFECT_ENV] = defect;
    const report = await runVerify({ url: db.url, workers: 2, ...options });
    assert.equal(report.defect, defect, 'the report says the run was sabotaged');
    assert.equal(report.verdict, 'FAIL', summary(report));
    assert.equal(report.tablesDropped, true);
    return report;
  }

  it('fence-off (a lost claim carries on as if it held): paused past their lease, pull handlers and relay forwards commit a second time: duplicates FAIL', {
    timeout: 180_000,
  }, async (t) => {
    const report = await runWith('fence-off', { seconds: 10, rate: 24, slowPercent: 20, scenarios: ['pause'] });
    t.diagnostic(summary(report));
    const duplicates = statusOf(report, 'duplicates');
    assert.equal(duplicates?.status, 'FAIL', summary(report));
    assert.ok(
      duplicates?.failures.some((failure) => /was handled \d+ times|was forwarded \d+ times/.test(failure)),
      duplicates?.failures.join('\n'),
    );
  });

  it('renewal-off (renewals report success without running): pull handlers longer than the lease lose it on every attempt and die: lost FAIL', {
    timeout: 180_000,
  }, async (t) => {
    const report = await runWith('renewal-off', { seconds: 8, rate: 24, slowPercent: 15, leaseMs: 1500, scenarios: [], drainSeconds: 20 });
    t.diagnostic(summary(report));
    const lost = statusOf(report, 'lost');
    assert.equal(lost?.status, 'FAIL', summary(report));
    assert.ok(
      lost?.failures.some((failure) =>
        /^pull-\S+ was never delivered; its inbox row is dead after \d+ attempts \(lease expired/.test(failure),
      ),
      lost?.failures.join('\n'),
    );
  });

  it('followers-skip (the followers read passes over the row behind each head): a later row of an aggregate is handled first: order FAIL', {
    timeout: 180_000,
  }, async (t) => {
    const report = await runWith('followers-skip', { seconds: 8, slowPercent: 15, scenarios: [] });
    t.diagnostic(summary(report));
    const order = statusOf(report, 'order');
    assert.equal(order?.status, 'FAIL', summary(report));
    assert.ok(
      order?.failures.every((failure) =>
        /^(batch|relay)-\S+ was first delivered before (batch|relay)-\S+, which had committed before/.test(failure),
      ),
      order?.failures.join('\n'),
    );
    for (const name of ['lost', 'duplicates', 'stuck'] as const) assert.equal(statusOf(report, name)?.status, 'PASS', summary(report));
  });

  it('pauses-off (the workers read no pause): rows of a destination and a source paused through the admin are claimed: paused FAIL', {
    timeout: 180_000,
  }, async (t) => {
    const report = await runWith('pauses-off', { seconds: 8, scenarios: ['admin-pause'] });
    t.diagnostic(summary(report));
    const paused = statusOf(report, 'paused');
    assert.equal(paused?.status, 'FAIL', summary(report));
    assert.ok(
      paused?.failures.some((failure) =>
        /^destination "verify\.outbox" was paused, yet \d+ rows? of it (was|were) claimed/.test(failure),
      ) && paused?.failures.some((failure) => /^source "verify\.relay" was paused, yet \d+ rows? of it (was|were) claimed/.test(failure)),
      paused?.failures.join('\n'),
    );
    for (const name of ['lost', 'order', 'stuck'] as const) assert.equal(statusOf(report, name)?.status, 'PASS', summary(report));
  });
});
