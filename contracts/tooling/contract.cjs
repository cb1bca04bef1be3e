#!/usr/bin/env node
// The event contract's checks, run by scripts/contract-check.sh (which installs the
// pinned packages of package-lock.json and sets NODE_PATH to them).
//
//   node contract.cjs validate FILE...        AsyncAPI documents, with the official parser
//   node contract.cjs generate [--check]      each version's two JSON Schemas from its
//                                             document (asyncapi.yaml, asyncapi-v2.yaml)
//   node contract.cjs messages                each document's examples and case table,
//                                             against its two generated schemas (ajv)
//   node contract.cjs compat RELEASED CURRENT fails on a change the evolution rules forbid
//
// Exit status: 0 when every check passed, 1 when one failed, 2 on a usage error.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const yaml = require('js-yaml');

const CONTRACTS = path.resolve(__dirname, '..');
const PAYLOAD_SCHEMA = 'BookingExpiredPayload';

// One entry per major version of the contract: its AsyncAPI document (the single
// source of that version), the two schemas generated from it and its case table.
const VERSIONS = [1, 2].map((major) => ({
  major,
  topic: `pin.crm.booking-expired.v${major}`,
  source: path.join(CONTRACTS, major === 1 ? 'asyncapi.yaml' : `asyncapi-v${major}.yaml`),
  producer: path.join(CONTRACTS, `booking-expired.v${major}.schema.json`),
  consumer: path.join(CONTRACTS, `booking-expired.v${major}.consumer.schema.json`),
  cases: path.join(CONTRACTS, major === 1 ? 'validation-cases.json' : `validation-cases-v${major}.json`),
}));

// ---------------------------------------------------------------------------------
// AsyncAPI parsing

// Parses an AsyncAPI document; returns { document, errors, warnings }. `document` is
// undefined when the parser found errors.
let parser;
async function parse(text, source) {
  const { Parser, DiagnosticSeverity } = require('@asyncapi/parser');
  parser = parser || new Parser();
  const { document, diagnostics } = await parser.parse(text, { source });
  const show = (d) => `${source}: ${d.path.join('/') || '(root)'}: ${d.message} [${d.code}]`;
  const errors = diagnostics.filter((d) => d.severity === DiagnosticSeverity.Error).map(show);
  const warnings = diagnostics.filter((d) => d.severity !== DiagnosticSeverity.Error).map(show);
  return { document, errors, warnings };
}

// The released documents (contracts/released/) are frozen copies of what consumers
// were given, at the AsyncAPI version of their release (3.0.0): the parser's advice to
// move to its latest version does not apply to them, and moving them would make them
// no longer what was released. That one warning is silenced for them, and said once.
const FROZEN_WARNINGS = ['asyncapi-latest-version'];
const isReleased = (file) => path.resolve(file).startsWith(path.join(CONTRACTS, 'released') + path.sep);

async function validate(files) {
  let failed = false;
  for (const file of files) {
    const parsed = await parse(fs.readFileSync(file, 'utf8'), file);
    const { document, errors } = parsed;
    let { warnings } = parsed;
    if (isReleased(file)) {
      const frozen = warnings.filter((w) => FROZEN_WARNINGS.some((code) => w.endsWith(`[${code}]`)));
      warnings = warnings.filter((w) => !frozen.includes(w));
      if (frozen.length) {
        console.log(`${file}: a released document, kept at its release's AsyncAPI version (not the latest: ${FROZEN_WARNINGS.join(', ')} silenced)`);
      }
    }
    for (const w of warnings) console.error(`warning: ${w}`);
    for (const e of errors) console.error(`error: ${e}`);
    if (!document || errors.length > 0) {
      failed = true;
      console.error(`${file}: NOT a valid AsyncAPI document`);
    } else {
      console.log(`${file}: valid AsyncAPI ${document.version()}`);
    }
  }
  return failed ? 1 : 0;
}

// ---------------------------------------------------------------------------------
// The two schemas, generated from the payload schema of asyncapi.yaml

// `x-producer-only: [keyword, ...]` on a schema node names keywords that bind the
// producer only. The producer schema keeps them (and the annotation, which JSON Schema
// validators ignore, so the consumer schema can be derived from the producer file
// alone); the consumer schema drops them and the annotation.
function derive(node, forConsumer) {
  if (Array.isArray(node)) return node.map((n) => derive(n, forConsumer));
  if (node === null || typeof node !== 'object') return node;
  const dropped = forConsumer ? new Set(node['x-producer-only'] || []) : new Set();
  const out = {};
  for (const [k, v] of Object.entries(node)) {
    if (forConsumer && (k === 'x-producer-only' || dropped.has(k))) continue;
    out[k] = derive(v, forConsumer);
  }
  return out;
}

