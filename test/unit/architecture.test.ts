// The import rules of docs/architecture.md, checked on the sources: which part of lib/ may import
// which. A rule broken here is a design decision undone by accident; change the document first.
// Each rule is a function of an import graph, and each is red-checked below on a small graph that
// breaks it (as a contract suite keeps a broken implementation per rule): a rule that cannot fail
// proves nothing.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';

const root = join(__dirname, '..', '..', '..');
const lib = join(root, 'lib');
const architecture = readFileSync(join(root, 'docs', 'architecture.md'), 'utf8');

function sourcesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) return sourcesUnder(path);
    return entry.endsWith('.ts') ? [path] : [];
  });
}

/** One lib/ file (path relative to lib/, with `/`), what it imports (packages as named, lib/ files relative to lib/ without extension) and its text. */
interface Node {
  file: string;
  imports: string[];
  text: string;
}
type Graph = Node[];

/** The import graph of `paths` (lib/ files). */
const graphOf = (paths: string[]): Graph =>
  paths.map((path) => {
    const file = relative(lib, path).replaceAll('\\', '/');
    const text = readFileSync(path, 'utf8');
    const specifiers = [
      ...text.matchAll(
        /(?:^|\n)\s*(?:import|export)\b(?:[^'"]*?\bfrom\s+|\s+)'([^']+)'|\bimport\(\s*'([^']+)'\s*\)|\brequire\(\s*'([^']+)'\s*\)/g,
      ),
    ].map((match) => match[1] ?? match[2] ?? match[3]);
    // The front end names its modules as the browser loads them (`./views.js`).
    const imports = specifiers.map((specifier) =>
      specifier.startsWith('.')
        ? relative(lib, resolve(dirname(path), specifier))
            .replaceAll('\\', '/')
            .replace(/\.js$/, '')
        : specifier,
    );
    return { file, imports, text };
  });

const isFrontEnd = (path: string) => relative(lib, path).startsWith(join('dashboard', 'ui'));
/** The package's sources. The front end's (lib/dashboard/ui) run in the browser, import nothing of the package and are on no floor. */
const graph: Graph = graphOf(sourcesUnder(lib).filter((path) => !isFrontEnd(path)));
const frontEnd: Graph = graphOf(sourcesUnder(lib).filter(isFrontEnd));

/** A fixture graph: `file` imports `imports`, with `text` when the rule reads the source. */
const fixture = (...nodes: { file: string; imports?: string[]; text?: string }[]): Graph =>
  nodes.map((node) => ({ file: node.file, imports: node.imports ?? [], text: node.text ?? '' }));

const inFolder = (folder: string) => (file: string) => file.startsWith(`${folder}/`);
const isConcreteDialect = (path: string) => /^dialects\/[^/]+\//.test(path);
const withoutComments = (text: string) => text.replace(/\/\*[\s\S]*?\*\/|\/\/[^\n]*/g, '');

function breaches(g: Graph, from: (file: string) => boolean, forbidden: (imported: string) => boolean): string[] {
  return g
    .filter(({ file }) => from(file))
    .flatMap(({ file, imports }) => imports.filter(forbidden).map((imported) => `${file} imports ${imported}`));
}

/** The floors of docs/architecture.md's table: each part (a folder `x/` or a file `x.ts`) and its floor. */
function floorsOf(document: string): Map<string, number> {
  const floors = new Map<string, number>();
  for (const match of document.matchAll(/^\|\s*(\d+)\s*\|([^|]*)\|/gm)) {
    for (const part of match[2].matchAll(/`([^`]+)`/g)) floors.set(part[1], Number(match[1]));
  }
  return floors;
}

/** The parts of the worker floor that may import each other: `from → to` pairs listed in the document. */
function lateralsOf(document: string): Set<string> {
  const section = /## Import rules[\s\S]*?(?=\n## )/.exec(document)?.[0] ?? '';
  return new Set([...section.matchAll(/`([a-z]+\/) → ([a-z]+\/)`/g)].map((match) => `${match[1]}→${match[2]}`));
}

const FLOORS = floorsOf(architecture);
const LATERALS = lateralsOf(architecture);

/** The part of a lib/ path (`outbox/` for `outbox/outbox.poller`, `index.ts` for `index`), undefined for a package. */
function partOf(path: string, floors: Map<string, number>): string | undefined {
  const folder = path.includes('/') ? `${path.slice(0, path.indexOf('/'))}/` : undefined;
  if (folder && floors.has(folder)) return folder;
  const file = `${path.replace(/\.ts$/, '')}.ts`;
  return floors.has(file) ? file : undefined;
}

/**
 * Rule 5: no arrow up the floors, and none across the worker floor but the listed ones. Packages
 * (no part) are not arrows.
 */
function upwardArrows(g: Graph, floors: Map<string, number>, laterals: Set<string>): string[] {
  const workerFloor = floors.get('outbox/');
  return g.flatMap(({ file, imports }) => {
    const from = partOf(file, floors);
    if (from === undefined) return [`${file} is on no floor of docs/architecture.md`];
    return imports.flatMap((imported) => {
      if (!/^[a-z]/.test(imported) || imported.startsWith('node:') || imported.includes('@')) return [];
      const to = partOf(imported, floors);
      if (to === undefined || to === from) return [];
      const [a, b] = [floors.get(from) as number, floors.get(to) as number];
      if (b > a) return [`${file} (floor ${a}) imports ${imported} (floor ${b})`];
      if (a === b && a === workerFloor && !laterals.has(`${from}→${to}`)) return [`${file} imports ${imported} across the worker floor`];
      return [];
    });
  });
}

/**
 * Rule 7: no import circle, type imports included (a module of a circle cannot be read, or moved,
 * without the others). Each circle once, as `a → b → a`; `x` stands for `x/index` as Node resolves it.
 */
function importCircles(g: Graph): string[] {
  const ids = new Set(g.map(({ file }) => file.replace(/\.ts$/, '')));
  const edges = new Map(
    g.map(({ file, imports }) => [
      file.replace(/\.ts$/, ''),
      imports.map((imported) => (ids.has(imported) ? imported : `${imported}/index`)).filter((id) => ids.has(id)),
    ]),
  );
  const circles: string[] = [];
  const done = new Set<string>();
  const path: string[] = [];
  const visit = (id: string) => {
    path.push(id);
    for (const next of edges.get(id) ?? []) {
      const at = path.indexOf(next);
      if (at >= 0) circles.push([...path.slice(at), next].join(' → '));
      else if (!done.has(next)) visit(next);
    }
    path.pop();
    done.add(id);
  };
  for (const id of ids) if (!done.has(id)) visit(id);
  return circles;
}

const rules = {
  dialectsAreALeaf: (g: Graph) => {
    const allowed = /^(dialects\/|common\/|types\/|errors\/|texts\/queuebox\.messages$|wire-headers$|typeorm$|node:)/;
    return breaches(g, inFolder('dialects'), (imported) => imported.startsWith('@nestjs/') || !allowed.test(imported));
  },
  onlyDialectsImportAConcreteDialect: (g: Graph) => breaches(g, (file) => !file.startsWith('dialects/'), isConcreteDialect),
  fenceAndRuntimeKnowNoWorker: (g: Graph) =>
    breaches(
      g,
      (file) => inFolder('workers')(file) || inFolder('lease')(file),
      (imported) => /^(outbox|inbox|pull)\//.test(imported),
    ),
  fenceAndRuntimeNameNoWorker: (g: Graph) => {
    const worker = /outbox|inbox|relay|pull|poller/i;
    return g
      .filter(({ file }) => inFolder('workers')(file) || inFolder('lease')(file))
      .flatMap(({ file, text }) => {
        const exported = [
          ...withoutComments(text).matchAll(
            /\bexport\s+(?:declare\s+)?(?:abstract\s+)?(?:class|function|const|let|interface|type|enum)\s+(\w+)/g,
          ),
        ].map((match) => match[1]);
        return [file.slice(file.lastIndexOf('/') + 1), ...exported]
          .filter((name) => worker.test(name))
          .map((name) => `${file} names a worker: ${name}`);
      });
  },
  noDatabaseNameBranches: (g: Graph) => {
    const databaseName = /(?:===|!==|case)\s*'(?:postgres|mssql)'|'(?:postgres|mssql)'\s*(?:===|!==)/;
    return g.filter(({ file, text }) => !file.startsWith('dialects/') && databaseName.test(withoutComments(text))).map(({ file }) => file);
  },
  noDriverErrorCodes: (g: Graph) => {
    // SQLSTATEs and SQL Server error numbers QueueBox reads, and the driver error TypeORM wraps.
    const code =
      /\bdriverError\b|'(?:23505|23503|40001|40P01|3D000|28P01|28000|57P01|42P01|42883)'|\b(?:2627|2601|1205|1222|3960|18456)\b|'ELOGIN'/;
    const prose = /(^|\/)[a-z-]*\.?messages\.ts$/;
    return g
      .filter(({ file, text }) => !file.startsWith('dialects/') && !prose.test(file) && code.test(withoutComments(text)))
      .map(({ file }) => file);
  },
  noUpwardArrows: (g: Graph) => upwardArrows(g, FLOORS, LATERALS),
};

describe('architecture: import rules (docs/architecture.md)', () => {
  it('reads the imports of every lib/ file and the floors of the document (the rules below are not vacuous)', () => {
    assert.ok(
      graph.find(({ file }) => file === 'dialects/dialect.ts'),
      'lib/dialects/dialect.ts exists',
    );
    assert.ok(graph.length > 50, `found ${graph.length} files under lib/`);
    assert.ok(graph.some(({ imports }) => imports.includes('@nestjs/common')));
    assert.ok(graph.some(({ imports }) => imports.includes('dialects/dialect')));
    assert.ok(FLOORS.size >= 20, `found ${FLOORS.size} parts on the floors`);
    assert.ok(LATERALS.has('inbox/→outbox/'), 'the relay writes through the outbox writer');
  });

  for (const [name, rule] of Object.entries(rules)) {
    it(`rule ${name} holds for lib/`, () => {
      assert.deepEqual(rule(graph), []);
    });
  }

  it('rule importCircles holds for lib/ and its front end', () => {
    assert.ok(
      frontEnd.some(({ file }) => file === 'dashboard/ui/views.ts'),
      'the front end is read',
    );
    assert.deepEqual(importCircles([...graph, ...frontEnd]), []);
  });

  describe('each rule fails on a graph that breaks it', () => {
    it('importCircles: a view and the module of its section importing each other', () => {
      const broken = fixture(
        { file: 'dashboard/ui/views.ts', imports: ['dashboard/ui/failures'] },
        { file: 'dashboard/ui/failures.ts', imports: ['dashboard/ui/views'] },
      );
      assert.deepEqual(importCircles(broken), ['dashboard/ui/views → dashboard/ui/failures → dashboard/ui/views']);
      assert.notDeepEqual(importCircles(fixture({ file: 'a/index.ts', imports: ['a/b'] }, { file: 'a/b.ts', imports: ['a'] })), []);
    });

    const cases: [keyof typeof rules, Graph][] = [
      ['dialectsAreALeaf', fixture({ file: 'dialects/postgres/claims.sql.ts', imports: ['@nestjs/common'] })],
      ['dialectsAreALeaf', fixture({ file: 'dialects/sql-dialect.ts', imports: ['lease/lease.service'] })],
      ['onlyDialectsImportAConcreteDialect', fixture({ file: 'outbox/outbox.poller.ts', imports: ['dialects/postgres/claims.sql'] })],
      ['fenceAndRuntimeKnowNoWorker', fixture({ file: 'lease/lease.service.ts', imports: ['outbox/outbox.claims'] })],
      ['fenceAndRuntimeKnowNoWorker', fixture({ file: 'workers/claim-loop.ts', imports: ['pull/pull.worker'] })],
      ['fenceAndRuntimeNameNoWorker', fixture({ file: 'workers/inbox-followers.ts' })],
      ['fenceAndRuntimeNameNoWorker', fixture({ file: 'lease/lease-keeper.ts', text: 'export class PollerRenewals {}' })],
      ['noDatabaseNameBranches', fixture({ file: 'admin/queuebox.admin.ts', text: "if (dataSource.options.type === 'mssql') {}" })],
      ['noDriverErrorCodes', fixture({ file: 'outbox/outbox.service.ts', text: "if (error.code === '23505') {}" })],
      ['noDriverErrorCodes', fixture({ file: 'cli/connect.ts', text: 'const e = error.driverError;' })],
      ['noUpwardArrows', fixture({ file: 'lease/lease.service.ts', imports: ['workers/claim-loop'] })],
      ['noUpwardArrows', fixture({ file: 'common/wait.ts', imports: ['options/options.resolver'] })],
      ['noUpwardArrows', fixture({ file: 'pull/pull.worker.ts', imports: ['inbox/inbox.relay'] })],
      ['noUpwardArrows', fixture({ file: 'nowhere/new.ts' })],
    ];
    for (const [rule, broken] of cases) {
      it(`${rule}: ${broken[0].file}`, () => {
        const found = rule === 'noUpwardArrows' ? upwardArrows(broken, FLOORS, LATERALS) : rules[rule](broken);
        assert.notDeepEqual(found, [], `${rule} must fail on ${JSON.stringify(broken)}`);
      });
    }
    it('noUpwardArrows allows the listed lateral arrow', () => {
      assert.deepEqual(upwardArrows(fixture({ file: 'inbox/inbox.relay.ts', imports: ['outbox/outbox.writer'] }), FLOORS, LATERALS), []);
    });
  });

  it("the document's parts are the tree: every part exists, and every lib/ file is on a floor", () => {
    const missing = [...FLOORS.keys()].filter((part) => {
      const path = join(lib, part);
      try {
        return part.endsWith('/') ? !statSync(path).isDirectory() : !statSync(path).isFile();
      } catch {
        return true;
      }
    });
    assert.deepEqual(missing, [], 'parts the document names that do not exist');
    assert.deepEqual(
      graph.filter(({ file }) => partOf(file, FLOORS) === undefined).map(({ file }) => file),
      [],
      'files on no floor',
    );
  });

  it("the document's dialect folder list is each dialect folder's files", () => {
    const section = /## Adding a database[\s\S]*$/.exec(architecture)?.[0] ?? '';
    const shared = [
      ...(/A dialect folder has these files[\s\S]*?\n\n(?:- [^\n]*\n)+/.exec(section)?.[0] ?? '').matchAll(/^- `([^`]+)`/gm),
    ].map((match) => match[1]);
    assert.ok(shared.length > 10, `found ${shared.length} shared file names`);
    const own = [...section.matchAll(/`(postgres|sqlserver)\/([^`]+\.ts)`/g)].map((match) => `${match[1]}/${match[2]}`);
    for (const folder of ['postgres', 'sqlserver']) {
      const files = readdirSync(join(lib, 'dialects', folder)).filter((name) => name.endsWith('.ts'));
      const expected = shared.map((name) => name.replace('<name>', folder));
      assert.deepEqual(
        expected.filter((name) => !files.includes(name)),
        [],
        `${folder}: listed, not in the folder`,
      );
      assert.deepEqual(
        files.filter((name) => !expected.includes(name) && !own.includes(`${folder}/${name}`)),
        [],
        `${folder}: in the folder, not in the document`,
      );
    }
  });
});
