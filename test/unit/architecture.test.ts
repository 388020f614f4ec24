// The import rules of docs/architecture.md, checked on the sources: which part of lib/ may import
// which. A rule broken here is a design decision undone by accident; change the document first.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';

const root = join(__dirname, '..', '..', '..');
const lib = join(root, 'lib');

function sourcesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) return sourcesUnder(path);
    return entry.endsWith('.ts') ? [path] : [];
  });
}

/** Each file of lib/ (path relative to lib/, with `/`) and what it imports: packages as named, lib/ files relative to lib/ without extension. */
const graph = sourcesUnder(lib).map((path) => {
  const file = relative(lib, path).replaceAll('\\', '/');
  const text = readFileSync(path, 'utf8');
  const specifiers = [
    ...text.matchAll(
      /(?:^|\n)\s*(?:import|export)\b(?:[^'"]*?\bfrom\s+|\s+)'([^']+)'|\bimport\(\s*'([^']+)'\s*\)|\brequire\(\s*'([^']+)'\s*\)/g,
    ),
  ].map((match) => match[1] ?? match[2] ?? match[3]);
  const imports = specifiers.map((specifier) =>
    specifier.startsWith('.') ? relative(lib, resolve(dirname(path), specifier)).replaceAll('\\', '/') : specifier,
  );
  return { file, imports, text };
});

function breaches(from: (file: string) => boolean, forbidden: (imported: string) => boolean): string[] {
  return graph
    .filter(({ file }) => from(file))
    .flatMap(({ file, imports }) => imports.filter(forbidden).map((imported) => `${file} imports ${imported}`));
}

const inFolder = (folder: string) => (file: string) => file.startsWith(`${folder}/`);
const isConcreteDialect = (path: string) => /^dialects\/[^/]+\//.test(path);

describe('architecture: import rules (docs/architecture.md)', () => {
  it('reads the imports of every lib/ file (the rules below are not vacuous)', () => {
    const seam = graph.find(({ file }) => file === 'dialects/dialect.ts');
    assert.ok(seam, 'lib/dialects/dialect.ts exists');
    assert.ok(graph.length > 50, `found ${graph.length} files under lib/`);
    assert.ok(
      graph.some(({ imports }) => imports.includes('@nestjs/common')),
      'some file imports @nestjs/common',
    );
    assert.ok(
      graph.some(({ imports }) => imports.includes('dialects/dialect')),
      'some file imports the dialect seam',
    );
  });

  it('lib/dialects imports no Nest package and nothing of lib/ beyond common, types, errors, messages and wire headers', () => {
    const allowed = /^(dialects\/|common\/|types\/|errors\/|queuebox\.messages$|wire-headers$|typeorm$|node:)/;
    assert.deepEqual(
      breaches(inFolder('dialects'), (imported) => imported.startsWith('@nestjs/') || !allowed.test(imported)),
      [],
    );
  });

  it('only lib/dialects imports a concrete dialect (postgres/, sqlserver/): everything else goes through the seam and the registry', () => {
    assert.deepEqual(
      breaches((file) => !file.startsWith('dialects/'), isConcreteDialect),
      [],
    );
  });

  it('the worker runtime and the fence (lib/workers, lib/lease) know no worker message: they import nothing of outbox, inbox or pull', () => {
    assert.deepEqual(
      breaches(
        (file) => inFolder('workers')(file) || inFolder('lease')(file),
        (imported) => /^(outbox|inbox|pull)\//.test(imported),
      ),
      [],
    );
  });

  it('nothing outside lib/dialects branches on a database name', () => {
    const databaseName = /(?:===|!==|case)\s*'(?:postgres|mssql)'|'(?:postgres|mssql)'\s*(?:===|!==)/;
    const branching = graph
      .filter(({ file }) => !file.startsWith('dialects/'))
      .filter(({ text }) => databaseName.test(text.replace(/\/\*[\s\S]*?\*\/|\/\/[^\n]*/g, '')))
      .map(({ file }) => file);
    assert.deepEqual(branching, []);
  });
});