function payloadSource(version) {
  const doc = yaml.load(fs.readFileSync(version.source, 'utf8'));
  const schema = doc.components && doc.components.schemas && doc.components.schemas[PAYLOAD_SCHEMA];
  if (!schema) throw new Error(`${version.source} has no components.schemas.${PAYLOAD_SCHEMA}`);
  return schema;
}

function schemas(version) {
  const source = payloadSource(version);
  const { major, topic } = version;
  const head = (id, title, description) => ({
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    $id: id,
    title,
    description,
  });
  const body = (s) => {
    const copy = { ...s };
    delete copy.title;
    delete copy.description;
    return copy;
  };
  const generated =
    `Generated from contracts/${path.basename(version.source)} (components.schemas.BookingExpiredPayload) ` +
    'by scripts/contract-check.sh: do not edit by hand.';
  const producer = {
    ...head(
      `urn:pin:crm:booking-expired:v${major}:producer`,
      `BookingExpiredEvent v${major}: producer schema (strict)`,
      `Exactly what booking-expire publishes on ${topic}. Consumers ` +
        `must NOT validate with this schema: use booking-expired.v${major}.consumer.schema.json. ` +
        'Formats (uuid, date-time) are meant to be asserted. ' + generated,
    ),
    ...body(derive(source, false)),
  };
  const consumer = {
    ...head(
      `urn:pin:crm:booking-expired:v${major}:consumer`,
      `BookingExpiredEvent v${major}: consumer schema (tolerant)`,
      `What a consumer of ${topic} must accept under the evolution ` +
        'rules: unknown Phase values and unknown extra fields pass; a missing or mistyped ' +
        'required field fails. Formats (uuid, date-time) are meant to be asserted. ' + generated,
    ),
    ...body(derive(source, true)),
  };
  return { producer, consumer };
}

function render(schema) {
  return JSON.stringify(schema, null, 2) + '\n';
}

function generate(check) {
  let stale = false;
  const files = VERSIONS.flatMap((version) => {
    const { producer, consumer } = schemas(version);
    return [[version.producer, producer], [version.consumer, consumer]];
  });
  for (const [file, schema] of files) {
    const want = render(schema);
    const have = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : null;
    if (have === want) {
      console.log(`${path.relative(CONTRACTS, file)}: up to date`);
    } else if (check) {
      stale = true;
      console.error(
        `${path.relative(CONTRACTS, file)} is not what its AsyncAPI document generates: ` +
          'run scripts/contract-check.sh --write and commit the result',
      );
    } else {
      fs.writeFileSync(file, want);
      console.log(`${path.relative(CONTRACTS, file)}: written`);
    }
  }
  return stale ? 1 : 0;
}

// ---------------------------------------------------------------------------------
// Messages against the schemas

function validators(version) {
  const Ajv2020 = require('ajv/dist/2020').default;
  const addFormats = require('ajv-formats').default;
  const compile = (file) => {
    // strict mode off: the producer schema carries the x-producer-only annotation.
    const ajv = new Ajv2020({ allErrors: true, strict: false, validateFormats: true });
    addFormats(ajv, { mode: 'full', formats: ['date-time', 'uuid'] });
    return ajv.compile(JSON.parse(fs.readFileSync(file, 'utf8')));
  };
  return { producer: compile(version.producer), consumer: compile(version.consumer) };
}

function messages() {
  let failed = 0;
  let checked = 0;
  for (const version of VERSIONS) {
    const v = validators(version);
    const expect = (name, payload, want) => {
      for (const side of ['producer', 'consumer']) {
        const ok = v[side](payload);
        checked += 1;
        if (ok !== want[side]) {
          failed += 1;
          const why = ok ? 'passed' : `failed: ${v[side].errors.map((e) => `${e.instancePath} ${e.message}`).join('; ')}`;
          console.error(`v${version.major} ${name}: the ${side} schema should ${want[side] ? 'accept' : 'reject'} it but ${why}`);
        }
      }
    };
    // Every example of every message must be a valid message of today's producer.
    const source = path.basename(version.source);
    const doc = yaml.load(fs.readFileSync(version.source, 'utf8'));
    for (const [name, message] of Object.entries(doc.components.messages)) {
      for (const example of message.examples || []) {
        expect(`${source} example ${name}/${example.name}`, example.payload, { producer: true, consumer: true });
      }
    }
    const table = JSON.parse(fs.readFileSync(version.cases, 'utf8'));
    for (const c of table.cases) {
      expect(`${path.basename(version.cases)} "${c.name}"`, c.payload, { producer: c.producer, consumer: c.consumer });
    }
  }
  console.log(`${checked - failed} passed, ${failed} failed`);
  return failed ? 1 : 0;
}

