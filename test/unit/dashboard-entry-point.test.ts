import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';

const root = join(__dirname, '..', '..', '..');
const loaded = () => Object.keys(require.cache).filter((file) => /[\\/]lib[\\/]dashboard[\\/]/.test(file));

describe('queuebox/dashboard entry point', () => {
  it('is a separate export of the package, mapped to the built dashboard barrel (typesVersions too, as every subpath)', () => {
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
    assert.deepEqual(pkg.exports['./dashboard'], { types: './dist/dashboard/index.d.ts', default: './dist/dashboard/index.js' });
    // moduleResolution node10 reads no exports: typesVersions maps each subpath to the same types (test/package/node10.test.mjs).
    for (const [subpath, target] of Object.entries(pkg.exports as Record<string, { types?: string }>)) {
      if (subpath === '.' || !target.types) continue;
      assert.deepEqual(pkg.typesVersions['*'][subpath.slice(2)], [target.types], `typesVersions of ${subpath}`);
    }
    assert.deepEqual(pkg.dependencies ?? {}, {}, 'the dashboard adds no runtime dependency');
  });

  it('is not loaded by the main entry point: an app that does not import it loads none of it', () => {
    const main = require('../../lib') as Record<string, unknown>;
    assert.equal(typeof main.QueueBoxModule, 'function');
    assert.equal('QueueBoxDashboardModule' in main, false);
    assert.deepEqual(loaded(), []);
  });

  it('exports QueueBoxDashboardModule and finds its built page files', () => {
    const dashboard = require('../../lib/dashboard') as Record<string, unknown>;
    assert.equal(typeof dashboard.QueueBoxDashboardModule, 'function');
    assert.equal(dashboard.DASHBOARD_TOKEN_HEADER, 'X-QueueBox-Dashboard-Token');
    const { loadDashboardAssets } =
      require('../../lib/dashboard/dashboard.assets') as typeof import('../../lib/dashboard/dashboard.assets');
    assert.deepEqual([...loadDashboardAssets().keys()].sort(), [
      'api.js',
      'chart.js',
      'dashboard.css',
      'dom.js',
      'failures.js',
      'history.js',
      'icon.svg',
      'main.js',
      'messages.js',
      'pauses.js',
      'sort.js',
      'view-parts.js',
      'views.js',
      'warnings.js',
    ]);
  });
});
