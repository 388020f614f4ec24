// Every ```ts (or ```typescript) block of README.md and docs/*.md is type-checked against the
// package's types, as a reader would paste it, by one TypeScript program for all of them; every
// ```js block is parsed. The conventions (docs/architecture.md#docs):
//   - A block is a module of its own: it imports what it uses. Its first line `// path/file.ts`
//     (or `.mts`) names its file, so the blocks of one page can import each other (README's quick start).
//   - `<!-- snippet: fragment -->` before a block: a fragment of an app. Its statements run inside an
//     async function (so top-level `await` and `return` work), after the PRELUDE below, which
//     declares what such a page takes for granted (`publisher`, `dataSource`, `manager`, the app's
//     own classes) and imports the names of Nest, TypeORM and QueueBox the fragment does not import
//     itself. Its imports from relative paths (`../src/app.module`) stand for the reader's own
//     files: the prelude declares what they give.
//   - `<!-- snippet: class-body -->`: members of a class (decorated methods), checked as a fragment
//     inside a class.
// `queuebox` and its subpaths resolve to lib/ through package.json's `exports`, so a block can only
// import what the package exports.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { Script } from 'node:vm';

const root = join(__dirname, '..', '..', '..');
const out = join(root, '.build', 'doc-snippets');

/** What fragments may use without importing: module name → names it gives. */
const PRELUDE_IMPORTS: Record<string, string[]> = {
  'node:assert/strict': ['default as assert'],
  'node:test': ['it', 'describe', 'before', 'after'],
  '@nestjs/common': [
    'CanActivate',
    'Controller',
    'ExecutionContext',
    'Get',
    'INestApplicationContext',
    'Injectable',
    'Module',
    'Type',
    'DynamicModule',
  ],
  '@nestjs/core': ['NestFactory'],
  '@nestjs/testing': ['Test'],
  '@nestjs/microservices': ['ClientProxy', 'Ctx', 'EventPattern', 'Payload', 'Transport'],
  '@nestjs/typeorm': ['TypeOrmModule'],
  typeorm: ['DataSource', 'EntityManager'],
  queuebox: [
    'ClientProxyPublisher',
    'createPullClient',
    'createQueueBoxAdmin',
    'HttpPublisher',
    'InboxMessage',
    'InboxService',
    'OutboxService',
    'Publisher',
    'PullBatchContext',
    'PullContext',
    'PullHandler',
    'QueueBoxAdmin',
    'QueueBoxMigrations',
    'QueueBoxModule',
    'QueueBoxSchema1764460800000',
  ],
  'queuebox/testing': ['QueueBoxTesting', 'RecordingPublisher'],
};

/** What the fragments' pages take for granted, declared once (the reader's app, and packages this repository does not install). */
const PRELUDE_DECLARATIONS = `
declare const publisher: RecordingPublisher; // a Publisher; docs/testing.md calls its failNext()
declare const dataSource: DataSource;
declare const manager: EntityManager;
declare const app: INestApplicationContext;
declare const inbox: InboxService;
declare const outbox: OutboxService;
declare const natsClient: ClientProxy;
declare const url: string;
declare const event: { id: string; orderId: string; amountCents: number };
declare const paymentId: string;
declare const amountCents: number;
declare const alerts: { notify(text: string): void };
declare const audit: { record(text: string): void };
declare class AppModule {}
declare class TestAppModule {}
declare class OrdersModule {}
declare class OperatorsGuard implements CanActivate { canActivate(context: ExecutionContext): boolean }
declare class Order { id: string; customerId: string; paid: boolean }
declare class Payment { id: string; amountCents: number }
declare class Invoice { number: string }
declare class AuditEntry { action: string }
declare class InvoiceRejected extends Error {}
declare class PaymentDeclinedError extends Error {}
declare class OrdersService { placeOrder(order: { customerId: string; item: string; amountCents: number }): Promise<{ id: string }> }
declare const orders: OrdersService;
declare const order: Order;
declare const qb: QueueBoxTesting;
declare function billingGot(orderIds: string[]): { item: string }[];
declare function close(): Promise<void>;
declare function startOrdersTestApp(): Promise<OrdersTestApp>;
interface OrdersTestApp { orders: { placeOrder(customerId: string, total: number): Promise<{ id: string }> }; qb: QueueBoxTesting; publisher: RecordingPublisher; close(): Promise<void> }
// @nestjs/config is not installed here: its two names as a reader's app uses them.
declare class ConfigService { getOrThrow<T = string>(key: string): T; get<T = string>(key: string): T | undefined }
declare const ConfigModule: DynamicModule;
`;