// ---------------------------------------------------------------------------------
// Compatibility with the released contract

// @asyncapi/diff classifies changes by JSON pointer; everything under a payload or a
// schema is "unclassified" in its standard. These overrides write the contract's
// evolution rules down for the places a schema can appear in the dereferenced
// document. An unclassified change fails too: classify it here first.
const SCHEMA_ROOTS = [
  '/channels/*/messages/*/payload',
  '/channels/*/messages/*/headers',
  '/operations/*/messages/*/payload',
  '/operations/*/messages/*/headers',
  '/operations/*/channel/messages/*/payload',
  '/operations/*/channel/messages/*/headers',
  '/components/messages/*/payload',
  '/components/messages/*/headers',
  '/components/schemas/*',
];
const EXAMPLE_ROOTS = [
  '/channels/*/messages/*',
  '/operations/*/messages/*',
  '/operations/*/channel/messages/*',
  '/components/messages/*',
];
const BREAKING = { add: 'breaking', remove: 'breaking', edit: 'breaking' };
const DOCS = { add: 'non-breaking', remove: 'non-breaking', edit: 'non-breaking' };

function compatOverrides() {
  const o = {
    '/components/schemas': { add: 'non-breaking', remove: 'breaking', edit: 'breaking' },
    '/components/messages': { add: 'non-breaking', remove: 'breaking', edit: 'breaking' },
    '/components/messages/*': { add: 'non-breaking', remove: 'breaking', edit: 'breaking' },
    // @asyncapi/diff finds a rule only through rules for every shorter prefix.
    '/operations/*/channel/messages': BREAKING,
    '/operations/*/channel/messages/*': BREAKING,
    '/channels/*/x-partitioning': BREAKING,
    '/channels/*/x-partitioning/*': BREAKING,
    '/info/description': DOCS,
    '/info/version': DOCS,
  };
  for (const root of SCHEMA_ROOTS) {
    Object.assign(o, {
      [root]: BREAKING,
      [`${root}/title`]: DOCS,
      [`${root}/description`]: DOCS,
      // The set of fields: a new optional field is additive; removing or renaming one
      // (a remove plus an add) breaks consumers that read it.
      [`${root}/properties`]: BREAKING,
      [`${root}/properties/*`]: { add: 'non-breaking', remove: 'breaking', edit: 'breaking' },
      [`${root}/properties/*/description`]: DOCS,
      [`${root}/properties/*/title`]: DOCS,
      [`${root}/properties/*/examples`]: DOCS,
      [`${root}/properties/*/examples/*`]: DOCS,
      // Type, format, pattern, const: any change may reject what a consumer relies on
      // or send what it cannot read.
      [`${root}/properties/*/type`]: BREAKING,
      [`${root}/properties/*/format`]: BREAKING,
      [`${root}/properties/*/pattern`]: BREAKING,
      [`${root}/properties/*/const`]: BREAKING,
      // An enum (Phase) may grow; a value may not go or change.
      [`${root}/properties/*/enum`]: BREAKING,
      [`${root}/properties/*/enum/*`]: { add: 'non-breaking', remove: 'breaking', edit: 'breaking' },
      // A producer-only keyword may become producer-only (the consumer side relaxes);
      // taking one back makes consumers stricter.
      [`${root}/properties/*/x-producer-only`]: { add: 'non-breaking', remove: 'breaking', edit: 'breaking' },
      [`${root}/properties/*/x-producer-only/*`]: { add: 'non-breaking', remove: 'breaking', edit: 'breaking' },
      [`${root}/x-producer-only`]: { add: 'non-breaking', remove: 'breaking', edit: 'breaking' },
      [`${root}/x-producer-only/*`]: { add: 'non-breaking', remove: 'breaking', edit: 'breaking' },
      // Any change to the required list: a new required field is not "optional", and
      // a field that stops being required may stop coming.
      [`${root}/required`]: BREAKING,
      [`${root}/required/*`]: BREAKING,
      [`${root}/additionalProperties`]: BREAKING,
      [`${root}/type`]: BREAKING,
    });
  }
  for (const root of EXAMPLE_ROOTS) {
    for (const p of ['examples', 'examples/*', 'examples/*/name', 'examples/*/summary',
      'examples/*/headers', 'examples/*/headers/*', 'examples/*/payload', 'examples/*/payload/*']) {
      o[`${root}/${p}`] = DOCS;
    }
  }
  return o;
}

