#!/usr/bin/env node
// The event contract's checks, run by scripts/contract-check.sh (which installs the
// pinned packages of package-lock.json and sets NODE_PATH to them).
//
//   node contract.cjs validate FILE...        AsyncAPI documents, with the official parser
//   node contract.cjs generate [--check]      the two JSON Schemas from contracts/asyncapi.yaml
//   node contract.cjs messages                the documents' examples and the case table,
//                                             against both generated schemas (ajv)
//   node contract.cjs compat RELEASED CURRENT fails on a change the evolution rules forbid
//
// Exit status: 0 when every check passed, 1 when one failed, 2 on a usage error.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const yaml = require('js-yaml');

const CONTRACTS = path.resolve(__dirname, '..');
const SOURCE = path.join(CONTRACTS, 'asyncapi.yaml');
const PRODUCER = path.join(CONTRACTS, 'booking-expired.v1.schema.json');
const CONSUMER = path.join(CONTRACTS, 'booking-expired.v1.consumer.schema.json');
const CASES = path.join(CONTRACTS, 'validation-cases.json');
const PAYLOAD_SCHEMA = 'BookingExpiredPayload';

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

async function validate(files) {
  let failed = false;
  for (const file of files) {
    const { document, errors, warnings } = await parse(fs.readFileSync(file, 'utf8'), file);
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

function payloadSource() {
  const doc = yaml.load(fs.readFileSync(SOURCE, 'utf8'));
  const schema = doc.components && doc.components.schemas && doc.components.schemas[PAYLOAD_SCHEMA];
  if (!schema) throw new Error(`${SOURCE} has no components.schemas.${PAYLOAD_SCHEMA}`);
  return schema;
}

function schemas() {
  const source = payloadSource();
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
    'Generated from contracts/asyncapi.yaml (components.schemas.BookingExpiredPayload) ' +
    'by scripts/contract-check.sh: do not edit by hand.';
  const producer = {
    ...head(
      'urn:pin:crm:booking-expired:v1:producer',
      'BookingExpiredEvent v1: producer schema (strict)',
      'Exactly what booking-expire publishes on pin.crm.booking-expired.v1. Consumers ' +
        'must NOT validate with this schema: use booking-expired.v1.consumer.schema.json. ' +
        'Formats (uuid, date-time) are meant to be asserted. ' + generated,
    ),
    ...body(derive(source, false)),
  };
  const consumer = {
    ...head(
      'urn:pin:crm:booking-expired:v1:consumer',
      'BookingExpiredEvent v1: consumer schema (tolerant)',
      'What a consumer of pin.crm.booking-expired.v1 must accept under the evolution ' +
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
  const { producer, consumer } = schemas();
  let stale = false;
  for (const [file, schema] of [[PRODUCER, producer], [CONSUMER, consumer]]) {
    const want = render(schema);
    const have = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : null;
    if (have === want) {
      console.log(`${path.relative(CONTRACTS, file)}: up to date`);
    } else if (check) {
      stale = true;
      console.error(
        `${path.relative(CONTRACTS, file)} is not what contracts/asyncapi.yaml generates: ` +
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

function validators() {
  const Ajv2020 = require('ajv/dist/2020').default;
  const addFormats = require('ajv-formats').default;
  const compile = (file) => {
    // strict mode off: the producer schema carries the x-producer-only annotation.
    const ajv = new Ajv2020({ allErrors: true, strict: false, validateFormats: true });
    addFormats(ajv, { mode: 'full', formats: ['date-time', 'uuid'] });
    return ajv.compile(JSON.parse(fs.readFileSync(file, 'utf8')));
  };
  return { producer: compile(PRODUCER), consumer: compile(CONSUMER) };
}

function messages() {
  const v = validators();
  let failed = 0;
  let checked = 0;
  const expect = (name, payload, want) => {
    for (const side of ['producer', 'consumer']) {
      const ok = v[side](payload);
      checked += 1;
      if (ok !== want[side]) {
        failed += 1;
        const why = ok ? 'passed' : `failed: ${v[side].errors.map((e) => `${e.instancePath} ${e.message}`).join('; ')}`;
        console.error(`${name}: the ${side} schema should ${want[side] ? 'accept' : 'reject'} it but ${why}`);
      }
    }
  };
  // Every example of every message must be a valid message of today's producer.
  const doc = yaml.load(fs.readFileSync(SOURCE, 'utf8'));
  for (const [name, message] of Object.entries(doc.components.messages)) {
    for (const example of message.examples || []) {
      expect(`asyncapi.yaml example ${name}/${example.name}`, example.payload, { producer: true, consumer: true });
    }
  }
  const table = JSON.parse(fs.readFileSync(CASES, 'utf8'));
  for (const c of table.cases) {
    expect(`validation-cases.json "${c.name}"`, c.payload, { producer: c.producer, consumer: c.consumer });
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
  return { breaking: out.breaking(), nonBreaking: out.nonBreaking(), unclassified: out.unclassified() };
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
        'contract version: a .v2 topic with ContractVersion 2 (see docs/event-contract.md).',
    );
    return 1;
  }
  console.log(`${currentFile}: compatible with ${releasedFile}`);
  return 0;
}

module.exports = { parse, compare, derive, schemas, compatOverrides };

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