interface Block {
  document: string;
  /** Line of the block's first code line in the document (1-based). */
  line: number;
  lang: string;
  kind: 'module' | 'fragment' | 'class-body';
  code: string;
}

/** The ```ts, ```typescript and ```js blocks of a markdown text, with the snippet directive before each. */
function blocksOf(document: string, text: string): Block[] {
  const lines = text.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const fence = /^```(\w*)\s*$/.exec(lines[i]);
    if (!fence) continue;
    const end = lines.findIndex((line, j) => j > i && /^```\s*$/.test(line));
    const lang = fence[1];
    if (['ts', 'typescript', 'js'].includes(lang)) {
      let before = i - 1;
      while (before >= 0 && lines[before].trim() === '') before--;
      const directive = /^<!--\s*snippet:\s*([\w-]+)\s*-->$/.exec(lines[before]?.trim() ?? '')?.[1];
      if (directive !== undefined && directive !== 'fragment' && directive !== 'class-body') {
        throw new Error(`${document}:${before + 1}: unknown snippet directive "${directive}" (fragment or class-body)`);
      }
      blocks.push({
        document,
        line: i + 2,
        lang: lang === 'typescript' ? 'ts' : lang,
        kind: (directive as Block['kind'] | undefined) ?? 'module',
        code: lines.slice(i + 1, end).join('\n'),
      });
    }
    i = end;
  }
  return blocks;
}

/** One generated file: its text, and for each of its lines the document line it came from (0 for prelude lines). */
interface Generated {
  path: string;
  text: string;
  origin: number[];
  block: Block;
}