// The dereferenced document as plain JSON, without the parser's own annotations
// (x-parser-schema-id and the like: generated names that shift when a schema moves).
const dereferenced = new Map();
async function contractJson(text, source) {
  if (!dereferenced.has(text)) {
    const { document, errors } = await parse(text, source);
    if (!document || errors.length > 0) {
      throw new Error(`${source}: not a valid AsyncAPI document:\n${errors.join('\n')}`);
    }
    const strip = (node) => {
      if (Array.isArray(node)) return node.map(strip);
      if (node === null || typeof node !== 'object') return node;
      return Object.fromEntries(
        Object.entries(node).filter(([k]) => !k.startsWith('x-parser-')).map(([k, v]) => [k, strip(v)]),
      );
    };
    dereferenced.set(text, strip(document.json()));
  }
  return dereferenced.get(text);
}

// Returns { breaking, nonBreaking, unclassified } between two document texts.
async function compare(releasedText, currentText) {
  const { diff } = require('@asyncapi/diff');
  const released = await contractJson(releasedText, 'released');
  const current = await contractJson(currentText, 'current');
  const out = diff(released, current, { override: compatOverrides() });
  const result = { breaking: out.breaking(), nonBreaking: out.nonBreaking(), unclassified: out.unclassified() };
  // The document's AsyncAPI version (`asyncapi`) says which spec the document is
  // written in, not what a consumer receives: a move within one major version (3.0.0
  // to 3.1.0, which AsyncAPI keeps backward compatible) changes no message, topic or
  // header. @asyncapi/diff calls any edit of it breaking; a move to another major is.
  const major = (v) => String(v).split('.')[0];
  const sameMajor = (c) => c.path === '/asyncapi' && c.action === 'edit' && major(released.asyncapi) === major(current.asyncapi);
  result.nonBreaking.push(...result.breaking.filter(sameMajor));
  result.breaking = result.breaking.filter((c) => !sameMajor(c));
  return result;
}

async function compat(releasedFile, currentFile) {
  const r = await compare(fs.readFileSync(releasedFile, 'utf8'), fs.readFileSync(currentFile, 'utf8'));
  const show = (c) => `  ${c.action} ${c.path}`;
  if (r.nonBreaking.length) console.log(`compatible changes:\n${r.nonBreaking.map(show).join('\n')}`);
  if (r.breaking.length) console.error(`BREAKING changes:\n${r.breaking.map(show).join('\n')}`);
  if (r.unclassified.length) {
    console.error(
      `unclassified changes (classify them in contracts/tooling/contract.cjs compatOverrides):\n` +
        r.unclassified.map(show).join('\n'),
    );
  }
  if (r.breaking.length || r.unclassified.length) {
    console.error(
      `${currentFile} is not compatible with ${releasedFile}. A breaking change needs a new ` +
        'contract version: a new topic with the next ContractVersion (see docs/event-contract.md).',
    );
    return 1;
  }
  console.log(`${currentFile}: compatible with ${releasedFile}`);
  return 0;
}

module.exports = { parse, compare, derive, schemas, compatOverrides, VERSIONS };

async function main(argv) {
  const [command, ...args] = argv;
  switch (command) {
    case 'validate':
      return args.length ? validate(args) : usage();
    case 'generate':
      return generate(args.includes('--check'));
    case 'messages':
      return messages();
    case 'compat':
      return args.length === 2 ? compat(args[0], args[1]) : usage();
    default:
      return usage();
  }
}

function usage() {
  console.error('usage: contract.cjs validate FILE... | generate [--check] | messages | compat RELEASED CURRENT');
  return 2;
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e) => {
      console.error(e && e.stack ? e.stack : String(e));
      process.exit(1);
    },
  );
}