const IMPORT_LINE = /^import\s[\s\S]*?from\s+'([^']+)';?\s*$|^import\s+'([^']+)';?\s*$/;

/** The names an import statement binds. */
function importedNames(statement: string): string[] {
  const clause = /^import\s+(?:type\s+)?([\s\S]*?)\s+from\s/.exec(statement)?.[1] ?? '';
  const names: string[] = [];
  const braces = /\{([\s\S]*)\}/.exec(clause);
  if (braces) {
    for (const part of braces[1].split(',')) {
      const name = part.trim().replace(/^type\s+/, '');
      if (name) names.push(name.split(/\s+as\s+/).pop() as string);
    }
  }
  const outside = clause
    .replace(/\{[\s\S]*\}/, '')
    .replace(/,/g, ' ')
    .trim();
  for (const part of outside.split(/\s+/).filter(Boolean)) if (part !== '*' && part !== 'as') names.push(part);
  return names;
}

/** Splits a block's code into its import statements (possibly several lines each) and the rest, keeping each line's document line. */
function splitImports(block: Block): { imports: { text: string; lines: number[] }[]; body: { text: string; line: number }[] } {
  const lines = block.code.split('\n');
  const imports: { text: string; lines: number[] }[] = [];
  const body: { text: string; line: number }[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (/^import\s/.test(lines[i])) {
      let j = i;
      while (j < lines.length - 1 && !IMPORT_LINE.test(lines.slice(i, j + 1).join('\n'))) j++;
      imports.push({ text: lines.slice(i, j + 1).join('\n'), lines: lines.slice(i, j + 1).map((_, k) => block.line + i + k) });
      i = j;
    } else body.push({ text: lines[i], line: block.line + i });
  }
  return { imports, body };
}

/** The generated file of a block, inside the folder of its document. */
function generate(block: Block, index: number): Generated {
  const folder = block.document.replace(/\.md$/, '').replace(/[^\w/-]/g, '_');
  const named = /^\/\/ (\S+\.m?ts)\b/.exec(block.code)?.[1];
  const path = join(folder, named && block.kind === 'module' ? named : `snippet-${index}-line-${block.line}.ts`);
  if (block.kind === 'module') {
    const lines = block.code.split('\n');
    return { path, text: block.code, origin: lines.map((_, i) => block.line + i), block };
  }
  const { imports, body } = splitImports(block);
  const own = new Set<string>();
  const kept = imports.filter((statement) => {
    const specifier = IMPORT_LINE.exec(statement.text);
    const from = specifier?.[1] ?? specifier?.[2] ?? '';
    if (from.startsWith('.')) return false; // the reader's own file: the prelude declares its names
    for (const name of importedNames(statement.text)) own.add(name);
    return true;
  });
  const text: string[] = [];
  const origin: number[] = [];
  const add = (line: string, from = 0) => {
    text.push(line);
    origin.push(from);
  };
  for (const statement of kept) {
    for (const [k, line] of statement.text.split('\n').entries()) add(line, statement.lines[k]);
  }
  for (const [module, names] of Object.entries(PRELUDE_IMPORTS)) {
    const wanted = names.filter((name) => !own.has(name.split(' as ').pop() as string));
    if (wanted.length === 0) continue;
    const [defaults, named] = [wanted.filter((n) => n.startsWith('default as ')), wanted.filter((n) => !n.startsWith('default as '))];
    if (defaults.length > 0) add(`import ${defaults[0].slice('default as '.length)} from '${module}';`);
    if (named.length > 0) add(`import { ${named.join(', ')} } from '${module}';`);
  }
  for (const line of PRELUDE_DECLARATIONS.trim().split('\n')) add(line);
  add('export {};');
  add('async function snippet() {');
  if (block.kind === 'class-body') add('class Snippet {');
  for (const line of body)
    add(line.text.replace(/^export (?=(default )?(class|const|function|async|interface|type|enum)\b)/, ''), line.line);
  if (block.kind === 'class-body') add('}');
  add('}');
  add('void snippet;');
  return { path, text: text.join('\n'), origin, block };
}

/** Type-checks the generated files with one tsc program; returns each error as `document:line: message`. */
function typeCheck(files: Generated[]): { errors: string[]; output: string } {
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { exports: Record<string, { types?: string } | string> };
  const paths: Record<string, string[]> = {};
  for (const [subpath, target] of Object.entries(pkg.exports)) {
    if (typeof target === 'string' || !target.types) continue;
    const source = target.types.replace(/^\.\/dist\//, 'lib/').replace(/\.d\.ts$/, '.ts');
    paths[join('queuebox', subpath).replace(/\\/g, '/')] = [relative(out, join(root, source)).replace(/\\/g, '/')];
  }
  writeFileSync(join(out, 'package.json'), JSON.stringify({ private: true, type: 'module' }));
  writeFileSync(
    join(out, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'es2022',
        lib: ['es2023'],
        module: 'nodenext',
        moduleResolution: 'nodenext',
        strict: true,
        experimentalDecorators: true,
        emitDecoratorMetadata: true,
        noEmit: true,
        skipLibCheck: true,
        types: ['node'],
        paths,
      },
      include: ['**/*.ts', '**/*.mts'],
    }),
  );
  for (const file of files) {
    mkdirSync(dirname(join(out, file.path)), { recursive: true });
    writeFileSync(join(out, file.path), file.text);
  }
  const tsc = spawnSync(
    process.execPath,
    [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(out, 'tsconfig.json'), '--pretty', 'false'],
    {
      cwd: out,
      encoding: 'utf8',
      timeout: 120_000,
    },
  );
  const output = `${tsc.stdout}${tsc.stderr}`;
  const byPath = new Map(files.map((file) => [join(out, file.path), file]));
  const errors: string[] = [];
  for (const line of output.split('\n')) {
    const diagnostic = /^(.+?)\((\d+),(\d+)\): error (TS\d+): (.*)$/.exec(line);
    if (!diagnostic) {
      if (line.startsWith(' ') && errors.length > 0) errors[errors.length - 1] += ` ${line.trim()}`;
      else if (line.trim() !== '') errors.push(`tsc: ${line}`);
      continue;
    }
    const file = byPath.get(join(out, diagnostic[1]));
    const where = file
      ? `${file.block.document}:${file.origin[Number(diagnostic[2]) - 1] || `${file.block.line} (prelude line ${diagnostic[2]})`}`
      : `${diagnostic[1]}:${diagnostic[2]}`;
    errors.push(`${where}: ${diagnostic[4]} ${diagnostic[5]}`);
  }
  if (tsc.status !== 0 && errors.length === 0) errors.push(`tsc exited ${tsc.status}: ${output || tsc.error?.message}`);
  return { errors, output };
}

const documents = [
  'README.md',
  ...readdirSync(join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
];

/** A page with one mistake of each kind, checked in the same program as the real docs. */
const FIXTURE = [
  '# Fixture',
  '',
  '```ts',
  "import { QueueBoxModule } from 'queuebox';",
  "QueueBoxModule.forRoot({ outbox: { pollIntervalMs: 'often' } });",
  '```',
  '',
  '<!-- snippet: fragment -->',
  '```ts',
  'const x: number = publisher;',
  'await orders.placeOrder({ customerId: 1 });',
  '```',
  '',
  '```ts',
  "import { QueueBoxTesting } from 'queuebox/internal';",
  'missingName();',
  '```',
].join('\n');

describe('every TypeScript snippet of README.md and docs/ compiles against the package', () => {
  const blocks = documents.flatMap((document) => blocksOf(document, readFileSync(join(root, document), 'utf8')));
  const fixture = blocksOf('docs/__fixture__.md', FIXTURE);

  it('finds the blocks (the check is not vacuous)', () => {
    const ts = blocks.filter((b) => b.lang === 'ts');
    assert.ok(ts.length >= 35, `found ${ts.length} TypeScript blocks`);
    assert.ok(new Set(ts.map((b) => b.document)).size >= 12, 'blocks of most pages');
    assert.ok(ts.some((b) => b.kind === 'fragment') && ts.some((b) => b.kind === 'module'));
  });

  it('type-checks them all in one program; a mistake is reported at its document line', () => {
    const ts = [...blocks, ...fixture].filter((b) => b.lang === 'ts');
    const files = ts.map((block, i) => generate(block, i));
    const paths = files.map((file) => file.path);
    assert.deepEqual(
      paths.filter((path, i) => paths.indexOf(path) !== i),
      [],
      'two blocks of one page name the same file',
    );
    const started = Date.now();
    const { errors } = typeCheck(files);
    const took = Date.now() - started;
    const [ours, docs] = [
      errors.filter((e) => e.startsWith('docs/__fixture__.md:')),
      errors.filter((e) => !e.startsWith('docs/__fixture__.md:')),
    ];
    assert.deepEqual(docs, [], `${docs.length} snippet error(s):\n${docs.join('\n')}`);
    // The fixture's mistakes, each at its line: a wrong option type, a wrong prelude type, a wrong
    // argument, an import the package does not export, an undeclared name.
    assert.deepEqual(
      ours.map((e) => e.replace(/: (TS\d+) .*/, ': $1')),
      [
        'docs/__fixture__.md:5: TS2322',
        'docs/__fixture__.md:10: TS2322',
        'docs/__fixture__.md:11: TS2322',
        'docs/__fixture__.md:15: TS2307',
        'docs/__fixture__.md:16: TS2304',
      ],
      ours.join('\n'),
    );
    console.log(
      `doc snippets: ${ts.length - fixture.length} TypeScript blocks of ${new Set(blocks.map((b) => b.document)).size} pages type-checked in ${took} ms`,
    );
  });

  it('parses every ```js block', () => {
    for (const block of blocks.filter((b) => b.lang === 'js')) {
      assert.doesNotThrow(() => new Script(block.code, { filename: `${block.document}:${block.line}` }), `${block.document}:${block.line}`);
    }
  });
});
